package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/extproc"
	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
	"github.com/modelgateway/gateway/test/launch"
)

// customEndpoints returns the primary and reserve URLs an upstream is
// pointed at for this run, or empty strings: --endpoint NAME.primary=URL
// and NAME.reserve=URL, else NAME_PRIMARY_URL and NAME_RESERVE_URL, else
// NAME_BASE_URL for both. A reserve without a primary is an error.
func customEndpoints(name string, getenv func(string) string, flags map[string]string) (primary, reserve string, err error) {
	env := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	pick := func(flag, envName string) string {
		if v := flags[name+"."+flag]; v != "" {
			return v
		}
		return getenv(envName)
	}
	primary, reserve = pick("primary", env+"_PRIMARY_URL"), pick("reserve", env+"_RESERVE_URL")
	if base := getenv(env + "_BASE_URL"); base != "" {
		primary, reserve = cmp.Or(primary, base), cmp.Or(reserve, base)
	}
	switch {
	case primary == "" && reserve != "":
		return "", "", fmt.Errorf("upstream %s: a reserve URL without a primary", name)
	case primary != "" && reserve == "":
		reserve = primary
	}
	for _, u := range []string{primary, reserve} {
		if u == "" {
			continue
		}
		if _, err := (config.Endpoint{URL: u}).Parse(); err != nil {
			return "", "", fmt.Errorf("upstream %s: %w", name, err)
		}
	}
	return primary, reserve, nil
}

func runLocal(cfgPath, public string, portOffset int, stateDir, logLevel string, demoUSD float64, overrides map[string]string) error {
	log := newLogger(logLevel)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	// The prices are checked before anything starts: a catalogue missing
	// beside a copied config would otherwise surface as a sidecar that
	// exits after Envoy and the fakes came up.
	if _, err := pricing.NewBook(cfg, operations.All.Modes()); err != nil {
		return fmt.Errorf("prices: %w (a relative catalogue is read from the directory of %s: set catalogue there, or $%s; `make catalogue` installs the catalogue)",
			err, cfgPath, config.CatalogueEnv)
	}
	movedBy := "listeners.public in " + cfgPath + " (or gateway-local --listen)"
	if portOffset != 0 {
		if err := shiftListeners(&cfg.Listeners, portOffset); err != nil {
			return err
		}
		movedBy = "listeners.public in " + cfgPath + " (or another gateway-local --port-offset)"
	}
	if public != "" {
		cfg.Listeners.Public, movedBy = public, "gateway-local --listen"
	}
	cfg.Envoy.AccessLog = "stdout" // goes to the Envoy log file
	if err := checkListeners(cfg.Listeners, cfgPath, movedBy); err != nil {
		return err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	// Logs are this run's only: a failure must not show an earlier run's
	// lines as its cause.
	if old, _ := filepath.Glob(filepath.Join(stateDir, "*.log")); len(old) > 0 {
		for _, f := range old {
			os.Remove(f)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// The store outlives the sidecar, which settles what is queued as it
	// stops.
	storeEnv, closeStore, err := localStore(cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	var children []*launch.Process
	defer func() {
		for i := len(children) - 1; i >= 0; i-- {
			children[i].StopWithin(10 * time.Second)
		}
	}()

	// Each upstream goes to base URL overrides, the real vendor (when its
	// key is set), or the fake vendors. Vendor keys go to Envoy only, which
	// injects them; envoyEnv carries the fakes' keys.
	var envoyEnv []string
	var fakes []string
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		primary, reserve, err := customEndpoints(u.Name, os.Getenv, overrides)
		if err != nil {
			return err
		}
		switch {
		case primary != "":
			u.Primary = config.Endpoint{URL: primary, Region: "custom-primary"}
			u.Reserve = config.Endpoint{URL: reserve, Region: "custom-reserve"}
			if os.Getenv(u.CredentialEnv) == "" {
				u.CredentialEnv = "" // a local server without a key: forward none
			}
			if reserve == primary {
				log.Warn("upstream's primary and reserve are the same server: failover has nowhere to go", "upstream", u.Name)
			}
			log.Info("upstream points at custom servers", "upstream", u.Name, "primary", primary, "reserve", reserve)
		case os.Getenv(u.CredentialEnv) != "":
			log.Info("upstream uses the real vendor", "upstream", u.Name, "primary", u.Primary.URL)
		default:
			fakes = append(fakes, u.Name)
		}
	}
	if len(fakes) > 0 {
		bin, err := launch.FindBinary("fakevendor")
		if err != nil {
			return fmt.Errorf("fake vendors: %w", err)
		}
		// Each upstream's keys get fake secrets, which the fakes of its
		// format accept: a pool's each its own, so that the fakes count
		// the requests of each key (GET /keys).
		var messagesKeys, chatCompletionsKeys []string
		for _, name := range fakes {
			u, _ := cfg.Upstream(name)
			if len(u.VendorKeys) == 0 {
				if u.CredentialEnv == "" {
					u.CredentialEnv = envName(u.Name, "API_KEY")
				}
				key := fakeSecret(u, &messagesKeys, &chatCompletionsKeys)
				envoyEnv = append(envoyEnv, u.CredentialEnv+"="+key)
				continue
			}
			for j := range u.VendorKeys {
				k := &u.VendorKeys[j]
				// The fake's secret replaces the configured one, wherever
				// Envoy would have read it.
				k.Env, k.File, k.SDS = envName(u.Name, k.Name+"_FAKE_KEY"), "", ""
				envoyEnv = append(envoyEnv, k.Env+"="+fakeSecret(u, &messagesKeys, &chatCompletionsKeys))
			}
		}
		// A fake with no key listed would take any: it gets one nobody has.
		for _, keys := range []*[]string{&messagesKeys, &chatCompletionsKeys} {
			if len(*keys) == 0 {
				*keys = []string{"fake-" + randomHex(8)}
			}
		}
		env := []string{"FAKE_MESSAGES_KEY=" + strings.Join(messagesKeys, ","),
			"FAKE_CHAT_COMPLETIONS_KEY=" + strings.Join(chatCompletionsKeys, ",")}
		addrs := map[string]launch.FakeAddrs{}
		for _, name := range []string{"primary", "reserve"} {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			f, err := launch.StartFake(wctx, stateDir, bin, name, env)
			cancel()
			if err != nil {
				return err
			}
			children = append(children, f.Process)
			addrs[name] = f.Addrs
		}
		for _, name := range fakes {
			u, _ := cfg.Upstream(name)
			u.Primary = config.Endpoint{URL: addrs["primary"].URL(u.Format), Region: "local-primary"}
			u.Reserve = config.Endpoint{URL: addrs["reserve"].URL(u.Format), Region: "local-reserve"}
		}
		log.Warn("no vendor keys set: routing to FAKE vendors", "upstreams", strings.Join(fakes, ","))
	}

	// The demo needs a working admin API for gatewayctl: make a token for
	// this run when none is configured. It is written to demo.env (mode
	// 0600); the sidecar inherits it.
	if os.Getenv(admin.TokenEnv) == "" && os.Getenv(admin.TokenFileEnv) == "" {
		os.Setenv(admin.TokenEnv, "adm_"+randomHex(24))
	}
	sc, err := startSidecar(ctx, cfg, stateDir, logLevel, storeEnv)
	if err != nil {
		return err
	}
	children = append(children, sc)
	reloadOnHangup(ctx, sc, cfg, cfgPath, stateDir, log)

	envoyBin, err := launch.FindEnvoy()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ec, err := launch.StartEnvoy(wctx, envoyBin, cfg, envoy.Options{NodeID: "gateway-local"}, stateDir, envoyEnv)
	cancel()
	if err != nil {
		return err
	}
	children = append(children, ec)

	// The banner promises a gateway that serves: wait, briefly, until
	// /health says so (the sidecar reads the endpoints' state from Envoy
	// once a second), so that the first request pasted meets no "not yet
	// known". An upstream that cannot become healthy (a real vendor out of
	// reach) only delays the banner.
	hctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err = launch.WaitHTTP(hctx, "http://"+cfg.Listeners.Public+"/health", ec)
	cancel()
	if ec.Exited() {
		return fmt.Errorf("envoy exited; see %s", filepath.Join(stateDir, "envoy.log"))
	}
	if err != nil {
		log.Warn("the gateway is not healthy yet: GET /health says why")
	}

	demo, err := createLocalDemo(ctx, cfg, demoUSD)
	if err != nil {
		return err
	}
	demo.URL = "http://" + cfg.Listeners.Public
	demo.AdminAddr, demo.AdminToken = cfg.Listeners.Admin, os.Getenv(admin.TokenEnv)
	if cfg.Listeners.Console != "" {
		demo.ConsoleURL = "http://" + cfg.Listeners.Console + "/"
	}
	envPath := filepath.Join(stateDir, "demo.env")
	if err := os.WriteFile(envPath, []byte(demo.env()), 0o600); err != nil {
		return err
	}
	fmt.Print(demo.banner(envPath, len(fakes) > 0))

	select {
	case <-ctx.Done():
		log.Info("stopping")
	case <-ec.Done():
		return fmt.Errorf("envoy exited; see %s", filepath.Join(stateDir, "envoy.log"))
	case <-sc.Done():
		return fmt.Errorf("the sidecar exited; see %s", filepath.Join(stateDir, "sidecar.log"))
	}
	return nil
}

// shiftListeners adds offset to the port of every listener, so that a
// second local run (or a run beside a service on the default ports) moves
// all of them with one flag and the tracked config untouched.
func shiftListeners(l *config.Listeners, offset int) error {
	for _, a := range []*string{&l.Public, &l.Probes, &l.EnvoyAdmin, &l.ExtProc, &l.Control, &l.Admin, &l.Console, &l.Relay, &l.Health} {
		if *a == "" {
			continue // not served
		}
		host, port, err := net.SplitHostPort(*a)
		if err != nil {
			return fmt.Errorf("--port-offset: %w", err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p+offset < 1 || p+offset > 65535 {
			return fmt.Errorf("--port-offset %d: %s has no port in 1-65535 after the shift", offset, *a)
		}
		*a = net.JoinHostPort(host, strconv.Itoa(p+offset))
	}
	return nil
}

// demoModels are the models the README's examples call, by wire format.
var demoModels = map[string]string{
	config.FormatMessages:        "claude-haiku-4-5",
	config.FormatChatCompletions: "gpt-5-mini",
}

// checkListeners fails, in one line naming the address and the setting that
// moves it, when an address the run binds is taken: found before anything
// starts, rather than as an Envoy or sidecar failure later. movedBy names
// what sets the public listener.
func checkListeners(l config.Listeners, cfgPath, movedBy string) error {
	for _, c := range []struct{ addr, setting string }{
		{l.Public, movedBy},
		{l.Probes, "listeners.probes in " + cfgPath},
		{l.EnvoyAdmin, "listeners.envoy_admin in " + cfgPath},
		{l.ExtProc, "listeners.extproc in " + cfgPath},
		{l.Control, "listeners.control in " + cfgPath},
		{l.Admin, "listeners.admin in " + cfgPath},
		{l.Console, "listeners.console in " + cfgPath},
		{l.Relay, "listeners.relay in " + cfgPath},
		{l.Health, "listeners.health in " + cfgPath},
	} {
		if c.addr == "" {
			continue // not served
		}
		ln, err := net.Listen("tcp", c.addr)
		if err == nil {
			ln.Close()
			continue
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s is in use: set %s to another address", c.addr, c.setting)
		}
		return fmt.Errorf("cannot listen on %s (%s): %w", c.addr, c.setting, err)
	}
	return nil
}

type demoAccount struct {
	URL, APIKey, ReadOnlyToken, AccountID string
	AdminAddr, AdminToken                 string
	ConsoleURL                            string // the operator console; "" when not served
	AlphaModel, BetaModel                 string
}

// createDemo makes the demo account through the admin API, so that it is
// validated and audited like any other; its limits are the configured
// defaults.
func createDemo(ctx context.Context, svc adminv1.AdminClient, cfg *config.Config, prices pricing.Book, usd float64) (demoAccount, error) {
	acct, err := svc.CreateAccount(ctx, &adminv1.CreateAccountRequest{Name: "demo", BalanceNanoUsd: pricing.NanoUSD(usd)})
	if err != nil {
		return demoAccount{}, fmt.Errorf("demo account: %w", err)
	}
	id := acct.Account.Id
	key, err := svc.CreateKey(ctx, &adminv1.CreateKeyRequest{AccountId: id, Label: "demo"})
	if err != nil {
		return demoAccount{}, fmt.Errorf("demo key: %w", err)
	}
	tok, err := svc.CreateReadOnlyToken(ctx, &adminv1.CreateReadOnlyTokenRequest{AccountId: id, Label: "demo"})
	if err != nil {
		return demoAccount{}, fmt.Errorf("demo token: %w", err)
	}
	d := demoAccount{APIKey: key.Secret, ReadOnlyToken: tok.Secret, AccountID: id}
	// The demo names the model of each format the README uses when the
	// upstream serves it, else the cheapest served (by output price), so
	// that the demo balance goes furthest.
	first := func(u config.Upstream) string {
		if m, ok := demoModels[u.Format]; ok {
			if _, ok := prices[u.Name].Lookup(m); ok {
				return m
			}
		}
		var best *pricing.Model
		var bestOut int64
		for _, m := range prices[u.Name].Models() {
			if !slices.Contains(extproc.ServingOperations(u, prices[u.Name], operations.All, m), u.Format) {
				continue // the demo speaks the vendor's own format
			}
			r, _ := m.RatesFor(0, "")
			if best == nil || r.Output < bestOut {
				best, bestOut = m, r.Output
			}
		}
		if best == nil {
			return ""
		}
		return string(best.Name)
	}
	for _, u := range cfg.Upstreams {
		if u.Format == config.FormatMessages && d.AlphaModel == "" {
			d.AlphaModel = first(u)
		}
		if u.Format == config.FormatChatCompletions && d.BetaModel == "" {
			d.BetaModel = first(u)
		}
	}
	return d, nil
}

func (d demoAccount) env() string {
	// export: programs started from a shell that sourced the file
	// (gatewayctl, Python) read these from their environment.
	env := fmt.Sprintf("export GATEWAY_URL=%s\nexport DEMO_API_KEY=%s\nexport DEMO_READONLY_TOKEN=%s\n", d.URL, d.APIKey, d.ReadOnlyToken)
	if d.AdminToken != "" {
		env += fmt.Sprintf("export GATEWAY_ADMIN_ADDR=%s\nexport GATEWAY_ADMIN_TOKEN=%s\n", d.AdminAddr, d.AdminToken)
	}
	return env
}

func (d demoAccount) banner(envPath string, fake bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nModel gateway running at %s", d.URL)
	if fake {
		b.WriteString(" (fake vendors; set ALPHA_API_KEY / BETA_API_KEY for real ones)")
	}
	fmt.Fprintf(&b, "\nDemo account %s; credentials written to %s\n\n", d.AccountID, envPath)
	fmt.Fprintf(&b, "  source %s\n\n", envPath)
	fmt.Fprintf(&b, "  # messages format (alpha)\n")
	fmt.Fprintf(&b, "  curl -s $GATEWAY_URL/alpha/v1/messages -H \"x-api-key: $DEMO_API_KEY\" -H 'anthropic-version: 2023-06-01' \\\n")
	fmt.Fprintf(&b, "    -H 'content-type: application/json' -d '{\"model\":\"%s\",\"max_tokens\":64,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n\n", d.AlphaModel)
	fmt.Fprintf(&b, "  # streaming\n")
	fmt.Fprintf(&b, "  curl -sN $GATEWAY_URL/alpha/v1/messages -H \"x-api-key: $DEMO_API_KEY\" -H 'anthropic-version: 2023-06-01' \\\n")
	fmt.Fprintf(&b, "    -H 'content-type: application/json' -d '{\"model\":\"%s\",\"max_tokens\":64,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n\n", d.AlphaModel)
	fmt.Fprintf(&b, "  # chat-completions format (beta), streaming\n")
	fmt.Fprintf(&b, "  curl -sN $GATEWAY_URL/beta/v1/chat/completions -H \"Authorization: Bearer $DEMO_API_KEY\" \\\n")
	fmt.Fprintf(&b, "    -H 'content-type: application/json' -d '{\"model\":\"%s\",\"stream\":true,\"stream_options\":{\"include_usage\":true},\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n\n", d.BetaModel)
	fmt.Fprintf(&b, "  # usage and health\n")
	fmt.Fprintf(&b, "  curl -s \"$GATEWAY_URL/v1/usage?period=day\" -H \"Authorization: Bearer $DEMO_READONLY_TOKEN\"\n")
	fmt.Fprintf(&b, "  curl -s $GATEWAY_URL/health\n\n")
	fmt.Fprintf(&b, "  # administration (accounts, keys, top-ups)\n")
	fmt.Fprintf(&b, "  bin/gatewayctl accounts list\n\n")
	fmt.Fprintf(&b, "  # web consoles: usage (sign in with $DEMO_READONLY_TOKEN) and operator (with $GATEWAY_ADMIN_TOKEN)\n")
	fmt.Fprintf(&b, "  %s/console/\n", d.URL)
	if d.ConsoleURL != "" {
		fmt.Fprintf(&b, "  %s\n", d.ConsoleURL)
	}
	b.WriteString("\n")
	b.WriteString("Press Ctrl-C to stop.\n")
	return b.String()
}

// fakeSecret makes a secret for one of the upstream's keys and adds it to
// the keys the fakes of its format accept.
func fakeSecret(u *config.Upstream, messages, chatCompletions *[]string) string {
	key := "fake-" + randomHex(8)
	if u.Format == config.FormatMessages {
		*messages = append(*messages, key)
	} else {
		*chatCompletions = append(*chatCompletions, key)
	}
	return key
}

// envName is the environment variable of an upstream's fake secret:
// UPSTREAM_SUFFIX in capitals.
func envName(upstream, suffix string) string {
	return strings.ToUpper(strings.ReplaceAll(upstream+"_"+suffix, "-", "_"))
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
