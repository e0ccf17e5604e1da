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
	"github.com/modelgateway/gateway/internal/roles"
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
	sso, err := newSSO(c.SSO, c.SSO.OperatorRedirectURL, roles.OperatorSide, "")
	if err != nil {
		return err
	}
	opts := console.OperatorOptions{
		Admin: s.Admin, Store: s.Store, Auth: auth, Prices: s.Prices, Upstreams: c.UpstreamNames(), Logger: s.log,
		VendorKeys: s.proc.VendorKeys, SSO: sso, SessionOptions: console.SessionOptions{Sessions: s.Store},
	}
	if s.reconciler != nil {
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

// newSSO returns a console's single sign-on client, or nil when the
// deployment configures none for it (no provider, or no redirect URL for
// this console).
func newSSO(c config.SSO, redirect string, side []roles.Role, accountClaim string) (*console.SSO, error) {
	if !c.Enabled() || redirect == "" {
		return nil, nil
	}
	secret := os.Getenv(c.ClientSecretEnv)
	if secret == "" {
		return nil, fmt.Errorf("sso: %s is empty (the client secret)", c.ClientSecretEnv)
	}
	return console.NewSSO(console.SSOOptions{
		Issuer: c.Issuer, ClientID: c.ClientID, ClientSecret: secret, RedirectURL: redirect, Scopes: c.Scopes,
		RolesClaim: c.RolesClaim, Roles: c.Roles, Side: side, AccountClaim: accountClaim,
	})
}

// stopConsole lets console requests in progress finish within ctx's deadline.
func (s *sidecar) stopConsole(ctx context.Context) {
	if s.console != nil {
		s.console.Shutdown(ctx)
	}
}
