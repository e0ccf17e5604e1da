package store

import (
	"testing"

	"github.com/modelgateway/gateway/internal/account"
)

func (e *env) lease(c LeaseCall) LeaseResult {
	e.t.Helper()
	if c.KeyID == "" {
		c.KeyID = "key_x"
	}
	if c.Share == 0 {
		c.Share = 8
	}
	r := e.s.Leases(e.ctx, []LeaseCall{c})[0]
	if r.Err != nil {
		e.t.Fatalf("lease %s: %v", c.LeaseID, r.Err)
	}
	return r
}

func (e *env) leased(acct string) (sum int64, leases map[string]int64) {
	e.t.Helper()
	m, err := e.s.Leased(e.ctx, acct)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.usage(acct, Day).Leased, m
}

func (e *env) record(acct, lease string, seq, hold int64, req string) {
	e.t.Helper()
	err := e.s.RecordLeased(e.ctx, []LeasedRequest{{
		Lease:     account.LeaseRef{ID: lease, Seq: seq, Hold: hold},
		Admission: account.Admission{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Hold: hold},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// A lease is escrow: its amount leaves what admit.lua lets requests hold,
// it is sized to its share of the room, and it is returned.
func testLeaseEscrow(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	r := e.lease(LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Want: 20 * usd, Min: usd})
	if r.Reason != LeaseHeld || r.Delta != 12_500_000_000 {
		t.Fatalf("lease %+v, want 12.5 USD held (100 / share 8)", r)
	}
	if sum, m := e.leased(acct); sum != 12_500_000_000 || m["sc1.key_x.1"] != 12_500_000_000 {
		t.Fatalf("leased %d %v", sum, m)
	}
	// Another sidecar's share is of what is left.
	r2 := e.lease(LeaseCall{AccountID: acct, LeaseID: "sc2.key_x.1", Want: 20 * usd, Min: usd})
	if r2.Delta != (100*usd-12_500_000_000)/8 {
		t.Fatalf("second lease %+v", r2)
	}
	left := 100*usd - r.Delta - r2.Delta
	if d := e.admit(acct, "big", left+1); d.Outcome != account.InsufficientBalance {
		t.Fatalf("a hold over what the leases left: %s", d.Outcome)
	}
	e.mustAdmit(acct, "fits", left)
	// A renewal shrinks it to its share of what is left (only its own
	// amount now), then it is returned.
	if r := e.lease(LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Free: r.Delta, Want: 5 * usd, Min: usd}); r.Delta != 12_500_000_000/8-12_500_000_000 {
		t.Fatalf("shrink %+v", r)
	}
	e.lease(LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Free: 12_500_000_000 / 8, Want: 0, Min: usd})
	e.lease(LeaseCall{AccountID: acct, LeaseID: "sc2.key_x.1", Free: r2.Delta, Want: 0, Min: usd})
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 {
		t.Fatalf("after return: leased %d %v", sum, m)
	}
	if e.balance(acct) != 100*usd {
		t.Fatalf("balance %d: leasing must not spend", e.balance(acct))
	}
}

// No lease near the end, for accounts with per-request limits, suspended
// accounts, keys with a rate, token or concurrency limit; a swept lease is
// reported gone.
func testLeaseRefused(t *testing.T, e *env) {
	small := e.account(10*usd, account.Limits{})
	if r := e.lease(LeaseCall{AccountID: small, LeaseID: "l.1", Want: 10 * usd, Min: 2 * usd}); r.Reason != LeaseTooSmall || r.Delta != 0 {
		t.Fatalf("near the end: %+v", r)
	}
	rpm := e.account(100*usd, account.Limits{RPM: 10, WindowMinutes: 1})
	if r := e.lease(LeaseCall{AccountID: rpm, LeaseID: "l.1", Want: usd, Min: 1}); r.Reason != LeaseNotAllowed {
		t.Fatalf("account with rpm: %+v", r)
	}
	plain := e.account(100*usd, account.Limits{})
	if r := e.lease(LeaseCall{AccountID: plain, LeaseID: "l.1", Want: usd, Min: 1, KeyLimits: account.Limits{TPM: 1000}}); r.Reason != LeaseNotAllowed {
		t.Fatalf("key with tpm: %+v", r)
	}
	if r := e.lease(LeaseCall{AccountID: plain, LeaseID: "l.2", Want: usd, Min: 1}); r.Reason != LeaseHeld || r.Delta != usd {
		t.Fatalf("lease %+v", r)
	}
	if err := e.s.SetSuspended(e.ctx, plain, true); err != nil {
		t.Fatal(err)
	}
	if r := e.lease(LeaseCall{AccountID: plain, LeaseID: "l.2", Free: usd, Want: usd, Min: 1}); r.Reason != LeaseNotAllowed || r.Delta != -usd {
		t.Fatalf("suspended: %+v, want the lease returned", r)
	}
	if sum, _ := e.leased(plain); sum != 0 {
		t.Fatalf("suspended account still leases %d", sum)
	}
	if r := e.lease(LeaseCall{AccountID: plain, LeaseID: "l.3", Free: 3, Want: usd, Min: 1}); r.Reason != LeaseGone || r.Delta != -3 {
		t.Fatalf("unknown lease with a free amount: %+v", r)
	}
}

// A request admitted from a lease is recorded as an ordinary hold once,
// settled from it; one settled before its record is settled from the lease
// and its record does nothing; replays charge once.
func testLeaseRecordAndSettle(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	const lid = "sc1.key_x.1"
	e.lease(LeaseCall{AccountID: acct, LeaseID: lid, Want: 10 * usd, Min: usd})
	e.record(acct, lid, 1, usd, "r1")
	e.record(acct, lid, 1, usd, "r1") // a retry
	if n, held := e.holds(acct); n != 1 || held != usd {
		t.Fatalf("holds %d of %d after the record", n, held)
	}
	if sum, _ := e.leased(acct); sum != 9*usd {
		t.Fatalf("leased %d after the record, want 9 USD", sum)
	}
	st1 := account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_x", Priced: "m", Cost: 300_000_000,
		Lease: account.LeaseRef{ID: lid, Seq: 1, Hold: usd}}
	if !e.settle(st1) || e.settle(st1) {
		t.Fatal("r1 settled other than once")
	}
	// r2 settles before its record lands.
	st2 := account.Settlement{RequestID: "r2", AccountID: acct, KeyID: "key_x", Priced: "m", Cost: 500_000_000,
		Lease: account.LeaseRef{ID: lid, Seq: 2, Hold: usd}}
	if !e.settle(st2) {
		t.Fatal("r2 not settled from the lease")
	}
	e.record(acct, lid, 2, usd, "r2")
	if e.settle(st2) {
		t.Fatal("r2 settled twice")
	}
	if n, held := e.holds(acct); n != 0 || held != 0 {
		t.Fatalf("holds %d of %d left", n, held)
	}
	if sum, _ := e.leased(acct); sum != 8*usd {
		t.Fatalf("leased %d, want 8 USD", sum)
	}
	if b := e.balance(acct); b != 100*usd-800_000_000 {
		t.Fatalf("balance %d", b)
	}
	if l := e.ledger(acct); len(l) != 2 {
		t.Fatalf("%d ledger entries, want 2", len(l))
	}
	if u := e.usage(acct, Total); u.Totals.Cost != 800_000_000 || u.Totals.Requests != 2 {
		t.Fatalf("usage %+v", u.Totals)
	}
}

// A lease its sidecar stopped renewing is returned by the sweep one lease
// after its last renewal; its recorded holds are swept as any hold.
func testLeaseSweep(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	const lid = "sc1.key_x.1"
	e.lease(LeaseCall{AccountID: acct, LeaseID: lid, Want: 10 * usd, Min: usd})
	e.record(acct, lid, 1, usd, "r1")
	e.clock.Advance(holdTTL - 1)
	if r := e.sweep(acct); len(r.LeasesReturned) != 0 || len(r.Interrupted) != 0 {
		t.Fatalf("swept before the lease ran out: %+v", r)
	}
	e.clock.Advance(2)
	due := e.due()
	if len(due) != 1 || due[0] != acct {
		t.Fatalf("due accounts %v", due)
	}
	r := e.sweep(acct)
	if len(r.LeasesReturned) != 1 || r.LeasesReturned[0] != 9*usd || len(r.Interrupted) != 1 {
		t.Fatalf("sweep %+v, want 9 USD returned and r1 interrupted", r)
	}
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 {
		t.Fatalf("leased %d %v after the sweep", sum, m)
	}
	if n, held := e.holds(acct); n != 0 || held != 0 {
		t.Fatalf("holds %d of %d after the sweep", n, held)
	}
	if b := e.balance(acct); b != 100*usd {
		t.Fatalf("balance %d (r1 died before a checkpoint: no charge)", b)
	}
	if len(e.due()) != 0 {
		t.Fatal("the account stays due with nothing left")
	}
}

// A key's spend budget bounds its leases, and leases count against it.
func testLeaseKeyBudget(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	kl := account.Limits{DailyNanoUSD: 2 * usd}
	r := e.lease(LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Want: usd, Min: 1, KeyLimits: kl})
	if r.Delta != 250_000_000 {
		t.Fatalf("lease %+v, want 2 USD / 8", r)
	}
	wantRefusal(t, e.admitKey(acct, "key_x", "big", 1_800_000_000, 0, kl), account.DailyLimited, account.KeyLevel, nextMidnight(e.clock.Now()).Sub(e.clock.Now()))
	wantAdmitted(t, e.admitKey(acct, "key_x", "fits", 1_750_000_000, 0, kl))
	err := e.s.RecordLeased(e.ctx, []LeasedRequest{{
		Lease: account.LeaseRef{ID: "sc1.key_x.1", Seq: 1, Hold: 250_000_000}, KeyCounted: true,
		Admission: account.Admission{RequestID: "leased1", AccountID: acct, KeyID: "key_x", Priced: "m", Hold: 250_000_000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// key_x's record counts as held.
	if ks := e.keyState(acct, "key_x"); ks.Held != 2*usd || ks.InFlight != 2 {
		t.Fatalf("key state %+v", ks)
	}
}
