package admin

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/store"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

type eventRecorder struct {
	mu     sync.Mutex
	events []alerts.Event
}

func (r *eventRecorder) Publish(e alerts.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// Suspending and resuming an account are alert events, with the reason and
// who acted; a failed call sends none.
func TestSuspendAndResumeAreEvents(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	rec := &eventRecorder{}
	svc := New(store.New(rdb, store.Options{}), Options{Alerts: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx := context.Background()
	a, err := svc.CreateAccount(ctx, &adminv1.CreateAccountRequest{Name: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	id := a.Account.Id
	if _, err := svc.SuspendAccount(ctx, &adminv1.SuspendAccountRequest{AccountId: id, Reason: "unpaid invoice"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.ResumeAccount(ctx, &adminv1.ResumeAccountRequest{AccountId: id}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.SuspendAccount(ctx, &adminv1.SuspendAccountRequest{AccountId: "acct_missing"}); err == nil {
		t.Fatal("suspended a missing account")
	}
	if len(rec.events) != 2 {
		t.Fatalf("events %+v", rec.events)
	}
	s, r := rec.events[0], rec.events[1]
	if s.Type != alerts.AccountSuspended || s.AccountID != id || s.Data["reason"] != "unpaid invoice" || s.Data["actor"] != DefaultActor ||
		r.Type != alerts.AccountResumed || r.AccountID != id {
		t.Fatalf("events %+v", rec.events)
	}
}
