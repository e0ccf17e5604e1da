package main

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
)

// defaultLimits are the limits gateway.yaml gives new accounts.
func defaultLimits(c *config.Config) account.Limits {
	return account.Limits{
		DailyNanoUSD:  pricing.NanoUSD(c.Limits.DailyUSD),
		RPM:           c.Limits.RPM,
		WindowMinutes: c.Limits.WindowMinutes,
	}
}

// startAdmin makes the admin service and, when an admin token is configured,
// serves it on listeners.admin. That listener is the sidecar's own and Envoy
// never routes to it. Without a token the API is not served at all: an
// unauthenticated admin API must not exist.
func (s *sidecar) startAdmin(c *config.Config, st *store.Store) error {
	o := admin.Options{DefaultLimits: defaultLimits(c), Logger: s.log, Alerts: s.watcher}
	if s.reconciler != nil {
		o.Reconciler = s.reconciler
	}
	s.Admin = admin.New(st, o)
	token, err := admin.TokenFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	if token == "" {
		s.log.Warn("no admin token: the admin API is not served", "env", admin.TokenEnv, "file_env", admin.TokenFileEnv)
		return nil
	}
	srv, err := admin.NewServer(s.Admin, token, s.log)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", c.Listeners.Admin)
	if err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	s.admin, s.AdminAddr = srv, l.Addr()
	go func() {
		if err := srv.Serve(l); err != nil {
			s.log.Error("admin server stopped", "err", err)
		}
	}()
	s.log.Info("admin API serving", "addr", s.AdminAddr.String())
	return nil
}

// stopAdmin lets admin calls in progress finish within ctx's deadline.
func (s *sidecar) stopAdmin(ctx context.Context) {
	if s.admin != nil {
		stopGRPC(ctx, s.admin)
	}
}
