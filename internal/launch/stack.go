// Package stack starts the whole gateway for end-to-end tests and benchmarks,
// as real processes on free loopback ports: redis-server, two fake vendors
// (primary and reserve, each serving both wire formats), the sidecar
// (`gateway serve`) and Envoy with the bootstrap rendered from gateway.yaml.
package launch

import (
	"bytes"
	"context"
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
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
)

// Vendor credentials the fakes demand and the sidecar sends.
const (
	AlphaVendorKey = "vendor-alpha-secret"
	BetaVendorKey  = "vendor-beta-secret"
)

// Options change how the stack starts.
type Options struct {
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
}

// Stack is a running gateway.
type Stack struct {
	TB       testing.TB
	Dir      string
	Config   *config.Config
	URL      string // Envoy's public listener, http://127.0.0.1:PORT
	AdminURL string // Envoy's admin interface
	// ControlURL is the sidecar's control server, bypassing Envoy.
	ControlURL string
	Redis      *redistest.Server // nil when Options.RedisAddr was given
	RedisAddr  string
	RDB        redis.UniversalClient
	Store      *SettledStore
	Primary    *Fake
	Reserve    *Fake
	Sidecar    *Process
	Envoy      *Process

	opts       Options
	configPath string
}

// Start starts a stack and stops it when the test ends.
func Start(tb testing.TB, o Options) *Stack {
	tb.Helper()
	s := &Stack{TB: tb, Dir: tb.TempDir(), opts: o}
	tb.Cleanup(s.stop)

	s.RedisAddr = o.RedisAddr
	noSidecar := o.Bare || o.ExtProcAddr != ""
	if s.RedisAddr == "" && len(o.RedisCluster) == 0 && !noSidecar {
		s.Redis = redistest.NewServer(tb)
		s.RedisAddr = s.Redis.Addr
	}
	s.Primary = startFake(tb, s.Dir, "primary")
	s.Reserve = startFake(tb, s.Dir, "reserve")

	cfg, err := config.Load(filepath.Join(RepoRoot(tb), "gateway.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	addrs := freeAddrs(tb, 5)
	cfg.Listeners = config.Listeners{
		Public: addrs[0], EnvoyAdmin: addrs[1], ExtProc: addrs[2], Control: addrs[3], Admin: addrs[4],
	}
	if o.ExtProcAddr != "" {
		cfg.Listeners.ExtProc = o.ExtProcAddr
	}
	cfg.Store.RedisURL = ""
	cfg.Store.SpoolDir = filepath.Join(s.Dir, "spool")
	cfg.Envoy.AccessLog = filepath.Join(s.Dir, "envoy-access.log")
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		pick := func(f *Fake) string {
			if u.Format == config.FormatMessages {
				return "http://" + f.Addrs.Alpha
			}
			return "http://" + f.Addrs.Beta
		}
		u.Primary = config.Endpoint{URL: pick(s.Primary), Region: "primary"}
		u.Reserve = config.Endpoint{URL: pick(s.Reserve), Region: "reserve"}
		u.CredentialEnv = strings.ToUpper(u.Name) + "_API_KEY"
	}
	if o.Configure != nil {
		o.Configure(cfg)
	}
	s.Config = cfg
	s.configPath = filepath.Join(s.Dir, "gateway.yaml")
	b, err := yaml.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(s.configPath, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	if _, err := config.Load(s.configPath); err != nil {
		tb.Fatalf("test config does not load: %v", err)
	}

	if !noSidecar {
		if len(o.RedisCluster) > 0 {
			s.RDB = redis.NewClusterClient(&redis.ClusterOptions{Addrs: o.RedisCluster})
		} else {
			s.RDB = redis.NewClient(&redis.Options{Addr: s.RedisAddr})
		}
		s.Store = &SettledStore{Store: store.New(s.RDB, store.Options{}), stack: s}
		s.StartSidecar()
	}
	s.startEnvoy()
	s.URL = "http://" + cfg.Listeners.Public
	s.AdminURL = "http://" + cfg.Listeners.EnvoyAdmin
	return s
}

// StartSidecar starts `gateway serve` and waits until it is healthy.
func (s *Stack) StartSidecar() {
	tb := s.TB
	tb.Helper()
	args := append([]string{"serve", "--config", s.configPath, "--log-level", "debug"}, s.opts.SidecarArgs...)
	redisURL := "redis://" + s.RedisAddr
	if len(s.opts.RedisCluster) > 0 {
		redisURL = "redis+cluster://" + strings.Join(s.opts.RedisCluster, ",")
	}
	env := append([]string{
		"REDIS_URL=" + redisURL,
		"ALPHA_API_KEY=" + AlphaVendorKey,
		"BETA_API_KEY=" + BetaVendorKey,
	}, s.opts.SidecarEnv...)
	s.Sidecar = startProcess(tb, s.Dir, "sidecar", Binary(tb, "gateway"), args, env)
	s.ControlURL = "http://" + s.Config.Listeners.Control
	waitHTTP(tb, s.ControlURL+"/health", s.Sidecar)
}

func (s *Stack) startEnvoy() {
	tb := s.TB
	boot, err := envoy.Render(s.Config, envoy.Options{Bare: s.opts.Bare, NodeID: "test"})
	if err != nil {
		tb.Fatal(err)
	}
	path := filepath.Join(s.Dir, "envoy.yaml")
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		tb.Fatal(err)
	}
	s.Envoy = startProcess(tb, s.Dir, "envoy", EnvoyBinary(tb),
		[]string{"-c", path, "--disable-hot-restart", "--log-level", "warn", "--concurrency", "2"}, nil)
	waitHTTP(tb, "http://"+s.Config.Listeners.EnvoyAdmin+"/ready", s.Envoy)
}

func (s *Stack) stop() {
	if s.TB.Failed() {
		for _, p := range []*Process{s.Sidecar, s.Envoy} {
			if p != nil {
				s.TB.Logf("--- %s log (tail) ---\n%s", p.Name, p.Tail(4000))
			}
		}
	}
	for _, p := range []*Process{s.Envoy, s.Sidecar} {
		if p != nil {
			p.Stop()
		}
	}
	if s.RDB != nil {
		s.RDB.Close()
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
func (s *SettledStore) Usage(ctx context.Context, accountID string, p store.Period) (store.UsageReport, error) {
	s.stack.WaitSettled()
	return s.Store.Usage(ctx, accountID, p)
}

// Ledger waits for queued settlements, then reads the account's ledger.
func (s *SettledStore) Ledger(ctx context.Context, accountID, after string, limit int) ([]store.LedgerEntry, string, error) {
	s.stack.WaitSettled()
	return s.Store.Ledger(ctx, accountID, after, limit)
}

// OpenHolds waits for queued settlements, then reads the account's holds.
func (s *SettledStore) OpenHolds(ctx context.Context, accountID string) (int64, int64, error) {
	s.stack.WaitSettled()
	return s.Store.OpenHolds(ctx, accountID)
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
	s.TB.Logf("the sidecar still had settlements queued after 10s")
}

// Account is a test account with one model key and one read-only token.
type Account struct {
	ID       string
	Key      string // cr_…
	ReadOnly string // ro_…
}

// NewAccount creates an account through the store's Go API.
func (s *Stack) NewAccount(balanceUSD float64, limits store.Limits) Account {
	s.TB.Helper()
	ctx := context.Background()
	a, err := s.Store.CreateAccount(ctx, "test", pricing.NanoUSD(balanceUSD), limits)
	if err != nil {
		s.TB.Fatal(err)
	}
	key, _, err := s.Store.CreateKey(ctx, a.ID, store.ModelKey, store.KeyOptions{Label: "test"})
	if err != nil {
		s.TB.Fatal(err)
	}
	ro, _, err := s.Store.CreateKey(ctx, a.ID, store.ReadOnlyToken, store.KeyOptions{Label: "test"})
	if err != nil {
		s.TB.Fatal(err)
	}
	return Account{ID: a.ID, Key: key, ReadOnly: ro}
}

// Do sends a request to the gateway and returns the response with its body
// read.
func (s *Stack) Do(method, path string, header map[string]string, body []byte) (*http.Response, []byte) {
	s.TB.Helper()
	req, err := http.NewRequest(method, s.URL+path, bytes.NewReader(body))
	if err != nil {
		s.TB.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.TB.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.TB.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return resp, b
}

// Usage reads GET /v1/usage through Envoy.
func (s *Stack) Usage(token, period string) map[string]any {
	s.TB.Helper()
	resp, b := s.Do("GET", "/v1/usage?period="+period, map[string]string{"Authorization": "Bearer " + token}, nil)
	if resp.StatusCode != 200 {
		s.TB.Fatalf("usage: %d %s", resp.StatusCode, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		s.TB.Fatal(err)
	}
	return m
}

// RepoRoot finds the module root from the working directory.
func RepoRoot(tb testing.TB) string {
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

var (
	buildMu  sync.Mutex
	buildDir string
	built    = map[string]error{}
)

// Binary returns the path of one of the project's commands (cmd/NAME), built
// once per test process, or taken from GATEWAY_BIN_DIR.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	if d := os.Getenv("GATEWAY_BIN_DIR"); d != "" {
		return filepath.Join(d, name)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildDir == "" {
		d, err := os.MkdirTemp("", "gateway-bin-")
		if err != nil {
			tb.Fatal(err)
		}
		buildDir = d
	}
	err, ok := built[name]
	if !ok {
		cmd := exec.Command("go", "build", "-o", filepath.Join(buildDir, name), "./cmd/"+name)
		cmd.Dir = RepoRoot(tb)
		if out, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("go build ./cmd/%s: %v\n%s", name, e, out)
		}
		built[name] = err
	}
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(buildDir, name)
}

// EnvoyBinary is ENVOY_BIN, else the project's .venv/bin/envoy.
func EnvoyBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		return p
	}
	p := filepath.Join(RepoRoot(tb), ".venv", "bin", "envoy")
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("envoy not found at %s: run `make envoy` or set ENVOY_BIN", p)
	}
	return p
}

// freeAddrs returns n distinct loopback addresses whose ports were free at
// the time of the call. All listeners stay open until every port is picked,
// so the kernel cannot hand out the same port twice.
func freeAddrs(tb testing.TB, n int) []string {
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}

// waitHTTP polls url until it answers 200, failing if the process exits or
// 60 seconds pass.
func waitHTTP(tb testing.TB, url string, p *Process) {
	tb.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if p.Exited() {
			tb.Fatalf("%s exited before it was ready:\n%s", p.Name, p.Tail(4000))
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	tb.Fatalf("%s not ready at %s:\n%s", p.Name, url, p.Tail(4000))
}

// Process is a child process of the test.
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
}

func startProcess(tb testing.TB, dir, name, path string, args, env []string) *Process {
	tb.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) { p.Cmd.Process.Signal(sig) }

// Wait blocks until the process exits or the timeout passes, and reports
// whether it exited.
func (p *Process) Wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process: SIGTERM, then SIGKILL after 10 seconds.
func (p *Process) Stop() {
	if p.Exited() {
		return
	}
	p.Signal(syscall.SIGTERM)
	if !p.Wait(10 * time.Second) {
		p.Cmd.Process.Kill()
		<-p.done
	}
}

// Log returns the process's whole log.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Tail returns the last n bytes of the process's log.
func (p *Process) Tail(n int) string {
	s := p.Log()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}
