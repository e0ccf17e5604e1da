package holds

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
	"github.com/modelgateway/gateway/internal/usage"
)

// base is the tests' clock at zero.
var base = time.Unix(1_800_000_000, 0)

// newStore is a store on miniredis with the lease and clock given.
func newStore(t *testing.T, lease time.Duration, c *testclock.Clock) (*store.Store, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return store.New(rdb, store.Options{HoldTTL: lease, Now: c.Now}), m
}

// rig is a store on miniredis with one account, and a renewer and a
// sweeper on the test's clock, which starts at base.
type rig struct {
	c    *testclock.Clock
	st   *store.Store
	m    *miniredis.Miniredis
	acct account.Account
	r    *Renewer
	sw   *Sweeper
}

func newRig(t *testing.T, lease time.Duration) *rig {
	t.Helper()
	g := &rig{c: testclock.New(base)}
	g.st, g.m = newStore(t, lease, g.c)
	acct, err := g.st.CreateAccount(t.Context(), "t", 1_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	g.acct = acct
	g.r, g.sw = NewRenewer(g.st, nil), NewSweeper(g.st, nil)
	g.r.Now, g.sw.Now = g.c.Now, g.c.Now
	return g
}

// A running request keeps its hold for many leases; once its sidecar stops
// renewing, the sweeper settles it at its last checkpoint, once, as soon as
// its lease has run out and not before.
func TestRenewThenSweep(t *testing.T) {
	ctx := context.Background()
	const lease = 3 * time.Second
	g := newRig(t, lease)
	c, st, acct, r, sw := g.c, g.st, g.acct, g.r, g.sw
	d, err := st.Admit(ctx, &account.Admission{RequestID: "req_1", AccountID: acct.ID, KeyID: "key_1", Priced: "m", Hold: 500_000})
	if err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %+v %v", d, err)
	}
	o := r.Register(acct.ID, "req_1", c.Now())

	// Renew and sweep for four leases, a renewal interval apart: the hold
	// stays.
	renewals := 0
	for c.Now().Before(base.Add(4 * lease)) {
		if o.WantCheckpoint() {
			o.Checkpoint(&account.Checkpoint{Status: 200, Usage: usage.Usage{Input: 5, Output: int64(renewals)}, Cost: 1000 + int64(renewals)})
		}
		r.RenewOnce(ctx)
		renewals++
		if n := sw.SweepOnce(ctx); n != 0 {
			t.Fatalf("a renewed hold was swept after %d renewals", renewals)
		}
		c.Advance(r.Interval())
	}
	if n, _, _ := st.OpenHolds(ctx, acct.ID); n != 1 {
		t.Fatalf("%d holds after %d renewals, want 1", n, renewals)
	}
	last := o.ckpt.Load()
	r.RenewOnce(ctx) // writes the last checkpoint

	// The sidecar dies: no more renewals. Not swept before the lease ends,
	// swept once after.
	r.Forget(o)
	c.Advance(lease - time.Millisecond)
	if n := sw.SweepOnce(ctx); n != 0 {
		t.Fatalf("swept %d before the lease ended", n)
	}
	c.Advance(time.Millisecond)
	if n := sw.SweepOnce(ctx); n != 1 {
		t.Fatalf("sweeper settled %d requests, want 1", n)
	}
	if n := sw.SweepOnce(ctx); n != 0 {
		t.Fatalf("swept %d more", n)
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

// A request whose reply began and that published no checkpoint is swept
// as its reply began (its status and endpoint, no usage); one that died
// before its reply began, with status 499.
func TestSweptAsTheReplyBegan(t *testing.T) {
	ctx := context.Background()
	const lease = 3 * time.Second
	g := newRig(t, lease)
	c, st, acct, r, sw := g.c, g.st, g.acct, g.r, g.sw
	for _, id := range []string{"req_began", "req_not"} {
		if d, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: acct.ID, KeyID: "key_1", Priced: "m", Hold: 1000}); err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit %s: %+v %v", id, d, err)
		}
		o := r.Register(acct.ID, id, c.Now())
		if id == "req_began" {
			o.Began(200, "primary")
		}
		r.RenewOnce(ctx)
		r.Forget(o) // the sidecar dies
	}
	c.Advance(lease)
	if n := sw.SweepOnce(ctx); n != 2 {
		t.Fatalf("swept %d, want 2", n)
	}
	l, _, err := st.Ledger(ctx, acct.ID, "", 10)
	if err != nil || len(l) != 2 {
		t.Fatalf("ledger %+v %v", l, err)
	}
	got := map[string][2]any{}
	for _, e := range l {
		got[e.RequestID] = [2]any{e.Status, e.Endpoint}
	}
	if want := (map[string][2]any{"req_began": {200, "primary"}, "req_not": {499, ""}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("swept entries (status, endpoint) %v, want %v", got, want)
	}
}

// A finished request stays registered until a renewal finds its hold gone.
func TestFinishedUntilGone(t *testing.T) {
	ctx := context.Background()
	st, _ := newStore(t, time.Minute, testclock.New(base))
	acct, _ := st.CreateAccount(ctx, "t", 1_000_000, account.Limits{})
	r := NewRenewer(st, nil)
	for _, id := range []string{"req_a", "req_b"} {
		if d, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: acct.ID, Hold: 1000}); err != nil || d.Outcome != account.Admitted {
			t.Fatal(d, err)
		}
	}
	a, b := r.Register(acct.ID, "req_a", base), r.Register(acct.ID, "req_b", base)
	// req_a settles; req_b's settlement is "spooled": its hold stays.
	if _, err := st.Settle(ctx, account.Settlement{RequestID: "req_a", AccountID: acct.ID, Status: 200, Cost: 10}); err != nil {
		t.Fatal(err)
	}
	r.Finish(a, &account.Checkpoint{Status: 200, Cost: 10})
	r.Finish(b, &account.Checkpoint{Status: 200, Cost: 20})
	r.RenewOnce(ctx)
	if n := r.Len(); n != 1 {
		t.Fatalf("%d requests renewed after one settled, want 1", n)
	}
	if _, err := st.Settle(ctx, account.Settlement{RequestID: "req_b", AccountID: acct.ID, Status: 200, Cost: 20}); err != nil {
		t.Fatal(err)
	}
	r.RenewOnce(ctx)
	if n := r.Len(); n != 0 {
		t.Fatalf("%d requests renewed after both settled", n)
	}
}

// A sidecar that cannot renew stops serving its requests before their lease
// ends; a sweeper that saw the store fail waits a lease after it answers
// again before sweeping.
func TestLeaseLostAndQuietSweeper(t *testing.T) {
	ctx := context.Background()
	const lease = 6 * time.Second // margin 1s
	g := newRig(t, lease)
	c, st, m, acct, r, sw := g.c, g.st, g.m, g.acct, g.r, g.sw
	if d, err := st.Admit(ctx, &account.Admission{RequestID: "req_1", AccountID: acct.ID, Hold: 1000}); err != nil || d.Outcome != account.Admitted {
		t.Fatal(d, err)
	}
	r.OnStoreError = sw.StoreFailed
	o := r.Register(acct.ID, "req_1", c.Now())
	if o.Expired(base.Add(5*time.Second-1)) || !o.Expired(base.Add(5*time.Second)) {
		t.Fatal("an admitted request must stop a margin before its first lease ends")
	}
	c.Set(base.Add(2 * time.Second))
	r.RenewOnce(ctx) // lease until 8s: serve until 7s
	if o.Expired(base.Add(7*time.Second-1)) || !o.Expired(base.Add(7*time.Second)) {
		t.Fatal("a renewed request must stop a margin before its renewed lease ends")
	}
	// The store fails: the renewal at 4s does not extend the lease.
	m.SetError("LOADING Redis is loading")
	c.Set(base.Add(4 * time.Second))
	r.RenewOnce(ctx)
	if !o.Expired(base.Add(7 * time.Second)) {
		t.Fatal("a failed renewal extended the request's service")
	}
	// Back at 8.5s, the hold has expired: the sweeper waits until 10s (a
	// lease after the failure it saw).
	m.SetError("")
	c.Set(base.Add(8500 * time.Millisecond))
	if n := sw.SweepOnce(ctx); n != 0 {
		t.Fatalf("swept %d within a lease of the outage", n)
	}
	c.Set(base.Add(10 * time.Second))
	if n := sw.SweepOnce(ctx); n != 1 {
		t.Fatalf("swept %d a lease after the outage, want 1", n)
	}
}

// A request whose sidecar stopped renewing past its lease (its process
// stopped, say) and whose hold a sweeper then settled is not served on
// when the sidecar runs again: the renewal that finds the hold gone does
// not extend the request's service, which ended with the lease it had.
func TestSweptRequestNotExtended(t *testing.T) {
	ctx := context.Background()
	const lease = 6 * time.Second // margin 1s
	g := newRig(t, lease)
	c, st, acct, r, sw := g.c, g.st, g.acct, g.r, g.sw
	if d, err := st.Admit(ctx, &account.Admission{RequestID: "req_1", AccountID: acct.ID, Hold: 1000}); err != nil || d.Outcome != account.Admitted {
		t.Fatal(d, err)
	}
	o := r.Register(acct.ID, "req_1", c.Now())
	c.Set(base.Add(2 * time.Second))
	r.RenewOnce(ctx) // lease until 8s: serve until 7s
	// Nothing renews until 9s; the hold's lease ends at 8s and another
	// sidecar's sweeper settles it at 8.5s.
	c.Set(base.Add(8500 * time.Millisecond))
	if n := sw.SweepOnce(ctx); n != 1 {
		t.Fatalf("swept %d, want 1", n)
	}
	c.Set(base.Add(9 * time.Second))
	r.RenewOnce(ctx)
	if !o.Expired(c.Now()) {
		t.Fatal("the renewal that found the hold swept extended the request's service")
	}
	if r.Len() != 0 {
		t.Fatalf("%d requests still renewed, want 0", r.Len())
	}
}
