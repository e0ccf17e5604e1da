package leases

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

// gatedStore holds its first lease call until released.
type gatedStore struct {
	*store.Store
	entered, release chan struct{}
	held             atomic.Bool
}

func (g *gatedStore) Leases(ctx context.Context, calls []account.LeaseCall) []account.LeaseResult {
	if g.held.CompareAndSwap(false, true) {
		g.entered <- struct{}{}
		<-g.release
	}
	return g.Store.Leases(ctx, calls)
}

// renewWhile runs r's full renewal with during run while its call is in
// flight, and returns once the renewal has returned. fail makes the call
// fail after during.
func (r *rig) renewWhile(fail bool, during func()) {
	r.t.Helper()
	r.renewThrough(func(g *gatedStore) Store {
		if fail {
			return &failingStore{g}
		}
		return g
	}, during)
}

// renewThrough is renewWhile with the renewal's store the gated one as
// wrap makes it.
func (r *rig) renewThrough(wrap func(*gatedStore) Store, during func()) {
	r.t.Helper()
	g := &gatedStore{Store: r.st, entered: make(chan struct{}), release: make(chan struct{})}
	r.m.st = wrap(g)
	defer func() { r.m.st = r.st }()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.m.Renew(r.ctx, true)
	}()
	<-g.entered
	during()
	close(g.release)
	<-done
}

// failingStore's lease calls reach Redis and then fail, as a reply lost on
// the way back would.
type failingStore struct{ *gatedStore }

func (f *failingStore) Leases(ctx context.Context, calls []account.LeaseCall) []account.LeaseResult {
	res := f.gatedStore.Leases(ctx, calls)
	for i := range res {
		res[i] = account.LeaseResult{Err: errors.New("reply lost")}
	}
	return res
}

// lease returns the rig's lease of acct.
func (r *rig) lease(acct string) *lease {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return r.m.leases[leaseKey{acct, "key_1"}]
}

// free returns the lease's free amount and seats, set aside included.
func (r *rig) free(acct string) (free, seats int64) {
	l := r.lease(acct)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.free + l.aside, l.seats + l.asideSeats
}

// While a lease's renewal is in flight requests are admitted from an
// eighth of its free amount, set aside before the call and not reported
// to it; one that does not fit goes to the script. When the renewal
// returns, what is left of the eighth is free again, and Redis's lease
// holds exactly the sidecar's free amount and its unrecorded holds.
func TestAdmissionFromALeaseBeingRenewed(t *testing.T) {
	r := newRig(t)
	const hold = 10_000_000
	acct := r.leaseFor(1000*usd, hold)
	r.leased(acct, hold, 0)
	// 15 holds free: 1.875 set aside, room for one request.
	r.renewWhile(false, func() {
		if d := r.admit(acct, hold); d.Lease.ID == "" {
			t.Fatalf("not admitted from what was set aside: %+v", d)
		}
		if d := r.admit(acct, hold); d.Lease.ID != "" {
			t.Fatalf("admitted beyond what was set aside: %+v", d)
		}
	})
	free, _ := r.free(acct)
	if want := int64(DefaultMinHolds*hold) + 15*hold/8 - hold; free != want {
		t.Fatalf("free %d after the renewal, want the renewal's %d and what is left of the set-aside", free, want)
	}
	r.m.flush(r.ctx)
	if u := r.report(acct); u.Leased != free {
		t.Fatalf("Redis leases %d, the sidecar has %d free and nothing unrecorded", u.Leased, free)
	}
	if d := r.admit(acct, hold); d.Lease.ID == "" {
		t.Fatalf("not admitted from the renewed lease: %+v", d)
	}
	r.m.Close(r.ctx)
	if u := r.report(acct); u.Leased != 0 || u.Held != 5*hold {
		t.Fatalf("after Close: leased %d, held %d; want 0 and the five requests' holds", u.Leased, u.Held)
	}
}

// A lease whose renewal returns it (here its account was suspended while
// the call was in flight) gives back at once what was set aside and not
// used, not when the sweeper finds it expired.
func TestSetAsideReturnedWithItsLease(t *testing.T) {
	r := newRig(t)
	const hold = 10_000_000
	acct := r.leaseFor(1000*usd, hold)
	r.renewWhile(false, func() {
		if err := r.st.SetSuspended(r.ctx, acct, true); err != nil {
			t.Fatal(err)
		}
		if d := r.admit(acct, hold); d.Lease.ID == "" {
			t.Fatalf("not admitted from what was set aside: %+v", d)
		}
	})
	if l := r.lease(acct); l.id != "" {
		t.Fatal("the lease of a suspended account was kept")
	}
	// The request admitted during the call is not recorded yet: its hold
	// alone is still in the lease.
	if u := r.report(acct); u.Leased != hold {
		t.Fatalf("Redis leases %d after the return, want the unrecorded hold %d", u.Leased, hold)
	}
	r.m.flush(r.ctx)
	if u := r.report(acct); u.Leased != 0 || u.Held != 2*hold {
		t.Fatalf("leased %d, held %d; want 0 and the two requests' holds", u.Leased, u.Held)
	}
}

// A renewal returns the lease and the call that gives back its set-aside
// is lost (Redis away after the renewal): the set-aside stays leased in
// Redis, a request admitted from it lands as any from the lease, and the
// sweeper returns the rest after the hold lease, as for any lost lease.
func TestSetAsideLeftToTheSweeperWhenItsReturnFails(t *testing.T) {
	r := newRig(t)
	const hold = 10_000_000
	acct := r.leaseFor(1000*usd, hold)
	free, _ := r.free(acct)
	r.renewThrough(func(g *gatedStore) Store { return &returnFails{gatedStore: g} }, func() {
		if err := r.st.SetSuspended(r.ctx, acct, true); err != nil {
			t.Fatal(err)
		}
		if d := r.admit(acct, hold); d.Lease.ID == "" {
			t.Fatalf("not admitted from what was set aside: %+v", d)
		}
	})
	if l := r.lease(acct); l.id != "" {
		t.Fatal("the lease of a suspended account was kept")
	}
	aside := free / asideShare
	if u := r.report(acct); u.Leased != aside {
		t.Fatalf("Redis leases %d after the lost return, want the set-aside %d", u.Leased, aside)
	}
	r.m.flush(r.ctx)
	if u := r.report(acct); u.Leased != aside-hold || u.Held != 2*hold {
		t.Fatalf("leased %d, held %d after the record; want %d and the two requests' holds", u.Leased, u.Held, aside-hold)
	}
	r.clock.Advance(time.Minute + time.Second)
	res, err := r.st.SweepHolds(r.ctx, acct)
	if err != nil || len(res.LeasesReturned) != 1 {
		t.Fatalf("sweep: %+v %v, want the lease returned", res, err)
	}
	if u := r.report(acct); u.Leased != 0 {
		t.Fatalf("Redis leases %d after the sweep, want 0", u.Leased)
	}
}

// returnFails passes the first lease call (gated) and fails every later
// one without reaching Redis.
type returnFails struct {
	*gatedStore
	calls atomic.Int32
}

func (f *returnFails) Leases(ctx context.Context, calls []account.LeaseCall) []account.LeaseResult {
	if f.calls.Add(1) == 1 {
		return f.gatedStore.Leases(ctx, calls)
	}
	res := make([]account.LeaseResult, len(calls))
	for i := range res {
		res[i].Err = errors.New("Redis away")
	}
	return res
}

// A renewal whose reply is lost leaves the lease as it was: what was set
// aside and not used is free again, and so are its set-aside seats (the
// reported ones may have been given back).
func TestSetAsideKeptWhenTheRenewalFails(t *testing.T) {
	r := newRig(t)
	acct := r.limited(account.Limits{Concurrency: 1000})
	const hold = 10_000_000
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	r.m.mu.Lock()
	l := r.m.leases[leaseKey{acct, "key_1"}]
	r.m.mu.Unlock()
	l.mu.Lock()
	l.reqs = 40 // as if busy: 80 seats
	l.mu.Unlock()
	r.m.Renew(r.ctx, true)
	free, seats := r.free(acct)
	if seats != 80 {
		t.Fatalf("%d seats, want 80", seats)
	}
	r.renewWhile(true, func() {
		r.leased(acct, hold, 0)
	})
	gotFree, gotSeats := r.free(acct)
	if gotFree != free-hold || gotSeats != seats/8-1 {
		t.Fatalf("after the failed renewal: free %d, %d seats; want %d and the %d set-aside seats left",
			gotFree, gotSeats, free-hold, seats/8-1)
	}
}

// Slots and tokens cannot be set aside (the renewal moves them): while a
// rate- or tpm-limited lease's renewal is in flight, requests go to the
// script; after it, to the lease again.
func TestNoAdmissionFromARenewedLeaseWithSlotsOrTokens(t *testing.T) {
	for _, c := range []struct {
		name   string
		limits account.Limits
		tokens int64
	}{
		{"rpm", account.Limits{RPM: 6000, WindowMinutes: 1}, 0},
		{"tpm", account.Limits{TPM: 10_000_000}, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			const hold = 10_000_000
			acct := r.limited(c.limits)
			r.admitTokens(acct, hold, c.tokens)
			r.m.Renew(r.ctx, false)
			r.leased(acct, hold, c.tokens)
			r.renewWhile(false, func() {
				if d := r.admitTokens(acct, hold, c.tokens); d.Lease.ID != "" {
					t.Fatalf("admitted from a lease being renewed: %+v", d)
				}
			})
			r.leased(acct, hold, c.tokens)
		})
	}
}

// A lease closed while its renewal is in flight is returned with what was
// set aside, so a renewal that then fails finds nothing of it to keep: the
// dropped lease holds nothing the sidecar could count again.
func TestSetAsideForgottenWhenClosedDuringTheRenewal(t *testing.T) {
	r := newRig(t)
	const hold = 10_000_000
	acct := r.leaseFor(1000*usd, hold)
	r.leased(acct, hold, 0)
	r.renewWhile(true, func() { r.m.Close(r.ctx) })
	if free, seats := r.free(acct); free != 0 || seats != 0 {
		t.Fatalf("the closed lease keeps %d free and %d seats after its renewal failed; want nothing", free, seats)
	}
}
