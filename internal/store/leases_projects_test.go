package store

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
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
	call := account.LeaseCall{AccountID: acct, KeyID: k.ID, LeaseID: lid, Want: usd, Min: 1, ProjectID: p.ID, ProjectLimits: k.ProjectLimits}
	r := e.lease(call)
	if r.Reason != account.LeaseHeld || r.Delta != 250_000_000 {
		t.Fatalf("lease %+v, want the project's 2 USD / 8", r)
	}
	if got := e.projectLeased(acct, p.ID); got != 250_000_000 {
		t.Fatalf("project leased %d", got)
	}
	// What the lease escrows is held for admit.lua at the project level.
	wantRefusal(t, e.admitAs(k, "big", 1_800_000_000), account.DailyLimited, account.ProjectLevel, account.NextDay(e.clock.Now()).Sub(e.clock.Now()))
	wantAdmitted(t, e.admitAs(k, "fits", 1_750_000_000))
	// Nothing is left for another lease of the project's keys.
	k2 := e.projectKey(acct, p.ID)
	if r := e.lease(account.LeaseCall{AccountID: acct, KeyID: k2.ID, LeaseID: "sc2." + k2.ID + ".1", Want: usd, Min: 1, ProjectID: p.ID, ProjectLimits: k2.ProjectLimits}); r.Reason != account.LeaseTooSmall {
		t.Fatalf("a second lease with the project's room taken: %+v", r)
	}

	// leased1's record moves its hold from the lease into the project's held.
	rec := func(seq, hold int64, req string) {
		t.Helper()
		err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
			Lease: account.LeaseRef{ID: lid, Seq: seq, Hold: hold}, ProjectCounted: true,
			Admission: account.Admission{RequestID: req, AccountID: acct, KeyID: k.ID, ProjectID: p.ID, ProjectLimits: k.ProjectLimits, Priced: "m", Hold: hold},
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

// A lease of a project's key is taken under that project: a call naming
// another project than the lease's (or none) is an error, since the caller
// names the project a lease was taken under; a call under it returns it.
func testLeaseProjectKind(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	p, _ := e.s.CreateProject(e.ctx, acct, "team", account.Limits{TotalNanoUSD: 80 * usd})
	pl := account.Limits{TotalNanoUSD: 80 * usd}
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: "l.1", Want: usd, Min: 1, ProjectID: p.ID, ProjectLimits: pl})
	if r.Reason != account.LeaseHeld || r.Delta != usd {
		t.Fatalf("lease %+v", r)
	}
	for _, other := range []string{"prj_other", ""} {
		res := e.s.Leases(e.ctx, []account.LeaseCall{{AccountID: acct, KeyID: "key_x", LeaseID: "l.1", Free: usd, Want: usd, Min: 1, Share: 8,
			ProjectID: other, ProjectLimits: pl, Taken: true}})
		if res[0].Err == nil {
			t.Fatalf("a call naming project %q: %+v, want an error", other, res[0])
		}
	}
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: "l.1", Free: usd, Want: 0, Min: 1, ProjectID: p.ID, ProjectLimits: pl, Taken: true})
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

// A project's concurrency limit gives its keys' leases seats counted
// against it (the project state's "seats"), as a key's does: admit.lua
// counts them in flight; a record moves one into the project's open
// count, a settlement before the record gives it back; a sweep gives back
// the rest.
func testLeaseProjectSeats(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	pl := account.Limits{Concurrency: 16}
	p, _ := e.s.CreateProject(e.ctx, acct, "team", pl)
	k := e.projectKey(acct, p.ID)
	lid := "sc1." + k.ID + ".1"
	r := e.lease(account.LeaseCall{AccountID: acct, KeyID: k.ID, LeaseID: lid, Want: usd, Min: 1, WantSeats: 100, MinSeats: 2, ProjectID: p.ID, ProjectLimits: pl})
	if r.Reason != account.LeaseHeld || r.Seats != 2 || r.Seated != account.LevelProject {
		t.Fatalf("lease %+v, want 2 seats (16 / 8) against the project's limit", r)
	}
	ps := "ps:" + p.ID
	if e.seatSum(acct, ps) != 2 || e.seatSum(acct, "acct") != 0 || e.seatSum(acct, "ks:"+k.ID) != 0 {
		t.Fatalf("seats: project %d, account %d", e.seatSum(acct, ps), e.seatSum(acct, "acct"))
	}
	for i := range 14 {
		wantAdmitted(t, e.admitAs(k, fmt.Sprintf("k%d", i), 1))
	}
	wantRefusal(t, e.admitAs(k, "over", 1), account.ConcurrencyLimited, account.ProjectLevel, time.Second)
	rec := func(seq int64, req string) {
		t.Helper()
		err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
			Lease: account.LeaseRef{ID: lid, Seq: seq, Hold: 1}, ProjectCounted: true,
			Admission: account.Admission{RequestID: req, AccountID: acct, KeyID: k.ID, ProjectID: p.ID, ProjectLimits: pl, Priced: "m", Hold: 1},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec(1, "r1")
	if s := e.projectState(acct, p.ID); s.InFlight != 15 || e.seatSum(acct, ps) != 1 {
		t.Fatalf("after the record: project %+v, %d seats", s, e.seatSum(acct, ps))
	}
	if !e.settle(account.Settlement{RequestID: "r2", AccountID: acct, KeyID: k.ID, ProjectID: p.ID, Priced: "m", Cost: 1,
		Lease: account.LeaseRef{ID: lid, Seq: 2, Hold: 1}}) {
		t.Fatal("r2 not settled from the lease")
	}
	rec(2, "r2")
	if s := e.projectState(acct, p.ID); s.InFlight != 15 || e.seatSum(acct, ps) != 0 {
		t.Fatalf("after r2: project %+v, %d seats; want 15 in flight, no seat", s, e.seatSum(acct, ps))
	}
	// No seat left to slice (16 - 15 in flight < 8 × 1): the lease is returned.
	r = e.lease(account.LeaseCall{AccountID: acct, KeyID: k.ID, LeaseID: lid, Free: usd - 2, Want: usd, Min: 1, WantSeats: 100, MinSeats: 1,
		ProjectID: p.ID, ProjectLimits: pl, Taken: true})
	if r.Reason != account.LeaseTooSmall || r.Seats != 0 {
		t.Fatalf("renewal %+v, want the lease returned", r)
	}
	if _, m := e.leased(acct); len(m) != 0 || e.seatSum(acct, ps) != 0 {
		t.Fatalf("leases %v, project seats %d after the return", m, e.seatSum(acct, ps))
	}

	// Another project's lease, its sidecar dead: the sweep gives its seats back.
	p2, _ := e.s.CreateProject(e.ctx, acct, "other", pl)
	k2 := e.projectKey(acct, p2.ID)
	if r := e.lease(account.LeaseCall{AccountID: acct, KeyID: k2.ID, LeaseID: "sc1." + k2.ID + ".1", Want: usd, Min: 1, WantSeats: 100, MinSeats: 2,
		ProjectID: p2.ID, ProjectLimits: pl}); r.Seats != 2 || e.seatSum(acct, "ps:"+p2.ID) != 2 {
		t.Fatalf("lease %+v", r)
	}
	e.clock.Advance(holdTTL + 1)
	if r := e.sweep(acct); len(r.LeasesReturned) != 1 {
		t.Fatalf("sweep %+v", r)
	}
	if _, m := e.leased(acct); len(m) != 0 || e.seatSum(acct, "ps:"+p2.ID) != 0 {
		t.Fatalf("leases %v, project seats %d after the sweep", m, e.seatSum(acct, "ps:"+p2.ID))
	}
}

// A project's rate limit gives its keys' leases slots in the project's
// rate log, replaced by the request's id by its record; a project's
// tokens-per-minute limit gives them tokens in the project's token
// window, settled there.
func testLeaseProjectSlotsAndTokens(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	pl := account.Limits{RPM: 80, WindowMinutes: 1, TPM: 8000}
	p, _ := e.s.CreateProject(e.ctx, acct, "team", pl)
	k := e.projectKey(acct, p.ID)
	lid := "sc1." + k.ID + ".1"
	r := e.lease(account.LeaseCall{AccountID: acct, KeyID: k.ID, LeaseID: lid, Want: usd, Min: 1, Cursor: 1, WantSlots: 100, MinSlots: 2,
		WantTokens: 5000, MinTokens: 100, ProjectID: p.ID, ProjectLimits: pl})
	if r.Reason != account.LeaseHeld || r.Rates != account.LevelProject || r.Hi != 11 || r.TokenLevels != account.LevelProject || r.Tokens != 1000 {
		t.Fatalf("lease %+v, want 10 slots (80 / 8) and 1,000 tokens (8,000 / 8) of the project", r)
	}
	if n := placeholders(e.rateLog(acct, "prl:"+p.ID)); n != 10 {
		t.Fatalf("%d placeholders in the project's rate log", n)
	}
	if w := e.tokenWindow(acct, "ps:"+p.ID); w[r.TokenBucket] != [2]int64{0, 1000} {
		t.Fatalf("project token window %v", w)
	}
	// 70 more by the script fill the project's rate.
	for i := range 70 {
		wantAdmitted(t, e.admitAs(k, fmt.Sprintf("s%d", i), 1))
	}
	if d := e.admitAs(k, "over", 1); d.Outcome != account.RateLimited || d.Level != account.ProjectLevel {
		t.Fatalf("past the project's rate: %+v", d)
	}
	ref := account.LeaseRef{ID: lid, Seq: 1, Hold: 1, Tokens: 100, Bucket: r.TokenBucket, TokenLevels: account.LevelProject}
	err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
		Lease: ref, ProjectCounted: true, Slot: 1, Rates: account.LevelProject, At: e.clock.Now(),
		Admission: account.Admission{RequestID: "r1", AccountID: acct, KeyID: k.ID, ProjectID: p.ID, ProjectLimits: pl, Priced: "m", Hold: 1, Tokens: 100},
	}})
	if err != nil {
		t.Fatal(err)
	}
	log := e.rateLog(acct, "prl:"+p.ID)
	if _, ok := log["r1"]; !ok || placeholders(log) != 9 {
		t.Fatalf("project rate log after r1's record: %d placeholders, r1 %v", placeholders(log), ok)
	}
	if !e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: k.ID, ProjectID: p.ID, Priced: "m",
		Usage: usage.Usage{Input: 30}, Lease: ref}) {
		t.Fatal("r1 not settled")
	}
	if w := e.tokenWindow(acct, "ps:"+p.ID); w[r.TokenBucket] != [2]int64{30, 900} {
		t.Fatalf("project token window after r1 %v, want 30 settled and the lease's 900 held", w)
	}
	e.clock.Advance(holdTTL + 1)
	e.sweep(acct)
	if w := e.tokenWindow(acct, "ps:"+p.ID); w[r.TokenBucket][1] != 0 {
		t.Fatalf("project token window after the sweep %v", w)
	}
}
