package main

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// A drill needs distinct primary and reserve servers: flags win over the
// per-endpoint variables, which win over the shared base URL.
func TestCustomEndpoints(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name             string
		env, flags       map[string]string
		primary, reserve string
		err              string
	}{
		{name: "none"},
		{name: "base for both", env: map[string]string{"ALPHA_BASE_URL": "http://a:1"}, primary: "http://a:1", reserve: "http://a:1"},
		{name: "distinct from env", env: map[string]string{"ALPHA_PRIMARY_URL": "http://p:1", "ALPHA_RESERVE_URL": "http://r:2"}, primary: "http://p:1", reserve: "http://r:2"},
		{name: "reserve over base", env: map[string]string{"ALPHA_BASE_URL": "http://a:1", "ALPHA_RESERVE_URL": "http://r:2"}, primary: "http://a:1", reserve: "http://r:2"},
		{name: "flags win", env: map[string]string{"ALPHA_PRIMARY_URL": "http://p:1"}, flags: map[string]string{"alpha.primary": "http://f:1", "alpha.reserve": "http://g:2"}, primary: "http://f:1", reserve: "http://g:2"},
		{name: "reserve alone", env: map[string]string{"ALPHA_RESERVE_URL": "http://r:2"}, err: "without a primary"},
		{name: "bad url", flags: map[string]string{"alpha.primary": "ftp://x"}, err: "scheme"},
	} {
		env = tc.env
		p, r, err := customEndpoints("alpha", getenv, tc.flags)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || p != tc.primary || r != tc.reserve {
			t.Errorf("%s: %q %q %v; want %q %q", tc.name, p, r, err, tc.primary, tc.reserve)
		}
	}
}

// gateway-local creates its demo account through the admin API: the account
// is funded, and its key and token are the kinds they claim to be.
func TestCreateDemo(t *testing.T) {
	cfg, err := config.Load("../../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The pricing package's made-up catalogue: no download needed.
	cfg.Catalogue = "../../internal/pricing/testdata/catalogue.json"
	prices, err := pricing.NewBook(cfg, operations.All.Modes())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	const token = "test-admin-token-0123456789"
	srv, err := admin.NewServer(admin.New(st, admin.Options{}), token, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	d, err := createDemo(ctx, adminv1.NewAdminClient(conn), cfg, prices, 25)
	if err != nil {
		t.Fatal(err)
	}
	k, err := st.LookupKey(ctx, sha256.Sum256([]byte(d.APIKey)))
	if err != nil || k.Kind != account.ModelKey || k.AccountID != d.AccountID {
		t.Fatalf("demo key: %+v, %v", k, err)
	}
	ro, err := st.LookupKey(ctx, sha256.Sum256([]byte(d.ReadOnlyToken)))
	if err != nil || ro.Kind != account.ReadOnlyToken {
		t.Fatalf("demo token: %+v, %v", ro, err)
	}
	rep, err := st.Usage(ctx, d.AccountID, ledger.Total)
	if err != nil || rep.Balance != 25_000_000_000 {
		t.Fatalf("demo balance: %+v, %v", rep, err)
	}
	// The cheapest model of each format, by output price.
	if d.AlphaModel != "fake-claude-1-mini" || d.BetaModel != "fake-gpt-nolimit" {
		t.Fatalf("demo models: %+v", d)
	}
}
