package leases

import (
	"fmt"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
)

// A sidecar's load that pauses long enough for its lease to be returned
// and forgotten, then resumes, takes a new lease: every request of the
// second lease is recorded and settled, none is taken for one of the first
// lease's (whose bits are kept for a week).
func TestLeaseAfterIdleLosesNothing(t *testing.T) {
	r := newRig(t)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	const perBurst = DefaultMinHolds
	seen := map[string]bool{}
	burst := func(b int) {
		t.Helper()
		r.admit(acct, hold) // the store's: asks for a lease
		r.m.Renew(r.ctx, false)
		var recorded, early []account.Settlement
		for i := 0; i < perBurst; i++ {
			id := fmt.Sprintf("burst%d-%d", b, i)
			d, err := r.m.Admit(r.ctx, &account.Admission{RequestID: id, AccountID: acct, KeyID: "key_1", Priced: "m", Hold: hold})
			if err != nil || d.Lease.ID == "" {
				t.Fatalf("burst %d request %d: %+v %v, want admitted from the lease", b, i, d, err)
			}
			seen[d.Lease.ID] = true
			st := account.Settlement{RequestID: id, AccountID: acct, KeyID: "key_1", Priced: "m", Status: 200, Cost: 1000, Lease: d.Lease}
			if i%2 == 0 {
				// Settled before its record is sent: the settlement alone
				// settles it from the lease.
				r.m.Settled(d.Lease)
				early = append(early, st)
			} else {
				recorded = append(recorded, st)
			}
		}
		r.settle(early...)
		r.m.flush(r.ctx)
		r.settle(recorded...)
		// The store's request of the burst.
		r.settle(account.Settlement{RequestID: r.requestID(), AccountID: acct, KeyID: "key_1", Priced: "m", Status: 200, Cost: 1000})
		// Idle: the lease is returned, then forgotten.
		for i := 0; i < 5; i++ {
			r.m.Renew(r.ctx, true)
		}
	}
	for b := 0; b < 3; b++ {
		burst(b)
	}
	if len(seen) != 3 {
		t.Fatalf("%d lease ids over three leases: %v", len(seen), seen)
	}
	u := r.report(acct)
	const n = 3 * (perBurst + 1)
	if u.Totals.Requests != n || u.Balance != 1000*usd-n*1000 || u.Held != 0 || u.Leased != 0 {
		t.Fatalf("requests %d, balance %d, held %d, leased %d; want %d requests, balance %d, nothing held or leased",
			u.Totals.Requests, u.Balance, u.Held, u.Leased, n, 1000*usd-n*1000)
	}
}
