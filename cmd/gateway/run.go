package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/launch"
	"github.com/modelgateway/gateway/internal/pricing"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

func runCmd() *cobra.Command {
	var (
		cfgPath, public, stateDir, logLevel string
		demoUSD                             float64
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the whole gateway locally: Envoy, the sidecar and (without vendor keys) fake vendors",
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLocal(cfgPath, public, stateDir, logLevel, demoUSD)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "gateway.yaml", "path of gateway.yaml")
	f.StringVar(&public, "listen", "127.0.0.1:8080", "address of the gateway (Envoy's listener)")
	f.StringVar(&stateDir, "state-dir", ".run", "directory for the rendered Envoy config, logs and demo.env")
	f.StringVar(&logLevel, "log-level", "info", "sidecar log level")
	f.Float64Var(&demoUSD, "demo-balance", 25, "balance of the demo account, USD")
	return cmd
}

func runLocal(cfgPath, public, stateDir, logLevel string, demoUSD float64) error {
	log := newLogger(logLevel)
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	cfg.Listeners.Public = public
	cfg.Envoy.AccessLog = "stdout" // goes to the Envoy log file
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	var children []*launch.Process
	defer func() {
		for i := len(children) - 1; i >= 0; i-- {
			children[i].StopWithin(10 * time.Second)
		}
	}()

	// Each upstream goes to a base URL override, the real vendor (when its
	// key is set), or the fake vendors.
	creds := map[string]string{}
	var fakes []string
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		envName := strings.ToUpper(strings.ReplaceAll(u.Name, "-", "_")) + "_BASE_URL"
		switch {
		case os.Getenv(envName) != "":
			u.Primary = config.Endpoint{URL: os.Getenv(envName), Region: "custom"}
			u.Reserve = u.Primary
			log.Info("upstream points at a custom server", "upstream", u.Name, "env", envName)
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
		alphaKey, betaKey := "fake-"+randomHex(8), "fake-"+randomHex(8)
		env := []string{"FAKE_ALPHA_KEY=" + alphaKey, "FAKE_BETA_KEY=" + betaKey}
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
			creds[name] = betaKey
			if u.Format == config.FormatMessages {
				creds[name] = alphaKey
			}
		}
		log.Warn("no vendor keys set: routing to FAKE vendors", "upstreams", strings.Join(fakes, ","))
	}

	// The demo needs a working admin API for gatewayctl: make a token for
	// this run when none is configured. It is written to demo.env (mode 0600).
	if os.Getenv(admin.TokenEnv) == "" && os.Getenv(admin.TokenFileEnv) == "" {
		os.Setenv(admin.TokenEnv, "adm_"+randomHex(24))
	}
	rdb, closeStore, err := openStore(cfg, log)
	if err != nil {
		return err
	}
	defer closeStore()
	sc, err := startSidecar(sidecarOptions{Config: cfg, Redis: rdb, Logger: log, Credentials: creds})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sc.Shutdown(sctx)
	}()

	envoyBin, err := launch.FindEnvoy()
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	ec, err := launch.StartEnvoy(wctx, envoyBin, cfg, envoy.Options{NodeID: "gateway-local"}, stateDir)
	cancel()
	if err != nil {
		return err
	}
	children = append(children, ec)

	demo, err := createDemo(ctx, sc.Admin, cfg, demoUSD)
	if err != nil {
		return err
	}
	demo.URL = "http://" + public
	demo.AdminAddr, demo.AdminToken = cfg.Listeners.Admin, os.Getenv(admin.TokenEnv)
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
	}
	return nil
}

type demoAccount struct {
	URL, APIKey, ReadOnlyToken, AccountID string
	AdminAddr, AdminToken                 string
	AlphaModel, BetaModel                 string
}

// createDemo makes the demo account through the admin API, in process, so
// that it is validated and audited like any other; its limits are the
// configured defaults.
func createDemo(ctx context.Context, svc *admin.Service, cfg *config.Config, usd float64) (demoAccount, error) {
	ctx = admin.WithActor(ctx, "gateway-run")
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
	for _, u := range cfg.Upstreams {
		if u.Format == config.FormatMessages && d.AlphaModel == "" {
			d.AlphaModel = u.Models[0].Name
		}
		if u.Format == config.FormatChatCompletions && d.BetaModel == "" {
			d.BetaModel = u.Models[0].Name
		}
	}
	return d, nil
}

func (d demoAccount) env() string {
	env := fmt.Sprintf("GATEWAY_URL=%s\nDEMO_API_KEY=%s\nDEMO_READONLY_TOKEN=%s\n", d.URL, d.APIKey, d.ReadOnlyToken)
	if d.AdminToken != "" {
		env += fmt.Sprintf("GATEWAY_ADMIN_ADDR=%s\nGATEWAY_ADMIN_TOKEN=%s\n", d.AdminAddr, d.AdminToken)
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
	fmt.Fprintf(&b, "  export GATEWAY_ADMIN_ADDR GATEWAY_ADMIN_TOKEN; bin/gatewayctl accounts list\n\n")
	b.WriteString("Press Ctrl-C to stop.\n")
	return b.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
