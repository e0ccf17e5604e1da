// Command gateway-local runs the whole gateway on one machine for a trial:
// Envoy, the sidecar (`gateway serve`, as a child process), fake vendors
// unless vendor keys are set, and an in-memory store unless REDIS_URL is
// set. It is what `make run` starts. It is a binary of its own so that the
// in-memory store and the test harness it starts processes with are no part
// of the production `gateway`.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := rootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway-local:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	var (
		cfgPath, public, stateDir, logLevel string
		demoUSD                             float64
		portOffset                          int
		endpoints                           map[string]string
	)
	cmd := &cobra.Command{
		Use:           "gateway-local",
		Short:         "Run the whole gateway locally: Envoy, the sidecar and (without vendor keys) fake vendors",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLocal(cfgPath, public, portOffset, stateDir, logLevel, demoUSD, endpoints)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "gateway.yaml", "path of gateway.yaml")
	f.StringVar(&public, "listen", "", "address of the gateway (Envoy's public listener); default listeners.public")
	f.IntVar(&portOffset, "port-offset", 0, "add this to the port of every listener (listeners.*), to run beside another gateway without editing the config")
	f.StringVar(&stateDir, "state-dir", ".run", "directory for the rendered configs, logs and demo.env")
	f.StringVar(&logLevel, "log-level", "info", "log level of this runner and the sidecar")
	f.Float64Var(&demoUSD, "demo-balance", 25, "balance of the demo account, USD")
	f.StringToStringVar(&endpoints, "endpoint", nil,
		"point an upstream's endpoint at a server: NAME.primary=URL and NAME.reserve=URL (also NAME_PRIMARY_URL / NAME_RESERVE_URL, or NAME_BASE_URL for both)")
	return cmd
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}
