// Command gateway is the model gateway's sidecar and its tools. The local
// runner, which needs an in-memory store and the test harness, is a binary
// of its own (cmd/gateway-local), so that neither is part of this one.
//
//	gateway serve        run the sidecar: ext_proc gRPC, control HTTP, admin gRPC
//	gateway envoy-config render the Envoy bootstrap from gateway.yaml
//	gateway models       list the models each upstream serves, with their prices
//	gateway ledger-sink  copy the ledger into PostgreSQL, continuously
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/internal/version"
)

func main() {
	root := &cobra.Command{
		Use:           "gateway",
		Short:         "Model gateway: Envoy ext_proc sidecar",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	root.AddCommand(serveCmd(), envoyConfigCmd(), healthcheckCmd(), modelsCmd(), ledgerSinkCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

func newLogger(level string) *slog.Logger {
	return newLoggerTo(os.Stderr, level)
}

// newLoggerTo is newLogger writing to w.
func newLoggerTo(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}
