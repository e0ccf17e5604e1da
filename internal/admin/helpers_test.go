package admin

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

const testToken = "test-admin-token-0123456789"

// start is the tests' initial time.
var start = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

var defaultLimits = account.Limits{DailyNanoUSD: 100e9, RPM: 60, WindowMinutes: 1}

// env is an admin server on miniredis, spoken to over real gRPC on loopback.
type env struct {
	t      *testing.T
	ctx    context.Context // carries the admin token
	client adminv1.AdminClient
	st     *store.Store
	clock  *testclock.Clock
	rdb    *redis.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := testclock.New(start)
	st := store.New(rdb, store.Options{Now: c.Now})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := New(st, Options{DefaultLimits: defaultLimits, Now: c.Now, Logger: log})
	srv, err := NewServer(svc, testToken, log)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer "+testToken, ActorHeader, "alice")
	return &env{t: t, ctx: ctx, client: adminv1.NewAdminClient(conn), st: st, clock: c, rdb: rdb}
}

// account creates an account with balance nano-USD and the default limits.
func (e *env) account(balance int64) *adminv1.Account {
	e.t.Helper()
	r, err := e.client.CreateAccount(e.ctx, &adminv1.CreateAccountRequest{Name: "acme", BalanceNanoUsd: balance})
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Account
}

// key creates a model key and returns its secret and description.
func (e *env) key(acct string, req *adminv1.CreateKeyRequest) (string, *adminv1.Key) {
	e.t.Helper()
	if req == nil {
		req = &adminv1.CreateKeyRequest{}
	}
	req.AccountId = acct
	r, err := e.client.CreateKey(e.ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Secret, r.Key
}

// keys lists the account's credentials by id.
func (e *env) keys(acct string) map[string]*adminv1.Key {
	e.t.Helper()
	r, err := e.client.ListKeys(e.ctx, &adminv1.ListKeysRequest{AccountId: acct})
	if err != nil {
		e.t.Fatal(err)
	}
	m := map[string]*adminv1.Key{}
	for _, k := range r.Keys {
		m[k.Id] = k
	}
	return m
}

// wantCode fails unless err is a status with code.
func wantCode(t *testing.T, err error, code codes.Code) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("got %v, want code %s", err, code)
	}
}
