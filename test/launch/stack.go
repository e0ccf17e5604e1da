// Package launch starts the gateway's processes, the one way `gateway-local`,
// the end-to-end tests and the benchmarks do it: fake vendors
// (cmd/fakevendor), redis-server, the sidecar (`gateway serve`) and Envoy
// with the bootstrap rendered from gateway.yaml, on free loopback ports.
// Everything returns errors; launchtest wraps it for tests.
package launch

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
)

// Vendor credentials the fakes demand and Envoy injects.
const (
	AlphaVendorKey = "vendor-alpha-secret"
	BetaVendorKey  = "vendor-beta-secret"
)

// Admin keys the fakes' usage reports demand and Envoy injects when an
// upstream's admin_credential_env is AdminKeyEnv's.
const (
	AlphaAdminKey = "vendor-alpha-admin"
	BetaAdminKey  = "vendor-beta-admin"
)

// AdminKeyEnv names the environment variable Envoy reads an upstream's
// admin key from.
func AdminKeyEnv(upstream string) string { return strings.ToUpper(upstream) + "_ADMIN_KEY" }

// startTimeout bounds how long any one process may take to become ready.
const startTimeout = 60 * time.Second

// TB is what the test helpers of a Stack (Do, NewAccount, Usage, the fakes'
// controls) report failures to; *testing.T satisfies it.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Restartable is a Redis the test can stop and start again on its port.
type Restartable interface {
	Stop()
	Start()
}

// Options change how the stack starts.
type Options struct {
	// Dir holds logs, the rendered configs and the spool; empty means a new
	// temporary directory, removed by Close.
	Dir string
	// Configure edits the config before it is written and rendered.
	Configure func(*config.Config)
	// RedisAddr uses an existing Redis instead of starting one.
	RedisAddr string
	// RedisCluster uses an existing Redis Cluster (its nodes' addresses).
	RedisCluster []string
	// SidecarArgs are extra flags for `gateway serve`.
	SidecarArgs []string
	// SidecarEnv are extra environment variables for the sidecar.
	SidecarEnv []string
	// Bare starts Envoy without the ext_proc filter and no sidecar.
	Bare bool
	// ExtProcAddr points Envoy's ext_proc filter at a processor the caller
	// runs (the benchmark's null processor); no sidecar and no Redis start.
	ExtProcAddr string
	// Bootstrap, when set, is the Envoy bootstrap instead of the rendered
	// one: an operator's own Envoy with the gateway merged in.
	Bootstrap func(*config.Config) ([]byte, error)
	// Pool, above 1, gives each upstream a pool of that many vendor keys,
	// k1, k2, ..., whose secrets are PoolSecret's; the fakes accept each.
	Pool int
}

// PoolKeys names the keys of a pool of n, as Options.Pool configures it.
func PoolKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i+1)
	}
	return keys
}

// PoolSecret is the secret of key in upstream's pool (Options.Pool).
func PoolSecret(upstream, key string) string { return "vendor-" + upstream + "-secret-" + key }

// poolEnv names the environment variable Envoy reads key's secret from.
func poolEnv(upstream, key string) string {
	return strings.ToUpper(upstream) + "_KEY_" + strings.ToUpper(key)
}

// Stack is a running gateway.
type Stack struct {
	// T receives the failures of the test helpers; nil outside tests.
	T        TB
	Dir      string
	Config   *config.Config
	URL      string // Envoy's public listener, http://127.0.0.1:PORT
	AdminURL string // Envoy's admin interface
	// ControlURL is the sidecar's control server, bypassing Envoy.
	ControlURL string
	// Redis can be stopped and started when the caller provided one that
	// can; nil otherwise.
	Redis     Restartable
	RedisAddr string
	RDB       redis.UniversalClient
	Store     *SettledStore
	Primary   *Fake
	Reserve   *Fake
	Sidecar   *Process
	Envoy     *Process

	redisProc *Process // the redis-server Up started, if any
	// controlClient reaches the sidecar's control server (TLS when
	// configured).
	controlClient *http.Client
	opts          Options
	configPath    string
	removeDir     bool
}

// ConfigPath is the gateway.yaml the stack's processes read.
func (s *Stack) ConfigPath() string { return s.configPath }

// Up starts a stack. On error, whatever had started is stopped again.
func Up(o Options) (s *Stack, err error) {
	s = &Stack{Dir: o.Dir, opts: o}
	if s.Dir == "" {
		if s.Dir, err = os.MkdirTemp("", "gateway-stack-"); err != nil {
			return nil, err
		}
		s.removeDir = true
	}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()

	s.RedisAddr = o.RedisAddr
	noSidecar := o.Bare || o.ExtProcAddr != ""
	if s.RedisAddr == "" && len(o.RedisCluster) == 0 && !noSidecar {
		if err := s.startRedis(ctx); err != nil {
			return s, err
		}
	}
	fake, err := BuildBinary("fakevendor")
	if err != nil {
		return s, err
	}
	alphaKeys, betaKeys := AlphaVendorKey, BetaVendorKey
	for _, k := range PoolKeys(o.Pool) {
		alphaKeys += "," + PoolSecret("alpha", k)
		betaKeys += "," + PoolSecret("beta", k)
	}
	env := []string{"FAKE_MESSAGES_KEY=" + alphaKeys, "FAKE_CHAT_COMPLETIONS_KEY=" + betaKeys,
		"FAKE_MESSAGES_ADMIN_KEY=" + AlphaAdminKey, "FAKE_CHAT_COMPLETIONS_ADMIN_KEY=" + BetaAdminKey}
	if s.Primary, err = StartFake(ctx, s.Dir, fake, "primary", env); err != nil {
		return s, err
	}
	if s.Reserve, err = StartFake(ctx, s.Dir, fake, "reserve", env); err != nil {
		return s, err
	}

	root, err := RepoRoot()
	if err != nil {
		return s, err
	}
	cfg, err := config.Load(filepath.Join(root, "gateway.yaml"))
	if err != nil {
		return s, err
	}
	addrs, err := FreeAddrs(8)
	if err != nil {
		return s, err
	}
	cfg.Listeners = config.Listeners{
		Public: addrs[0], EnvoyAdmin: addrs[1], ExtProc: addrs[2], Control: addrs[3], Admin: addrs[4], Probes: addrs[5],
		Console: addrs[6], Relay: addrs[7],
	}
	if o.ExtProcAddr != "" {
		cfg.Listeners.ExtProc = o.ExtProcAddr
	}
	cfg.Store.RedisURL = ""
	cfg.Store.SpoolDir = filepath.Join(s.Dir, "spool")
	cfg.Envoy.AccessLog = filepath.Join(s.Dir, "envoy-access.log")
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		// The fakes stand in for the configured endpoints, regional
		// processing (and its price uplift) included.
		u.Primary = config.Endpoint{URL: s.Primary.Addrs.URL(u.Format), Region: "primary", RegionalProcessing: u.Primary.RegionalProcessing}
		u.Reserve = config.Endpoint{URL: s.Reserve.Addrs.URL(u.Format), Region: "reserve", RegionalProcessing: u.Reserve.RegionalProcessing}
		u.CredentialEnv = strings.ToUpper(u.Name) + "_API_KEY"
		// Tests steer the fakes per request, and find their requests at
		// the fakes, with these headers.
		u.ForwardHeaders = append(u.ForwardHeaders, FakeControlsHeader, TestIDHeader)
		if o.Pool > 1 {
			u.CredentialEnv = ""
			for _, k := range PoolKeys(o.Pool) {
				u.VendorKeys = append(u.VendorKeys, config.VendorKey{Name: k, Env: poolEnv(u.Name, k), Weight: 1})
			}
		}
	}
	// GATEWAY_TEST_LEASES=on|off runs the stack with limits.leases so
	// (the money suites run both ways); a test's own Configure wins.
	if v := os.Getenv("GATEWAY_TEST_LEASES"); v != "" {
		cfg.Limits.Leases = v
	}
	if o.Configure != nil {
		o.Configure(cfg)
	}
	s.Config = cfg
	s.configPath = filepath.Join(s.Dir, "gateway.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return s, err
	}
	if err := os.WriteFile(s.configPath, b, 0o644); err != nil {
		return s, err
	}
	if _, err := config.Load(s.configPath); err != nil {
		return s, fmt.Errorf("the stack's config does not load: %w", err)
	}

	if !noSidecar {
		if len(o.RedisCluster) > 0 {
			s.RDB = redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.RedisCluster})
		} else {
			s.RDB = redis.NewClient(&redis.Options{Addr: s.RedisAddr})
		}
		s.Store = &SettledStore{Store: store.New(s.RDB, store.Options{}), stack: s}
		if err := s.startSidecar(ctx); err != nil {
			return s, err
		}
	}
	if err := s.startEnvoy(ctx); err != nil {
		return s, err
	}
	if s.controlClient != nil {
		// Ready once the sidecar has read the endpoints' state from Envoy.
		if err := WaitHTTPClient(ctx, s.controlClient, s.ControlURL+"/health", s.Sidecar); err != nil {
			return s, err
		}
	}
	s.URL = "http://" + cfg.Listeners.Public
	s.AdminURL = "http://" + cfg.Listeners.EnvoyAdmin
	return s, nil
}

// startRedis runs a throwaway redis-server: no persistence, loopback only.
func (s *Stack) startRedis(ctx context.Context) error {
	addrs, err := FreeAddrs(1)
	if err != nil {
		return err
	}
	port := addrs[0][strings.LastIndexByte(addrs[0], ':')+1:]
	s.redisProc, err = StartProcess("redis", "redis-server",
		[]string{"--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no", "--dir", s.Dir},
		nil, filepath.Join(s.Dir, "redis.log"))
	if err != nil {
		return err
	}
	s.RedisAddr = addrs[0]
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr, MaxRetries: -1})
	defer rdb.Close()
	return poll(ctx, s.redisProc, "waiting for redis-server", func() bool {
		return rdb.Ping(ctx).Err() == nil
	})
}

// StartSidecar starts `gateway serve` and waits until it is healthy; tests
// call it again after stopping the sidecar.
func (s *Stack) StartSidecar() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := s.startSidecar(ctx); err != nil {
		return err
	}
	if s.Envoy == nil {
		return nil
	}
	return WaitHTTPClient(ctx, s.controlClient, s.ControlURL+"/health", s.Sidecar)
}

func (s *Stack) startSidecar(ctx context.Context) error {
	bin, err := BuildBinary("gateway")
	if err != nil {
		return err
	}
	args := append([]string{"serve", "--config", s.configPath, "--log-level", "debug"}, s.opts.SidecarArgs...)
	redisURL := "redis://" + s.RedisAddr
	if len(s.opts.RedisCluster) > 0 {
		redisURL = "redis+cluster://" + strings.Join(s.opts.RedisCluster, ",")
	}
	// No vendor key: Envoy injects it, and the sidecar must work without.
	env := append([]string{"REDIS_URL=" + redisURL}, s.opts.SidecarEnv...)
	s.Sidecar, err = StartProcess("sidecar", bin, args, env, filepath.Join(s.Dir, "sidecar.log"))
	if err != nil {
		return err
	}
	s.ControlURL = "http://" + s.Config.Listeners.Control
	client := &http.Client{Timeout: time.Second}
	if t := s.Config.Listeners.TLS; t.Enabled() {
		// Behind mutual TLS: ask with Envoy's client certificate.
		_, port, _ := net.SplitHostPort(s.Config.Listeners.Control)
		s.ControlURL = "https://127.0.0.1:" + port
		if client, err = tlsClient(t); err != nil {
			return err
		}
	}
	s.controlClient = client
	// Up: /health waits for Envoy's endpoints, which start after it.
	return WaitHTTPClient(ctx, client, s.ControlURL+"/livez", s.Sidecar)
}

// tlsClient presents the client certificate of t and trusts only its CA.
func tlsClient(t config.SidecarTLS) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &http.Client{Timeout: time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool},
	}}, nil
}

func (s *Stack) startEnvoy(ctx context.Context) error {
	bin, err := FindEnvoy()
	if err != nil {
		return err
	}
	env := []string{"ALPHA_API_KEY=" + AlphaVendorKey, "BETA_API_KEY=" + BetaVendorKey,
		AdminKeyEnv("alpha") + "=" + AlphaAdminKey, AdminKeyEnv("beta") + "=" + BetaAdminKey}
	for _, u := range []string{"alpha", "beta"} {
		for _, k := range PoolKeys(s.opts.Pool) {
			env = append(env, poolEnv(u, k)+"="+PoolSecret(u, k))
		}
	}
	if s.opts.Bootstrap != nil {
		boot, err := s.opts.Bootstrap(s.Config)
		if err != nil {
			return err
		}
		s.Envoy, err = startEnvoyOn(ctx, bin, s.Config, boot, s.Dir, env)
		return err
	}
	s.Envoy, err = StartEnvoy(ctx, bin, s.Config, envoy.Options{Bare: s.opts.Bare, NodeID: "test"}, s.Dir, env)
	return err
}

// StartEnvoy renders the bootstrap of cfg into dir, starts Envoy on it with
// env added to its environment (the vendor keys it injects) and waits until
// its admin interface says ready.
func StartEnvoy(ctx context.Context, bin string, cfg *config.Config, o envoy.Options, dir string, env []string) (*Process, error) {
	boot, err := envoy.Render(cfg, o)
	if err != nil {
		return nil, err
	}
	return startEnvoyOn(ctx, bin, cfg, boot, dir, env)
}

// startEnvoyOn starts Envoy on the bootstrap boot, written into dir, and
// waits until the admin interface of cfg says ready.
func startEnvoyOn(ctx context.Context, bin string, cfg *config.Config, boot []byte, dir string, env []string) (*Process, error) {
	path := filepath.Join(dir, "envoy.yaml")
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		return nil, err
	}
	p, err := StartProcess("envoy", bin, []string{"-c", path, "--disable-hot-restart", "--log-level", "warn", "--concurrency", "2"},
		env, filepath.Join(dir, "envoy.log"))
	if err != nil {
		return nil, err
	}
	if err := WaitHTTP(ctx, "http://"+cfg.Listeners.EnvoyAdmin+"/ready", p); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// Logs returns the tails of the sidecar's and Envoy's logs, for a failure
// report.
func (s *Stack) Logs() string {
	var b strings.Builder
	for _, p := range []*Process{s.Sidecar, s.Envoy} {
		if p != nil {
			fmt.Fprintf(&b, "--- %s log (tail) ---\n%s\n", p.Name, p.Tail(4000))
		}
	}
	return b.String()
}

// Close stops every process of the stack, newest first.
func (s *Stack) Close() {
	for _, p := range []*Process{s.Envoy, s.Sidecar} {
		if p != nil {
			p.Stop()
		}
	}
	for _, f := range []*Fake{s.Reserve, s.Primary} {
		if f != nil {
			f.Process.Stop()
		}
	}
	if s.RDB != nil {
		s.RDB.Close()
	}
	if s.redisProc != nil {
		s.redisProc.Stop()
	}
	if s.removeDir {
		os.RemoveAll(s.Dir)
	}
}

// SettledStore is the stack's store as tests read it. The sidecar settles a
// reply just after releasing its last chunk; reads of usage, the ledger and
// holds first wait until the sidecar has no settlement queued, as the
// sidecar's own /v1/usage does for the account it reads.
type SettledStore struct {
	*store.Store
	stack *Stack
}

// Usage waits for queued settlements, then reads the account's usage.
func (s *SettledStore) Usage(ctx context.Context, accountID string, p ledger.Period) (ledger.UsageReport, error) {
	s.stack.WaitSettled()
	return s.Store.Usage(ctx, accountID, p)
}

// Ledger waits for queued settlements, then reads the account's ledger.
func (s *SettledStore) Ledger(ctx context.Context, accountID, after string, limit int) ([]ledger.Entry, string, error) {
	s.stack.WaitSettled()
	return s.Store.Ledger(ctx, accountID, after, limit)
}

// OpenHolds waits for queued settlements, then reads the account's holds.
func (s *SettledStore) OpenHolds(ctx context.Context, accountID string) (int64, int64, error) {
	s.stack.WaitSettled()
	return s.Store.OpenHolds(ctx, accountID)
}

// Leased is what an account's leases hold in Redis, nano-USD, over every
// sidecar and key.
func (s *Stack) Leased(acct string) int64 {
	s.T.Helper()
	m, err := s.Store.Leased(context.Background(), acct)
	if err != nil {
		s.T.Fatalf("leases of %s: %v", acct, err)
	}
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// WaitSettled polls the sidecar's gateway_settlements_pending until it is
// zero, for at most ten seconds. A sidecar that is not running has nothing
// queued.
func (s *Stack) WaitSettled() {
	if s.Sidecar == nil || s.Sidecar.Exited() {
		return
	}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get(s.ControlURL + "/metrics")
		if err != nil {
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		pending := ""
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "gateway_settlements_pending "); ok {
				pending = v
			}
		}
		if pending == "" || pending == "0" {
			return
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
	}
	if s.T != nil {
		s.T.Logf("the sidecar still had settlements queued after 10s")
	}
}

// Account is a test account with one model key and one read-only token.
type Account struct {
	ID       string
	Key      string // cr_…
	ReadOnly string // ro_…
}

// NewAccount creates an account through the store's Go API.
func (s *Stack) NewAccount(balanceUSD float64, limits account.Limits) Account {
	s.T.Helper()
	ctx := context.Background()
	a, err := s.Store.CreateAccount(ctx, "test", pricing.NanoUSD(balanceUSD), limits)
	if err != nil {
		s.T.Fatalf("%v", err)
	}
	key, _, err := s.Store.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{Label: "test"})
	if err != nil {
		s.T.Fatalf("%v", err)
	}
	ro, _, err := s.Store.CreateKey(ctx, a.ID, account.ReadOnlyToken, account.KeyOptions{Label: "test"})
	if err != nil {
		s.T.Fatalf("%v", err)
	}
	return Account{ID: a.ID, Key: key, ReadOnly: ro}
}

// Do sends a request to the gateway and returns the response with its body
// read.
func (s *Stack) Do(method, path string, header map[string]string, body []byte) (*http.Response, []byte) {
	s.T.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		s.T.Fatalf("%v", err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.T.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.T.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp, b
}

// Usage reads GET /v1/usage through Envoy.
func (s *Stack) Usage(token, period string) map[string]any {
	s.T.Helper()
	resp, b := s.Do("GET", "/v1/usage?period="+period, map[string]string{"Authorization": "Bearer " + token}, nil)
	if resp.StatusCode != 200 {
		s.T.Fatalf("usage: %d %s", resp.StatusCode, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		s.T.Fatalf("%v", err)
	}
	return m
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]error{}
)

// BuildBinary returns the path of one of the project's commands (cmd/NAME):
// from GATEWAY_BIN_DIR when set, else built once per process.
func BuildBinary(name string) (string, error) {
	if d := os.Getenv("GATEWAY_BIN_DIR"); d != "" {
		return filepath.Join(d, name), nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir == "" {
		d, err := os.MkdirTemp("", "gateway-bin-")
		if err != nil {
			return "", err
		}
		buildDir = d
	}
	err, ok := built[name]
	if !ok {
		root, rerr := RepoRoot()
		if rerr != nil {
			return "", rerr
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, name), "./cmd/"+name)
		cmd.Dir = root
		if out, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("go build ./cmd/%s: %v\n%s", name, e, out)
		}
		built[name] = err
	}
	if err != nil {
		return "", err
	}
	return filepath.Join(buildDir, name), nil
}
