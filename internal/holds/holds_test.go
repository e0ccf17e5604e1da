package holds

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// A running request keeps its hold for many leases; once its sidecar stops
// renewing, the sweeper settles it at its last checkpoint, once.
func TestRenewThenSweep(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	const lease = 300 * time.Millisecond
	st := store.New(rdb, store.Options{HoldTTL: lease})
	acct, err := st.CreateAccount(ctx, "t", 1_000_000, store.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := st.Admit(ctx, store.Admission{RequestID: "req_1", AccountID: acct.ID, KeyID: "key_1", Priced: "m", Hold: 500_000})
	if err != nil || d.Outcome != store.Admitted {
		t.Fatalf("admit: %+v %v", d, err)
	}
	r := NewRenewer(st, nil)
	sw := NewSweeper(st, nil)
	o := r.Register(acct.ID, "req_1", time.Now())

	// Renew and sweep for four leases: the hold stays.
	deadline := time.Now().Add(4 * lease)
	renewals := 0
	for time.Now().Before(deadline) {
		if o.WantCheckpoint() {
			o.Checkpoint(store.Checkpoint{Status: 200, Usage: usage.Usage{Input: 5, Output: int64(renewals)}, Cost: 1000 + int64(renewals)})
		}
		r.RenewOnce(ctx)
		renewals++
		if n := sw.SweepOnce(ctx); n != 0 {
			t.Fatalf("a renewed hold was swept after %d renewals", renewals)
		}
		time.Sleep(r.Interval())
	}
	if n, _, _ := st.OpenHolds(ctx, acct.ID); n != 1 {
		t.Fatalf("%d holds after %d renewals, want 1", n, renewals)
	}
	last := o.ckpt.Load()
	r.RenewOnce(ctx) // writes the last checkpoint

	// The sidecar dies: no more renewals. Poll the sweeper for two leases.
	r.Forget(o)
	settled := 0
	for end := time.Now().Add(3 * lease); settled == 0 && time.Now().Before(end); time.Sleep(lease / 10) {
		settled += sw.SweepOnce(ctx)
	}
	if settled != 1 {
		t.Fatalf("sweeper settled %d requests", settled)
	}
	l, _, err := st.Ledger(ctx, acct.ID, "", 10)
	if err != nil || len(l) != 1 {
		t.Fatalf("ledger %+v %v", l, err)
	}
	e := l[0]
	if !e.Interrupted || !e.Estimated || e.Status != 200 || e.Cost != last.Cost || e.Usage.Output != last.Usage.Output || e.KeyID != "key_1" {
		t.Fatalf("entry %+v, last checkpoint %+v", e, last)
	}
	if b, _ := st.Balance(ctx, acct.ID); b != 1_000_000-last.Cost {
		t.Fatalf("balance %d, want %d", b, 1_000_000-last.Cost)
	}
	if n, a, _ := st.OpenHolds(ctx, acct.ID); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d left", n, a)
	}
	if ids, _ := st.DueHoldAccounts(ctx, 10); len(ids) != 0 {
		t.Fatalf("index still lists %v", ids)
	}
}

// A finished request stays registered until a renewal finds its hold gone.
func TestFinishedUntilGone(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Start(t)})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{HoldTTL: time.Minute})
	acct, _ := st.CreateAccount(ctx, "t", 1_000_000, store.Limits{})
	r := NewRenewer(st, nil)
	for _, id := range []string{"req_a", "req_b"} {
		if d, err := st.Admit(ctx, store.Admission{RequestID: id, AccountID: acct.ID, Hold: 1000}); err != nil || d.Outcome != store.Admitted {
			t.Fatal(d, err)
		}
	}
	a, b := r.Register(acct.ID, "req_a", time.Now()), r.Register(acct.ID, "req_b", time.Now())
	// req_a settles; req_b's settlement is "spooled": its hold stays.
	if _, err := st.Settle(ctx, store.Settlement{RequestID: "req_a", AccountID: acct.ID, Status: 200, Cost: 10}); err != nil {
		t.Fatal(err)
	}
	r.Finish(a, store.Checkpoint{Status: 200, Cost: 10})
	r.Finish(b, store.Checkpoint{Status: 200, Cost: 20})
	r.RenewOnce(ctx)
	if n := r.Len(); n != 1 {
		t.Fatalf("%d requests renewed after one settled, want 1", n)
	}
	if _, err := st.Settle(ctx, store.Settlement{RequestID: "req_b", AccountID: acct.ID, Status: 200, Cost: 20}); err != nil {
		t.Fatal(err)
	}
	r.RenewOnce(ctx)
	if n := r.Len(); n != 0 {
		t.Fatalf("%d requests renewed after both settled", n)
	}
}

// testClock is a settable clock shared by the store, the renewer and the
// sweeper.
type testClock struct{ t atomic.Int64 }

func (c *testClock) Now() time.Time               { return time.Unix(0, c.t.Load()) }
func (c *testClock) Set(d time.Duration)          { c.t.Store(time.Unix(1_800_000_000, 0).Add(d).UnixNano()) }
func (c *testClock) At(d time.Duration) time.Time { return time.Unix(1_800_000_000, 0).Add(d) }

// A sidecar that cannot renew stops serving its requests before their lease
// ends; a sweeper that saw the store fail waits a lease after it answers
// again before sweeping.
func TestLeaseLostAndQuietSweeper(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	var c testClock
	c.Set(0)
	const lease = 6 * time.Second // margin 1s
	st := store.New(rdb, store.Options{HoldTTL: lease, Now: c.Now})
	acct, err := st.CreateAccount(ctx, "t", 1_000_000, store.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := st.Admit(ctx, store.Admission{RequestID: "req_1", AccountID: acct.ID, Hold: 1000}); err != nil || d.Outcome != store.Admitted {
		t.Fatal(d, err)
	}
	r := NewRenewer(st, nil)
	r.Now = c.Now
	sw := NewSweeper(st, nil)
	sw.Now = c.Now
	r.OnStoreError = sw.StoreFailed
	o := r.Register(acct.ID, "req_1", c.Now())
	if o.Expired(c.At(5*time.Second-1)) || !o.Expired(c.At(5*time.Second)) {
		t.Fatal("an admitted request must stop a margin before its first lease ends")
	}
	c.Set(2 * time.Second)
	r.RenewOnce(ctx) // lease until 8s: serve until 7s
	if o.Expired(c.At(7*time.Second-1)) || !o.Expired(c.At(7*time.Second)) {
		t.Fatal("a renewed request must stop a margin before its renewed lease ends")
	}
	// The store fails: the renewal at 4s does not extend the lease.
	m.SetError("LOADING Redis is loading")
	c.Set(4 * time.Second)
	r.RenewOnce(ctx)
	if !o.Expired(c.At(7 * time.Second)) {
		t.Fatal("a failed renewal extended the request's service")
	}
	// Back at 8.5s, the hold has expired: the sweeper waits until 10s (a
	// lease after the failure it saw).
	m.SetError("")
	c.Set(8500 * time.Millisecond)
	if n := sw.SweepOnce(ctx); n != 0 {
		t.Fatalf("swept %d within a lease of the outage", n)
	}
	c.Set(10 * time.Second)
	if n := sw.SweepOnce(ctx); n != 1 {
		t.Fatalf("swept %d a lease after the outage, want 1", n)
	}
}
