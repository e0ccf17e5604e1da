package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/logbuf"
)

func serveCmd() *cobra.Command {
	var (
		cfgPath     string
		logLevel    string
		drain       time.Duration
		keyCacheTTL time.Duration
		listen      config.Listeners
		envoyAdmin  string
		traceTo     string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the sidecar: ext_proc gRPC, control HTTP and admin gRPC",
		RunE: func(cmd *cobra.Command, args []string) error {
			log := newLogger(logLevel)
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			overrideListeners(&cfg.Listeners, listen)
			if traceTo != "" {
				cfg.Tracing.Endpoint = traceTo
				if err := cfg.Validate(); err != nil {
					return err
				}
			}
			// A refused bind is a config error: report it before asking
			// for a store.
			if err := cfg.Listeners.CheckSidecarBinds(); err != nil {
				return err
			}
			rdb, closeStore, err := openStore(cfg)
			if err != nil {
				return err
			}
			defer closeStore()
			// The request lines go out a settlement batch at a time.
			lines := logbuf.New(os.Stderr)
			sc, err := startSidecar(sidecarOptions{Config: cfg, Redis: rdb, Logger: log, KeyCacheTTL: keyCacheTTL, EnvoyAdminURL: envoyAdmin,
				RequestLogger: newLoggerTo(lines, logLevel), FlushRequestLog: func() { lines.Flush() }})
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			reloadOnHangup(ctx, sc, cfgPath, log)
			<-ctx.Done()
			log.Info("shutting down", "drain", drain.String())
			sctx, cancel := context.WithTimeout(context.Background(), drain)
			defer cancel()
			sc.Shutdown(sctx)
			return nil
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "gateway.yaml", "path of gateway.yaml")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().DurationVar(&drain, "drain", 60*time.Second, "how long in-flight streams may finish after SIGTERM")
	cmd.Flags().StringVar(&listen.ExtProc, "listen-extproc", "", "override listeners.extproc (e.g. 0.0.0.0:50051 in a container)")
	cmd.Flags().StringVar(&listen.Control, "listen-control", "", "override listeners.control")
	cmd.Flags().StringVar(&listen.Admin, "listen-admin", "", "override listeners.admin")
	cmd.Flags().StringVar(&listen.Console, "listen-console", "", "override listeners.console")
	cmd.Flags().StringVar(&listen.Health, "listen-health", "", "override listeners.health (plaintext gRPC health for the kubelet, e.g. 0.0.0.0:50053)")
	cmd.Flags().StringVar(&envoyAdmin, "envoy-admin", "", "Envoy admin URL for route reporting (default: http://listeners.envoy_admin)")
	cmd.Flags().StringVar(&traceTo, "tracing-endpoint", "", "override tracing.endpoint (an OTLP collector's host:port; turns tracing on)")
	cmd.Flags().DurationVar(&keyCacheTTL, "key-cache-ttl", config.DefaultKeyCacheTTL, "how long key lookups are cached (bounds revocation delay)")
	return cmd
}

// openStore connects to REDIS_URL (or store.redis_url). There is no
// in-memory fallback: accounts and balances that vanish on exit have no
// place in the sidecar (gateway-local runs one for local trials).
func openStore(cfg *config.Config) (redis.UniversalClient, func(), error) {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = cfg.Store.RedisURL
	}
	if url == "" {
		return nil, nil, errors.New("no store: set REDIS_URL or store.redis_url (for a local trial without Redis, run bin/gateway-local, as make run does)")
	}
	pw, err := redisPassword()
	if err != nil {
		return nil, nil, err
	}
	rdb, err := newRedis(url, redisOptions{Timeout: cfg.Store.Timeout.D(), Password: pw})
	if err != nil {
		return nil, nil, err
	}
	return rdb, func() { rdb.Close() }, nil
}

// overrideListeners replaces the configured sidecar listeners with the
// non-empty ones given on the command line.
func overrideListeners(l *config.Listeners, o config.Listeners) {
	for _, p := range []struct {
		dst *string
		src string
	}{
		{&l.ExtProc, o.ExtProc}, {&l.Control, o.Control}, {&l.Admin, o.Admin}, {&l.Console, o.Console}, {&l.Health, o.Health},
	} {
		if p.src != "" {
			*p.dst = p.src
		}
	}
}

// reloadOnHangup reloads prices on each SIGHUP until ctx ends. A file that
// does not load is refused with a log line, and the prices in use stay.
func reloadOnHangup(ctx context.Context, sc *sidecar, cfgPath string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if err := sc.ReloadPrices(cfgPath); err != nil {
					log.Error("prices not reloaded; the previous prices stay in force", "err", err)
				}
			}
		}
	}()
}
