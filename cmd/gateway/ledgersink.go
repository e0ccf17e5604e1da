package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledgersink"
	"github.com/modelgateway/gateway/internal/store"
)

// databaseURLEnv is read when --database-url is not given, so that the
// password need not appear in the process list.
const databaseURLEnv = "DATABASE_URL"

func ledgerSinkCmd() *cobra.Command {
	var (
		cfgPath  string
		logLevel string
		dbURL    string
		listen   string
	)
	cmd := &cobra.Command{
		Use:   "ledger-sink",
		Short: "Copy every settled ledger entry into PostgreSQL, continuously",
		Long: `ledger-sink copies the ledger of every account from the store (REDIS_URL or
store.redis_url) into the PostgreSQL table "ledger", exactly once per entry,
and keeps doing so as requests settle. It creates and migrates its schema,
resumes where it stopped, and lets store.ledger_retention trim what it has
copied. An entry PostgreSQL refuses for its data is set aside in the table
"ledger_rejects" and the rest keep flowing. It serves /metrics (gateway_ledger_sink_lag_seconds) and /health on
ledger_sink.listen. The database URL comes from --database-url or ` + databaseURLEnv + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log := newLogger(logLevel)
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			if dbURL == "" {
				dbURL = os.Getenv(databaseURLEnv)
			}
			if dbURL == "" {
				return errors.New("ledger-sink: no database: give --database-url or set " + databaseURLEnv)
			}
			if listen != "" {
				cfg.LedgerSink.Listen = listen
			}
			if os.Getenv("REDIS_URL") == "" && cfg.Store.RedisURL == "" {
				return errors.New("ledger-sink: no store: set REDIS_URL or store.redis_url (the in-memory store has no ledger to copy)")
			}
			rdb, closeStore, err := openStore(cfg)
			if err != nil {
				return err
			}
			defer closeStore()
			reg := prometheus.NewRegistry()
			reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			st := store.New(rdb, store.Options{LedgerRetention: cfg.Store.LedgerRetention.D()})
			sink := ledgersink.New(st, ledgersink.Options{
				DatabaseURL: dbURL, Interval: cfg.LedgerSink.Interval.D(), Logger: log, Registerer: reg,
			})

			ln, err := net.Listen("tcp", cfg.LedgerSink.Listen)
			if err != nil {
				return fmt.Errorf("ledger_sink.listen: %w", err)
			}
			mux := http.NewServeMux()
			mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
			mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
				// Alive is enough: a database that is down shows as lag,
				// and restarting the sink would not bring it back.
				fmt.Fprintln(w, "ok")
			})
			srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(ln)
			log.Info("ledger sink started", "listen", ln.Addr().String())

			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			err = sink.Run(ctx)
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(sctx)
			return err
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "gateway.yaml", "path of gateway.yaml")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(&dbURL, "database-url", "", "PostgreSQL URL, postgres://user:password@host:5432/db (default $"+databaseURLEnv+")")
	cmd.Flags().StringVar(&listen, "listen", "", "override ledger_sink.listen (/metrics and /health)")
	return cmd
}
