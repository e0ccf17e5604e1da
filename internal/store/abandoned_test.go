package store

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

func miniStore(t *testing.T) *Store {
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	return New(rdb, Options{})
}

// Abandoned attempts are read back as recorded, by the time recorded.
func TestAbandonedAttempts(t *testing.T) {
	s := miniStore(t)
	ctx := context.Background()
	start := time.Now()
	a := account.AbandonedAttempt{At: start.Add(-time.Second).UTC().Truncate(time.Millisecond), Upstream: "alpha", VendorKey: "k1",
		Endpoint: "primary", Model: "m", Reason: "first_byte_timeout", RequestID: "r1"}
	b := a
	b.Reason, b.Status, b.RequestID = "status_5xx", 503, "r2"
	for _, x := range []account.AbandonedAttempt{a, b} {
		if err := s.RecordAbandoned(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.AbandonedBetween(ctx, start.Add(-time.Minute), time.Now().Add(time.Minute))
	if err != nil || len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("%+v (%v); want %+v, %+v", got, err, a, b)
	}
	if got, _ := s.AbandonedBetween(ctx, time.Now().Add(time.Minute), time.Now().Add(2*time.Minute)); len(got) != 0 {
		t.Errorf("a later window holds %+v", got)
	}
}

// The reconciliation lease is one holder's until it lapses; its holder
// renews it.
func TestReconcileLease(t *testing.T) {
	s := miniStore(t)
	ctx := context.Background()
	for _, c := range []struct {
		holder string
		want   bool
	}{{"a", true}, {"b", false}, {"a", true}} {
		if ok, err := s.ReconcileLease(ctx, c.holder, time.Minute); err != nil || ok != c.want {
			t.Fatalf("%s: %v (%v), want %v", c.holder, ok, err, c.want)
		}
	}
	if c, err := s.ReconcileCursor(ctx, "1h"); err != nil || !c.IsZero() {
		t.Fatalf("cursor before any window: %v (%v)", c, err)
	}
}
