package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
	"github.com/modelgateway/gateway/test/launch"
)

// localStore returns the environment that points the sidecar at its store:
// none when REDIS_URL or store.redis_url names one, else an in-memory store
// in this process (gateway serve itself has none).
func localStore(cfg *config.Config, log *slog.Logger) ([]string, func(), error) {
	if os.Getenv("REDIS_URL") != "" || cfg.Store.RedisURL != "" {
		return nil, func() {}, nil
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, nil, fmt.Errorf("in-memory store: %w", err)
	}
	log.Warn("REDIS_URL is not set: using an IN-MEMORY store; accounts, balances and usage are lost when this process exits")
	return []string{"REDIS_URL=redis://" + mr.Addr()}, mr.Close, nil
}

// startSidecar writes cfg (with this run's endpoints) to the state directory
// and starts `gateway serve` on it, waiting until it is up.
func startSidecar(ctx context.Context, cfg *config.Config, stateDir, logLevel string, env []string) (*launch.Process, error) {
	path, err := writeConfig(cfg, stateDir)
	if err != nil {
		return nil, err
	}
	bin, err := launch.FindBinary("gateway")
	if err != nil {
		return nil, fmt.Errorf("sidecar: %w", err)
	}
	p, err := launch.StartProcess("sidecar", bin, []string{"serve", "--config", path, "--log-level", logLevel, "--drain", "10s"},
		env, filepath.Join(stateDir, "sidecar.log"))
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Up: /health waits for Envoy's endpoints, which start after it.
	if err := launch.WaitHTTP(wctx, "http://"+cfg.Listeners.Control+"/livez", p); err != nil {
		p.Stop()
		return nil, fmt.Errorf("sidecar: %w; see %s", err, p.LogPath)
	}
	return p, nil
}

// writeConfig writes cfg as the sidecar's gateway.yaml in dir. The
// catalogue's path becomes absolute: Load reads a relative one from the
// file's directory.
func writeConfig(cfg *config.Config, dir string) (string, error) {
	c := *cfg
	var err error
	if c.Catalogue, err = filepath.Abs(c.Catalogue); err != nil {
		return "", fmt.Errorf("sidecar config: %w", err)
	}
	b, err := yaml.Marshal(&c)
	if err != nil {
		return "", fmt.Errorf("sidecar config: %w", err)
	}
	path := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", fmt.Errorf("sidecar config: %w", err)
	}
	return path, nil
}

// reloadOnHangup, on each SIGHUP until ctx ends, takes the prices (the
// catalogue and each upstream's models) from cfgPath into the sidecar's
// config and signals the sidecar to reload them. A file that does not load
// is refused with a log line, and the prices in use stay.
func reloadOnHangup(ctx context.Context, sc *launch.Process, cfg *config.Config, cfgPath, stateDir string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := takePrices(cfg, cfgPath, stateDir); err != nil {
					log.Error("prices not reloaded; the previous prices stay in force", "err", err)
					continue
				}
				sc.Signal(syscall.SIGHUP)
			}
		}
	}()
}

func takePrices(cfg *config.Config, cfgPath, stateDir string) error {
	fresh, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	cfg.Catalogue = fresh.Catalogue
	for i := range cfg.Upstreams {
		if u, ok := fresh.Upstream(cfg.Upstreams[i].Name); ok {
			cfg.Upstreams[i].Models = u.Models
		}
	}
	_, err = writeConfig(cfg, stateDir)
	return err
}

// createLocalDemo creates the demo account through the sidecar's admin API,
// with the token this run set.
func createLocalDemo(ctx context.Context, cfg *config.Config, usd float64) (demoAccount, error) {
	prices, err := pricing.NewBook(cfg, operations.All.Modes())
	if err != nil {
		return demoAccount{}, err
	}
	conn, err := grpc.NewClient(cfg.Listeners.Admin, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return demoAccount{}, fmt.Errorf("admin API: %w", err)
	}
	defer conn.Close()
	token := os.Getenv(admin.TokenEnv)
	if token == "" && os.Getenv(admin.TokenFileEnv) != "" {
		b, err := os.ReadFile(os.Getenv(admin.TokenFileEnv))
		if err != nil {
			return demoAccount{}, fmt.Errorf("admin token: %w", err)
		}
		token = string(b)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+strings.TrimSpace(token), admin.ActorHeader, "gateway-local")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return createDemo(ctx, adminv1.NewAdminClient(conn), cfg, prices, usd)
}
