package store

import (
	"strconv"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
)

// projectLeased is what the project's leases escrow (its state's "leased").
func (e *env) projectLeased(acct, pid string) int64 {
	e.t.Helper()
	v, err := e.rdb.HGet(e.ctx, acctKey(acct, "ps:"+pid), "leased").Result()
	if err != nil && err.Error() != "redis: nil" {
		e.t.Fatal(err)
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// A project's spend budget bounds the leases of its keys, and they count
// against it: the lease escrows room of the key's project as of the key
// and the account; a record moves it into the project's held, a settlement
// before the record and the sweep give it back at every level.
func testLeaseProjectBudget(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	p, err := e.s.CreateProject(e.ctx, acct, "team", account.Limits{DailyNanoUSD: 2 * usd})
	if err != nil {
		t.Fatal(err)
	}
	k := e.projectKey(acct, p.ID)
	lid := "sc1." + k.ID + ".1"
	call := LeaseCall{AccountID: acct, KeyID: k.ID, LeaseID: lid, Want: usd, Min: 1, ProjectID: p.ID, ProjectLimits: k.ProjectLimits}
	r := e.lease(call)
	if r.Reason != LeaseHeld || r.Delta != 250_000_000 {
		t.Fatalf("lease %+v, want the project's 2 USD / 8", r)
	}
	if got := e.projectLeased(acct, p.ID); got != 250_000_000 {
		t.Fatalf("project leased %d", got)
	}
	// What the lease escrows is held for admit.lua at the project level.
	wantRefusal(t, e.admitAs(k, "big", 1_800_000_000), account.DailyLimited, account.ProjectLevel, nextMidnight(e.clock.Now()).Sub(e.clock.Now()))
	wantAdmitted(t, e.admitAs(k, "fits", 1_750_000_000))
	// Nothing is left for another lease of the project's keys.
	k2 := e.projectKey(acct, p.ID)
	if r := e.lease(LeaseCall{AccountID: acct, KeyID: k2.ID, LeaseID: "sc2." + k2.ID + ".1", Want: usd, Min: 1, ProjectID: p.ID, ProjectLimits: k2.ProjectLimits}); r.Reason != LeaseTooSmall {
		t.Fatalf("a second lease with the project's room taken: %+v", r)
	}

	// leased1's record moves its hold from the lease into the project's held.
	rec := func(seq, hold int64, req string) {
		t.Helper()
		err := e.s.RecordLeased(e.ctx, []LeasedRequest{{
			Lease: account.LeaseRef{ID: lid, Seq: seq, Hold: hold}, ProjectCounted: true,
			Admission: account.Admission{RequestID: req, AccountID: acct, KeyID: k.ID, ProjectID: p.ID, Priced: "m", Hold: hold},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec(1, 100_000_000, "leased1")
	rec(1, 100_000_000, "leased1") // a retry
	if s := e.projectState(acct, p.ID); s.Held != 1_850_000_000 || s.InFlight != 2 {
		t.Fatalf("project state after the record %+v", s)
	}
	if got := e.projectLeased(acct, p.ID); got != 150_000_000 {
		t.Fatalf("project leased %d after the record, want 0.15 USD", got)
	}
	st := func(seq int64, req string, cost int64) account.Settlement {
		return account.Settlement{RequestID: req, AccountID: acct, KeyID: k.ID, ProjectID: p.ID, Priced: "m", Cost: cost,
			Lease: account.LeaseRef{ID: lid, Seq: seq, Hold: 100_000_000}}
	}
	if !e.settle(st(1, "leased1", 60_000_000)) || e.settle(st(1, "leased1", 60_000_000)) {
		t.Fatal("leased1 settled other than once")
	}
	// leased2 settles before its record: from the lease, at every level.
	if !e.settle(st(2, "leased2", 70_000_000)) {
		t.Fatal("leased2 not settled from the lease")
	}
	rec(2, 100_000_000, "leased2")
	if e.settle(st(2, "leased2", 70_000_000)) {
		t.Fatal("leased2 settled twice")
	}
	s := e.projectState(acct, p.ID)
	if s.Held != 1_750_000_000 || s.InFlight != 1 || s.Day.Cost != 130_000_000 || s.Day.Requests != 2 {
		t.Fatalf("project state after the settlements %+v", s)
	}
	if got := e.projectLeased(acct, p.ID); got != 50_000_000 {
		t.Fatalf("project leased %d after the settlements, want 0.05 USD", got)
	}

	// The sidecar stops renewing: the sweep gives the rest back to the
	// project and the account.
	e.settleAs(k, "fits", 0)
	e.clock.Advance(holdTTL + 1)
	if r := e.sweep(acct); len(r.LeasesReturned) != 1 || r.LeasesReturned[0] != 50_000_000 {
		t.Fatalf("sweep %+v, want the lease's 0.05 USD returned", r)
	}
	if got := e.projectLeased(acct, p.ID); got != 0 {
		t.Fatalf("project leased %d after the sweep", got)
	}
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 {
		t.Fatalf("account leased %d %v after the sweep", sum, m)
	}
	if s := e.projectState(acct, p.ID); s.Held != 0 || s.InFlight != 0 {
		t.Fatalf("project state after the sweep %+v", s)
	}
	if b := e.balance(acct); b != 100*usd-130_000_000 {
		t.Fatalf("balance %d", b)
	}
}

// A lease of a project's key is taken under that project and its limits:
// a project with a rate, tokens-per-minute or concurrency limit is not
// leased, and a call naming another project than the lease's (or none) is
// an error: the caller names the project a lease was taken under.
func testLeaseProjectKind(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	for _, l := range []account.Limits{{RPM: 100, DailyNanoUSD: usd}, {TPM: 1000}, {Concurrency: 3}} {
		p, _ := e.s.CreateProject(e.ctx, acct, "other", l)
		r := e.lease(LeaseCall{AccountID: acct, KeyID: "key_y", LeaseID: "l.y." + p.ID, Want: usd, Min: 1, ProjectID: p.ID, ProjectLimits: l,
			WantSlots: 10, MinSlots: 1, WantSeats: 10, MinSeats: 1, WantTokens: 100, MinTokens: 1})
		if r.Reason != LeaseNotAllowed || r.Delta != 0 {
			t.Fatalf("project with %+v: %+v, want no lease", l, r)
		}
	}
	p, _ := e.s.CreateProject(e.ctx, acct, "team", account.Limits{TotalNanoUSD: 80 * usd})
	pl := account.Limits{TotalNanoUSD: 80 * usd}
	r := e.lease(LeaseCall{AccountID: acct, LeaseID: "l.1", Want: usd, Min: 1, ProjectID: p.ID, ProjectLimits: pl})
	if r.Reason != LeaseHeld || r.Delta != usd {
		t.Fatalf("lease %+v", r)
	}
	res := e.s.Leases(e.ctx, []LeaseCall{{AccountID: acct, KeyID: "key_x", LeaseID: "l.1", Free: usd, Want: usd, Min: 1, Share: 8,
		ProjectID: "prj_other", ProjectLimits: pl, Taken: true}})
	if res[0].Err == nil {
		t.Fatalf("a call naming another project: %+v, want an error", res[0])
	}
	res = e.s.Leases(e.ctx, []LeaseCall{{AccountID: acct, KeyID: "key_x", LeaseID: "l.1", Free: usd, Want: usd, Min: 1, Share: 8, Taken: true}})
	if res[0].Err == nil {
		t.Fatalf("a call naming no project: %+v, want an error", res[0])
	}
	// A call under the lease's project and limits returns it (the sidecar
	// saw its key's project change).
	r = e.lease(LeaseCall{AccountID: acct, LeaseID: "l.1", Free: usd, Want: 0, Min: 1, ProjectID: p.ID, ProjectLimits: pl, Taken: true})
	if r.Delta != -usd {
		t.Fatalf("lease returned: %+v", r)
	}
	if got := e.projectLeased(acct, p.ID); got != 0 {
		t.Fatalf("project leased %d after the return", got)
	}
	if sum, _ := e.leased(acct); sum != 0 {
		t.Fatalf("account leased %d after the return", sum)
	}
}
