package leases

import (
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
)

// A sidecar that spent its whole lease, then lost Redis for longer than
// the hold lease while its requests' records waited: another sidecar's
// sweeper returned the lease. Once Redis answers, the sidecar's renewal
// (at nothing free) finds the lease gone and drops it, rather than taking
// a lease again under the old id that its late records would empty; its
// next requests come from a lease under a new id, and every request is
// settled once, with nothing left held or leased.
func TestLeaseSweptWhileSpentIsDropped(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	clock := testclock.New(time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: clock.Now, HoldTTL: time.Minute})
	r := &rig{t: t, ctx: t.Context(), st: st, clock: clock, rdb: rdb,
		m: New(st, st, Options{Interval: time.Second, Now: clock.Now})}
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	var sts []account.Settlement
	admit := func(id string) account.Decision {
		t.Helper()
		d, err := r.m.Admit(r.ctx, &account.Admission{RequestID: id, AccountID: acct, KeyID: "key_1", Priced: "m", Hold: hold})
		if err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit %s: %+v %v", id, d, err)
		}
		sts = append(sts, account.Settlement{RequestID: id, AccountID: acct, KeyID: "key_1", Priced: "m", Status: 200, Cost: 1000, Lease: d.Lease})
		return d
	}
	admit("first") // the store's: asks for a lease
	r.m.Renew(r.ctx, false)
	old := ""
	for i := 0; ; i++ {
		d := admit(fmt.Sprintf("spend-%d", i))
		if d.Lease.ID == "" {
			break // the lease is spent
		}
		old = d.Lease.ID
	}
	if old == "" {
		t.Fatal("nothing admitted from the lease")
	}

	// Partitioned past the lease: the renewal fails, the lease is swept.
	mr.SetError("partitioned")
	r.m.Renew(r.ctx, true)
	mr.SetError("")
	clock.Advance(time.Minute + time.Second)
	if res, err := st.SweepHolds(r.ctx, acct); err != nil || len(res.LeasesReturned) != 1 {
		t.Fatalf("sweep: %+v %v, want the spent lease returned", res, err)
	}
	r.m.Renew(r.ctx, true)
	if m, err := st.Leased(r.ctx, acct); err != nil || len(m) != 0 {
		t.Fatalf("leases %v %v after the renewal of a swept lease: want none", m, err)
	}
	// The late records land; the next requests take a new lease.
	r.m.flush(r.ctx)
	clock.Advance(time.Second) // past the retry after a lease gone
	admit("after")             // the store's: asks for a new lease
	r.m.Renew(r.ctx, false)
	if d := admit("after-lease"); d.Lease.ID == "" || d.Lease.ID == old {
		t.Fatalf("after the sweep: %+v, want a request from a new lease", d.Lease)
	}
	r.m.flush(r.ctx)
	r.settle(sts...)
	for i := 0; i < 5; i++ {
		r.m.Renew(r.ctx, true) // idle: the lease is returned
	}
	u := r.report(acct)
	n := int64(len(sts))
	if u.Totals.Requests != n || u.Balance != 1000*usd-n*1000 || u.Held != 0 || u.Leased != 0 {
		t.Fatalf("requests %d, balance %d, held %d, leased %d; want %d requests, balance %d, nothing held or leased",
			u.Totals.Requests, u.Balance, u.Held, u.Leased, n, 1000*usd-n*1000)
	}
}
