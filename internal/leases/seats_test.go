package leases

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
)

// seats reads the seats an account's leases hold against its concurrency
// limit.
func seats(t *testing.T, rdb *redis.Client, acct string) int64 {
	t.Helper()
	v, err := rdb.HGet(context.Background(), "gw:{acct:"+acct+"}:acct", "seats").Result()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An account with a concurrency limit: its lease holds seats; a request
// from the lease needs a free one, and does not give it back when it ends;
// the renewal grants seats again; Close returns the free ones.
func TestAdmitFromLeaseWithConcurrencyLimit(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := testclock.New(time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: c.Now, HoldTTL: time.Minute})
	r := &rig{t: t, ctx: context.Background(), st: st, clock: c, m: New(st, st, Options{Interval: time.Second, Now: c.Now})}
	a, err := st.CreateAccount(r.ctx, "t", 1000*usd, account.Limits{Concurrency: 200})
	if err != nil {
		t.Fatal(err)
	}
	const hold = 10_000_000
	r.admit(a.ID, hold) // by the script; asks for a lease
	r.m.Renew(r.ctx, false)
	// Seats: twice the one request seen, at least DefaultMinSeats: 2.
	if n := seats(t, rdb, a.ID); n != 2 {
		t.Fatalf("%d seats leased, want 2", n)
	}
	var sts []account.Settlement
	for i := range 2 {
		d := r.admit(a.ID, hold)
		if d.Lease.ID == "" {
			t.Fatalf("request %d: %+v, want admitted from the lease", i, d)
		}
		sts = append(sts, account.Settlement{RequestID: "req" + string(rune('a'+r.n)), AccountID: a.ID, KeyID: "key_1",
			Priced: "m", Status: 200, Cost: 1000, Lease: d.Lease})
	}
	// No seat left: the script admits it.
	if d := r.admit(a.ID, hold); d.Lease.ID != "" {
		t.Fatalf("admitted from the lease beyond its seats: %+v", d)
	}
	// One settles before its record is sent (its record is dropped, the
	// settlement takes its seat), the other is recorded.
	r.m.Settled(sts[0].Lease)
	for _, res := range r.st.SettleBatch(r.ctx, sts[:1]) {
		if !res.Applied || res.Err != nil {
			t.Fatalf("settle %+v", res)
		}
	}
	r.m.flush(r.ctx)
	if n, _, _ := r.st.OpenHolds(r.ctx, a.ID); n != 3 || seats(t, rdb, a.ID) != 0 {
		t.Fatalf("%d holds, %d seats; want the script's two and one recorded, no seat", n, seats(t, rdb, a.ID))
	}
	// A settled request's seat is not free again locally.
	for _, res := range r.st.SettleBatch(r.ctx, sts[1:]) {
		if !res.Applied || res.Err != nil {
			t.Fatalf("settle %+v", res)
		}
	}
	if d := r.admit(a.ID, hold); d.Lease.ID != "" {
		t.Fatalf("admitted from the lease after its seats were used: %+v", d)
	}
	// The renewal grants seats again: twice the 5 requests seen (the room
	// allows 197 / 8).
	r.m.Renew(r.ctx, true)
	if n := seats(t, rdb, a.ID); n != 10 {
		t.Fatalf("%d seats after the renewal, want 10", n)
	}
	if d := r.admit(a.ID, hold); d.Lease.ID == "" {
		t.Fatalf("not admitted from the renewed lease: %+v", d)
	}
	r.m.Close(r.ctx)
	if n := seats(t, rdb, a.ID); n != 0 {
		t.Fatalf("%d seats after Close", n)
	}
	if n, _, _ := r.st.OpenHolds(r.ctx, a.ID); n != 4 {
		t.Fatalf("%d holds after Close, want the three open and the last, recorded by Close", n)
	}
}

// Two sidecars' managers and the store's script race for one account's
// concurrency limit with requests that do not end: no more are admitted
// than the limit, and once the leases are returned every admitted request
// is a hold and no seat is left.
func TestConcurrencyRaceTwoSidecars(t *testing.T) {
	const limit = 120
	r := raceTwoSidecars(t, account.Limits{Concurrency: limit}, 0, func(l *lease) { l.reqs = 50 })
	holds, _, err := r.st.OpenHolds(context.Background(), r.acct)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.admitted; n > limit || holds != n || seats(t, r.rdb, r.acct) != 0 {
		t.Fatalf("%d admitted, %d holds, %d seats: want at most %d, each a hold, no seat", n, holds, seats(t, r.rdb, r.acct), limit)
	}
	r.earlyRefusals(t, limit)
}

// gatedStore holds each lease call until released.
type gatedStore struct {
	*store.Store
	entered, release chan struct{}
}

func (g *gatedStore) Leases(ctx context.Context, calls []store.LeaseCall) []store.LeaseResult {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Leases(ctx, calls)
}

// While a lease's renewal is in flight nothing is taken from it (the
// renewal sets it from the free amount the call reported): requests go to
// the script; after it, to the lease again.
func TestNoAdmissionFromALeaseBeingRenewed(t *testing.T) {
	r := newRig(t)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	if d := r.admit(acct, hold); d.Lease.ID == "" {
		t.Fatalf("not admitted from the lease: %+v", d)
	}
	g := &gatedStore{Store: r.st, entered: make(chan struct{}), release: make(chan struct{})}
	r.m.st = g
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.m.Renew(r.ctx, true)
	}()
	<-g.entered
	if d := r.admit(acct, hold); d.Lease.ID != "" {
		t.Fatalf("admitted from a lease being renewed: %+v", d)
	}
	close(g.release)
	<-done
	if d := r.admit(acct, hold); d.Lease.ID == "" {
		t.Fatalf("not admitted from the renewed lease: %+v", d)
	}
}
