package leases

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
)

const usd = 1_000_000_000

type rig struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Store
	clock *testclock.Clock
	m     *Manager
	n     int
}

func newRig(t *testing.T) *rig {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := testclock.New(time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: c.Now, HoldTTL: time.Minute})
	return &rig{t: t, ctx: context.Background(), st: st, clock: c,
		m: New(st, st, Options{Interval: time.Second, Now: c.Now})}
}

func (r *rig) account(balance int64) string {
	a, err := r.st.CreateAccount(r.ctx, "t", balance, account.Limits{})
	if err != nil {
		r.t.Fatal(err)
	}
	return a.ID
}

func (r *rig) admit(acct string, hold int64) account.Decision {
	r.t.Helper()
	r.n++
	d, err := r.m.Admit(r.ctx, &account.Admission{RequestID: "req" + string(rune('a'+r.n)), AccountID: acct, KeyID: "key_1", Priced: "m", Hold: hold})
	if err != nil || d.Outcome != account.Admitted {
		r.t.Fatalf("admit: %+v %v", d, err)
	}
	return d
}

func (r *rig) report(acct string) store.UsageReport {
	u, err := r.st.Usage(r.ctx, acct, store.Total)
	if err != nil {
		r.t.Fatal(err)
	}
	return u
}

// The first request of an account goes to the store's script and asks for a
// lease; once it is held, requests are admitted from it in memory, recorded
// as holds, and settle as any; returning the lease gives the rest back.
func TestAdmitFromLease(t *testing.T) {
	r := newRig(t)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	if d := r.admit(acct, hold); d.Lease.ID != "" {
		t.Fatal("admitted from a lease before one was taken")
	}
	r.m.Renew(r.ctx, false)
	if u := r.report(acct); u.Leased != DefaultMinHolds*hold {
		t.Fatalf("leased %d, want %d (min holds × the hold)", u.Leased, DefaultMinHolds*hold)
	}
	var sts []account.Settlement
	for i := 0; i < 5; i++ {
		d := r.admit(acct, hold)
		if d.Lease.ID == "" || d.Lease.Seq != int64(i+1) {
			t.Fatalf("request %d: %+v, want admitted from the lease", i, d)
		}
		sts = append(sts, account.Settlement{RequestID: "req" + string(rune('a'+r.n)), AccountID: acct, KeyID: "key_1",
			Priced: "m", Status: 200, Cost: 1000, Lease: d.Lease})
	}
	if r.m.Local.Load() != 5 || r.m.Fallback.Load() != 1 {
		t.Fatalf("local %d, fallback %d", r.m.Local.Load(), r.m.Fallback.Load())
	}
	// Two settle before their record lands; the rest after.
	for _, res := range r.st.SettleBatch(r.ctx, sts[:2]) {
		if !res.Applied || res.Err != nil {
			t.Fatalf("settle %+v", res)
		}
	}
	r.m.flush(r.ctx)
	if n, held, _ := r.st.OpenHolds(r.ctx, acct); n != 4 || held != 4*hold {
		t.Fatalf("%d holds of %d, want the script's and three recorded", n, held)
	}
	for _, res := range r.st.SettleBatch(r.ctx, sts[2:]) {
		if !res.Applied || res.Err != nil {
			t.Fatalf("settle %+v", res)
		}
	}
	u := r.report(acct)
	if u.Leased != (DefaultMinHolds-5)*hold || u.Held != hold || u.Balance != 1000*usd-5000 || u.Totals.Requests != 5 {
		t.Fatalf("report %+v", u)
	}
	r.m.Close(r.ctx)
	if u := r.report(acct); u.Leased != 0 {
		t.Fatalf("leased %d after Close", u.Leased)
	}
}

// An account too small to slice is admitted by the script, every request.
func TestNoLeaseNearTheEnd(t *testing.T) {
	r := newRig(t)
	acct := r.account(usd)
	const hold = 10_000_000 // min 16 holds = 0.16 USD > 1 USD / 8
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	for i := 0; i < 3; i++ {
		if d := r.admit(acct, hold); d.Lease.ID != "" {
			t.Fatalf("admitted from a lease: %+v", d)
		}
	}
	if u := r.report(acct); u.Leased != 0 || u.Held != 4*hold {
		t.Fatalf("report %+v", u)
	}
	// Refused recently: no new lease is asked for within the interval.
	r.m.mu.Lock()
	l := r.m.leases[leaseKey{acct, "key_1"}]
	r.m.mu.Unlock()
	if l.due {
		t.Fatal("a lease was asked for again within the interval")
	}
}

// The lease follows the sidecar's load: its target is twice the holds of
// the last interval.
func TestLeaseFollowsLoad(t *testing.T) {
	r := newRig(t)
	acct := r.account(100_000 * usd)
	const hold = 10_000_000
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	for i := 0; i < 100; i++ {
		r.m.Admit(r.ctx, &account.Admission{RequestID: "busy" + string(rune(i)), AccountID: acct, KeyID: "key_1", Priced: "m", Hold: hold})
	}
	r.m.Renew(r.ctx, true)
	first := r.report(acct).Leased
	if first < 100*hold {
		t.Fatalf("leased %d after 100 holds in an interval, want at least %d", first, 100*hold)
	}
	// Two idle intervals: returned.
	r.m.Renew(r.ctx, true)
	r.m.Renew(r.ctx, true)
	r.m.flush(r.ctx)
	if u := r.report(acct); u.Leased != 0 {
		t.Fatalf("leased %d after two idle intervals", u.Leased)
	}
}
