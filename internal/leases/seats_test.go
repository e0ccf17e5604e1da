package leases

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
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
	r := newRig(t)
	rdb := r.rdb
	acct := r.limited(account.Limits{Concurrency: 200})
	const hold = 10_000_000
	r.admit(acct, hold) // by the script; asks for a lease
	r.m.Renew(r.ctx, false)
	// Seats: twice the one request seen, at least DefaultMinSeats: 2.
	if n := seats(t, rdb, acct); n != 2 {
		t.Fatalf("%d seats leased, want 2", n)
	}
	sts := []account.Settlement{r.leased(acct, hold, 0), r.leased(acct, hold, 0)}
	// No seat left: the script admits it.
	if d := r.admit(acct, hold); d.Lease.ID != "" {
		t.Fatalf("admitted from the lease beyond its seats: %+v", d)
	}
	// One settles before its record is sent (its record is dropped, the
	// settlement takes its seat), the other is recorded.
	r.m.Settled(sts[0].Lease)
	r.settle(sts[0])
	r.m.flush(r.ctx)
	if n, _, _ := r.st.OpenHolds(r.ctx, acct); n != 3 || seats(t, rdb, acct) != 0 {
		t.Fatalf("%d holds, %d seats; want the script's two and one recorded, no seat", n, seats(t, rdb, acct))
	}
	// A settled request's seat is not free again locally.
	r.settle(sts[1])
	if d := r.admit(acct, hold); d.Lease.ID != "" {
		t.Fatalf("admitted from the lease after its seats were used: %+v", d)
	}
	// The renewal grants seats again: twice the 5 requests seen (the room
	// allows 197 / 8).
	r.m.Renew(r.ctx, true)
	if n := seats(t, rdb, acct); n != 10 {
		t.Fatalf("%d seats after the renewal, want 10", n)
	}
	if d := r.admit(acct, hold); d.Lease.ID == "" {
		t.Fatalf("not admitted from the renewed lease: %+v", d)
	}
	r.m.Close(r.ctx)
	if n := seats(t, rdb, acct); n != 0 {
		t.Fatalf("%d seats after Close", n)
	}
	if n, _, _ := r.st.OpenHolds(r.ctx, acct); n != 4 {
		t.Fatalf("%d holds after Close, want the three open and the last, recorded by Close", n)
	}
}

// Two sidecars' managers and the store's script race for one account's
// concurrency limit with requests that do not end: no more are admitted
// than the limit, and once the leases are returned every admitted request
// is a hold and no seat is left.
func TestConcurrencyRaceTwoSidecars(t *testing.T) {
	const limit = 120
	raceTwoSidecars(t, account.Limits{Concurrency: limit}, 0, func(l *lease) { l.reqs = 50 }, func(r *race) {
		holds, _, err := r.st.OpenHolds(context.Background(), r.acct)
		if err != nil {
			t.Fatal(err)
		}
		if n := r.admitted; n > limit || holds != n || seats(t, r.rdb, r.acct) != 0 {
			t.Fatalf("%d admitted, %d holds, %d seats: want at most %d, each a hold, no seat", n, holds, seats(t, r.rdb, r.acct), limit)
		}
		r.earlyRefusals(t, limit)
	})
}

// gatedStore holds each lease call until released.
type gatedStore struct {
	*store.Store
	entered, release chan struct{}
}

func (g *gatedStore) Leases(ctx context.Context, calls []account.LeaseCall) []account.LeaseResult {
	g.entered <- struct{}{}
	<-g.release
	return g.Store.Leases(ctx, calls)
}

// While a lease's renewal is in flight nothing is taken from it (the
// renewal sets it from the free amount the call reported): requests go to
// the script; after it, to the lease again.
func TestNoAdmissionFromALeaseBeingRenewed(t *testing.T) {
	r := newRig(t)
	const hold = 10_000_000
	acct := r.leaseFor(1000*usd, hold)
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
