package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/console"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// startConsole serves the operator console on listeners.console when an
// admin token is configured (it signs in with it); without one there is no
// console, as there is no admin API.
func (s *sidecar) startConsole(c *config.Config) error {
	token, err := admin.TokenFromEnv(os.Getenv)
	if err != nil || token == "" || c.Listeners.Console == "" {
		return err
	}
	auth, err := console.NewTokenAuthenticator(token)
	if err != nil {
		return err
	}
	opts := console.OperatorOptions{
		Admin: s.Admin, Store: s.Store, Auth: auth, Prices: s.Prices, Upstreams: c.UpstreamNames(), Logger: s.log,
		VendorKeys: s.proc.VendorKeys,
	}
	if newReconciler(c, s.Store, s.Prices) != nil {
		opts.Reconciliations = func(ctx context.Context, width vendorusage.Width, from, to time.Time) ([]reconcile.Window, error) {
			return reconcile.Kept(ctx, s.Store, width, from, to)
		}
	}
	op := console.NewOperator(opts)
	l, err := net.Listen("tcp", c.Listeners.Console)
	if err != nil {
		return fmt.Errorf("console listener: %w", err)
	}
	s.console, s.ConsoleAddr = &http.Server{Handler: op, ReadHeaderTimeout: 10 * time.Second}, l.Addr()
	go func() {
		if err := s.console.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("console server stopped", "err", err)
		}
	}()
	s.log.Info("operator console serving", "addr", s.ConsoleAddr.String())
	return nil
}

// stopConsole lets console requests in progress finish within ctx's deadline.
func (s *sidecar) stopConsole(ctx context.Context) {
	if s.console != nil {
		s.console.Shutdown(ctx)
	}
}
