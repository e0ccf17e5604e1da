package store

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
)

func (e *env) lease(c account.LeaseCall) account.LeaseResult {
	e.t.Helper()
	if c.KeyID == "" {
		c.KeyID = "key_x"
	}
	if c.Share == 0 {
		c.Share = 8
	}
	r := e.s.Leases(e.ctx, []account.LeaseCall{c})[0]
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
	return e.usage(acct, ledger.Day).Leased, m
}

func (e *env) record(acct, lease string, seq, hold int64, req string) {
	e.t.Helper()
	err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
		Lease:     account.LeaseRef{ID: lease, Seq: seq, Hold: hold},
		Admission: account.Admission{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Hold: hold},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// A record of an account the store does not have (sent from a dead
// sidecar's outbox to a store without it) records nothing and makes no
// account.
func testLeaseRecordOfMissingAccount(t *testing.T, e *env) {
	const gone = "acct_0123456789abcdef"
	e.record(gone, "sc1.key_x.1", 1, usd, "r1")
	for _, k := range []string{acctKey(gone, "acct"), acctKey(gone, "holds"), acctKey(gone, "ks:key_x")} {
		if n, err := e.rdb.Exists(e.ctx, k).Result(); err != nil || n != 0 {
			t.Errorf("%s exists (%v) after a record of a missing account", k, err)
		}
	}
}

// A lease is escrow: its amount leaves what admit.lua lets requests hold,
// it is sized to its share of the room, and it is returned.
func testLeaseEscrow(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Want: 20 * usd, Min: usd})
	if r.Reason != account.LeaseHeld || r.Delta != 12_500_000_000 {
		t.Fatalf("lease %+v, want 12.5 USD held (100 / share 8)", r)
	}
	if sum, m := e.leased(acct); sum != 12_500_000_000 || m["sc1.key_x.1"] != 12_500_000_000 {
		t.Fatalf("leased %d %v", sum, m)
	}
	// Another sidecar's share is of what is left.
	r2 := e.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc2.key_x.1", Want: 20 * usd, Min: usd})
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
	if r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Free: r.Delta, Want: 5 * usd, Min: usd}); r.Delta != 12_500_000_000/8-12_500_000_000 {
		t.Fatalf("shrink %+v", r)
	}
	e.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Free: 12_500_000_000 / 8, Want: 0, Min: usd})
	e.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc2.key_x.1", Free: r2.Delta, Want: 0, Min: usd})
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 {
		t.Fatalf("after return: leased %d %v", sum, m)
	}
	if e.balance(acct) != 100*usd {
		t.Fatalf("balance %d: leasing must not spend", e.balance(acct))
	}
}

// No lease near the end, for suspended accounts, for accounts and keys with
// a tpm limit when no tokens are wanted; a swept lease is reported gone.
func testLeaseRefused(t *testing.T, e *env) {
	small := e.account(10*usd, account.Limits{})
	if r := e.lease(account.LeaseCall{AccountID: small, LeaseID: "l.1", Want: 10 * usd, Min: 2 * usd}); r.Reason != account.LeaseTooSmall || r.Delta != 0 {
		t.Fatalf("near the end: %+v", r)
	}
	tpm := e.account(100*usd, account.Limits{TPM: 1000})
	if r := e.lease(account.LeaseCall{AccountID: tpm, LeaseID: "l.1", Want: usd, Min: 1}); r.Reason != account.LeaseTooSmall || r.Delta != 0 {
		t.Fatalf("account with tpm, no tokens wanted: %+v", r)
	}
	// A rate-limited account's lease needs slots: none asked for, none held.
	rpm := e.account(100*usd, account.Limits{RPM: 10, WindowMinutes: 1})
	if r := e.lease(account.LeaseCall{AccountID: rpm, LeaseID: "l.1", Want: usd, Min: 1}); r.Reason != account.LeaseTooSmall || r.Delta != 0 {
		t.Fatalf("account with rpm, no slots wanted: %+v", r)
	}
	plain := e.account(100*usd, account.Limits{})
	if r := e.lease(account.LeaseCall{AccountID: plain, LeaseID: "l.1", Want: usd, Min: 1, KeyLimits: account.Limits{TPM: 1000}}); r.Reason != account.LeaseTooSmall || r.Delta != 0 {
		t.Fatalf("key with tpm, no tokens wanted: %+v", r)
	}
	if r := e.lease(account.LeaseCall{AccountID: plain, LeaseID: "l.2", Want: usd, Min: 1}); r.Reason != account.LeaseHeld || r.Delta != usd {
		t.Fatalf("lease %+v", r)
	}
	if err := e.s.SetSuspended(e.ctx, plain, true); err != nil {
		t.Fatal(err)
	}
	if r := e.lease(account.LeaseCall{AccountID: plain, LeaseID: "l.2", Free: usd, Want: usd, Min: 1}); r.Reason != account.LeaseNotAllowed || r.Delta != -usd {
		t.Fatalf("suspended: %+v, want the lease returned", r)
	}
	if sum, _ := e.leased(plain); sum != 0 {
		t.Fatalf("suspended account still leases %d", sum)
	}
	if r := e.lease(account.LeaseCall{AccountID: plain, LeaseID: "l.3", Free: 3, Want: usd, Min: 1}); r.Reason != account.LeaseGone || r.Delta != -3 {
		t.Fatalf("unknown lease with a free amount: %+v", r)
	}
}

// A request admitted from a lease is recorded as an ordinary hold once,
// settled from it; one settled before its record is settled from the lease
// and its record does nothing; replays charge once.
func testLeaseRecordAndSettle(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	const lid = "sc1.key_x.1"
	e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: 10 * usd, Min: usd})
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
	if u := e.usage(acct, ledger.Total); u.Totals.Cost != 800_000_000 || u.Totals.Requests != 2 {
		t.Fatalf("usage %+v", u.Totals)
	}
}

// A lease its sidecar stopped renewing is returned by the sweep one lease
// after its last renewal; its recorded holds are swept as any hold.
func testLeaseSweep(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	const lid = "sc1.key_x.1"
	e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: 10 * usd, Min: usd})
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

// A lease swept while its sidecar had nothing free (every bit of it held by
// requests whose records had not landed: the sidecar was cut off from
// Redis) is gone for that sidecar: its next renewal, at free 0, is told so
// and takes no lease under the old id. Were the lease made again under that
// id, the late records would take their holds out of the new lease, which
// never held them, and the sidecar would admit from money Redis no longer
// counts as leased.
func testLeaseSweptAtFreeZero(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	const lid = "sc1.key_x.1"
	if r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: 10 * usd, Min: usd}); r.Reason != account.LeaseHeld || r.Delta != 10*usd {
		t.Fatalf("lease %+v", r)
	}
	// The sidecar admits r1 with the whole lease, then loses Redis for
	// longer than the lease: r1's record waits, the lease is swept.
	e.clock.Advance(holdTTL + 1)
	if r := e.sweep(acct); len(r.LeasesReturned) != 1 || r.LeasesReturned[0] != 10*usd {
		t.Fatalf("sweep %+v, want the lease's 10 USD returned", r)
	}
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: 10 * usd, Min: usd, Taken: true})
	if r.Reason != account.LeaseGone || r.Delta != 0 {
		t.Fatalf("renewal at free 0 of a swept lease: %+v, want it gone", r)
	}
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 {
		t.Fatalf("leased %d %v after the swept lease's renewal", sum, m)
	}
	// r1's record lands late: its hold is held, nothing is leased.
	e.record(acct, lid, 1, 10*usd, "r1")
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 {
		t.Fatalf("leased %d %v after the late record", sum, m)
	}
	if n, held := e.holds(acct); n != 1 || held != 10*usd {
		t.Fatalf("holds %d of %d after the late record, want r1's", n, held)
	}
	// A first take under a new id at free 0 is a lease as ever.
	if r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.2", Want: 10 * usd, Min: usd}); r.Reason != account.LeaseHeld || r.Delta != 10*usd {
		t.Fatalf("new lease %+v", r)
	}
}

// A key's spend budget bounds its leases, and leases count against it.
func testLeaseKeyBudget(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	kl := account.Limits{DailyNanoUSD: 2 * usd}
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc1.key_x.1", Want: usd, Min: 1, KeyLimits: kl})
	if r.Delta != 250_000_000 {
		t.Fatalf("lease %+v, want 2 USD / 8", r)
	}
	wantRefusal(t, e.admitKey(acct, "key_x", "big", 1_800_000_000, 0, kl), account.DailyLimited, account.KeyLevel, account.NextDay(e.clock.Now()).Sub(e.clock.Now()))
	wantAdmitted(t, e.admitKey(acct, "key_x", "fits", 1_750_000_000, 0, kl))
	err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
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

// rateLog returns an account's or key's rate log: member -> score (unix ms).
func (e *env) rateLog(acct, name string) map[string]int64 {
	e.t.Helper()
	zs, err := e.rdb.ZRangeWithScores(e.ctx, acctKey(acct, name), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[string]int64, len(zs))
	for _, z := range zs {
		out[z.Member.(string)] = int64(z.Score)
	}
	return out
}

// placeholders counts the members of log that are lease slots.
func placeholders(log map[string]int64) int {
	n := 0
	for m := range log {
		if strings.HasPrefix(m, "L:") {
			n++
		}
	}
	return n
}

// recordSlot records a request admitted from a lease's slot at its
// admission time at.
func (e *env) recordSlot(acct, lease string, seq, slot int64, rates int, req string, at time.Time, kl account.Limits) {
	e.t.Helper()
	err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
		Lease: account.LeaseRef{ID: lease, Seq: seq, Hold: 1}, Slot: slot, Rates: rates, At: at,
		Admission: account.Admission{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Hold: 1, KeyLimits: kl},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// A lease on a rate-limited account escrows request slots: placeholders in
// the rate log that admit.lua counts as admissions; a record replaces one
// by its request, scored at its admission; a renewal rescores the free
// ones and resizes them to their share of the room; returning removes them.
func testLeaseRateSlots(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{RPM: 80, WindowMinutes: 1})
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, Cursor: 1, WantSlots: 100, MinSlots: 2})
	if r.Reason != account.LeaseHeld || r.Delta != usd || r.Hi != 11 || r.Rates != account.LevelAccount {
		t.Fatalf("lease %+v, want 1 USD and slots [1, 11) (80 / share 8) in the account's log", r)
	}
	log := e.rateLog(acct, "rl")
	if len(log) != 10 || placeholders(log) != 10 || log["L:"+lid+":1"] != e.clock.Now().UnixMilli() {
		t.Fatalf("rate log %v, want 10 placeholders scored now", log)
	}
	// admit.lua counts them: 70 more, not 71.
	for i := range 70 {
		e.mustAdmit(acct, fmt.Sprintf("a%d", i), 1)
	}
	if d := e.admit(acct, "a70", 1); d.Outcome != account.RateLimited {
		t.Fatalf("the 81st request in the window: %s, want rate limited", d.Outcome)
	}
	// Slot 1 used at t0+1s, recorded (twice: a retry) at t0+2s.
	at := e.clock.Now().Add(time.Second)
	e.clock.Advance(2 * time.Second)
	e.recordSlot(acct, lid, 1, 1, account.LevelAccount, "leased1", at, account.Limits{})
	e.recordSlot(acct, lid, 1, 1, account.LevelAccount, "leased1", at, account.Limits{})
	log = e.rateLog(acct, "rl")
	if len(log) != 80 || placeholders(log) != 9 || log["leased1"] != at.UnixMilli() {
		t.Fatalf("after the record: %d members, %d placeholders, leased1 at %d (want 80, 9, %d)",
			len(log), placeholders(log), log["leased1"], at.UnixMilli())
	}
	// The renewal: slots 2..10 free, room 80 - 71 = 9 → one slot, [2, 3),
	// scored now.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd, Want: usd, Min: 1, Cursor: 2, WantSlots: 100, MinSlots: 1})
	if r.Reason != account.LeaseHeld || r.Hi != 3 {
		t.Fatalf("renewal %+v, want slots [2, 3)", r)
	}
	log = e.rateLog(acct, "rl")
	if len(log) != 72 || placeholders(log) != 1 || log["L:"+lid+":2"] != e.clock.Now().UnixMilli() {
		t.Fatalf("after the renewal: %v", log)
	}
	// Too few slots to be worth a lease: returned whole.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd, Want: usd, Min: 1, Cursor: 2, WantSlots: 100, MinSlots: 2})
	if r.Reason != account.LeaseTooSmall || r.Delta != -usd {
		t.Fatalf("renewal below the least slots: %+v, want the lease returned", r)
	}
	if log := e.rateLog(acct, "rl"); len(log) != 71 || placeholders(log) != 0 {
		t.Fatalf("after the return: %d members, %d placeholders, want 71 and none", len(log), placeholders(log))
	}
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 {
		t.Fatalf("leased %d %v after the return", sum, m)
	}
	// What admit.lua allows is what is left: 9.
	for i := range 9 {
		e.mustAdmit(acct, fmt.Sprintf("b%d", i), 1)
	}
	if d := e.admit(acct, "b9", 1); d.Outcome != account.RateLimited {
		t.Fatalf("the 81st request in the window: %s", d.Outcome)
	}
}

// A key's rate limit slices its own log the same way, beside the account's.
func testLeaseKeyRateSlots(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{RPM: 800, WindowMinutes: 1})
	kl := account.Limits{RPM: 16, WindowMinutes: 1}
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, Cursor: 1, WantSlots: 100, MinSlots: 1, KeyLimits: kl})
	if r.Reason != account.LeaseHeld || r.Hi != 3 || r.Rates != account.LevelAccount|account.LevelKey {
		t.Fatalf("lease %+v, want slots [1, 3) (the key's 16 / 8) in both logs", r)
	}
	if a, k := e.rateLog(acct, "rl"), e.rateLog(acct, "krl:key_x"); placeholders(a) != 2 || placeholders(k) != 2 {
		t.Fatalf("placeholders: account %v, key %v", a, k)
	}
	for i := range 14 {
		wantAdmitted(t, e.admitKey(acct, "key_x", fmt.Sprintf("k%d", i), 1, 0, kl))
	}
	if d := e.admitKey(acct, "key_x", "k14", 1, 0, kl); d.Outcome != account.RateLimited || d.Level != account.KeyLevel {
		t.Fatalf("the key's 17th request: %+v", d)
	}
	e.recordSlot(acct, lid, 1, 1, account.LevelAccount|account.LevelKey, "leased1", e.clock.Now(), kl)
	a, k := e.rateLog(acct, "rl"), e.rateLog(acct, "krl:key_x")
	if placeholders(a) != 1 || placeholders(k) != 1 || len(k) != 16 || len(a) != 16 {
		t.Fatalf("after the record: account %d members (%d placeholders), key %d (%d)", len(a), placeholders(a), len(k), placeholders(k))
	}
	// The key's rate limit removed: the lease's kind changed, it is returned
	// and its free slot leaves both logs.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd, Want: usd, Min: 1, Cursor: 2, WantSlots: 100, MinSlots: 1})
	if r.Reason != account.LeaseNotAllowed || r.Delta != -usd {
		t.Fatalf("renewal under other limits: %+v", r)
	}
	if a, k := e.rateLog(acct, "rl"), e.rateLog(acct, "krl:key_x"); placeholders(a) != 0 || placeholders(k) != 0 {
		t.Fatalf("placeholders left: account %v, key %v", a, k)
	}
}

// A dead sidecar's lease is swept with its placeholders, free or used
// since its last renewal; a record that lands after still counts its
// request.
func testLeaseRateSweep(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{RPM: 8, WindowMinutes: 60})
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, Cursor: 1, WantSlots: 100, MinSlots: 1})
	if r.Hi != 61 {
		t.Fatalf("lease %+v, want slots [1, 61) (480 / 8)", r)
	}
	e.recordSlot(acct, lid, 1, 1, account.LevelAccount, "r1", e.clock.Now(), account.Limits{})
	// Slot 2 used, its record lost with the sidecar.
	e.clock.Advance(holdTTL + 1)
	if placeholders(e.rateLog(acct, "rl")) != 59 {
		t.Fatal("placeholders aged out within the window")
	}
	res := e.sweep(acct)
	if len(res.LeasesReturned) != 1 {
		t.Fatalf("sweep %+v", res)
	}
	if log := e.rateLog(acct, "rl"); len(log) != 1 || log["r1"] == 0 {
		t.Fatalf("after the sweep: %v, want r1 alone", log)
	}
	e.recordSlot(acct, lid, 2, 2, account.LevelAccount, "r2", start, account.Limits{})
	if log := e.rateLog(acct, "rl"); len(log) != 2 || log["r2"] != start.UnixMilli() {
		t.Fatalf("after a late record: %v", log)
	}
}

// Leases of two sidecars and admit.lua racing for one rate limit: the log
// never holds more than the limit, and once every record has landed and
// every lease is returned it holds exactly the admissions.
func testLeaseRateRace(t *testing.T, e *env) {
	const limit = 100
	acct := e.account(100*usd, account.Limits{RPM: limit, WindowMinutes: 1})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for sc := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lid := fmt.Sprintf("sc%d.key_x.1", sc)
			var cursor, hi int64 = 1, 1
			var free int64
			for round := range 20 {
				r := e.s.Leases(e.ctx, []account.LeaseCall{{AccountID: acct, KeyID: "key_x", LeaseID: lid, Free: free, Want: usd, Min: 1,
					Share: 8, Cursor: cursor, WantSlots: 10, MinSlots: 1}})[0]
				if r.Err != nil {
					t.Error(r.Err)
					return
				}
				free += r.Delta
				hi = max(r.Hi, cursor)
				var recs []account.LeasedRequest
				for ; cursor < hi && round%2 == 0; cursor++ {
					recs = append(recs, account.LeasedRequest{Lease: account.LeaseRef{ID: lid, Seq: cursor, Hold: 1}, Slot: cursor, Rates: account.LevelAccount,
						Admission: account.Admission{RequestID: fmt.Sprintf("%s.%d", lid, cursor), AccountID: acct, KeyID: "key_x", Priced: "m", Hold: 1}})
					free--
					admitted.Add(1)
				}
				if err := e.s.RecordLeased(e.ctx, recs); err != nil {
					t.Error(err)
					return
				}
			}
			e.s.Leases(e.ctx, []account.LeaseCall{{AccountID: acct, KeyID: "key_x", LeaseID: lid, Free: free, Want: 0, Min: 1, Share: 8, Cursor: cursor}})
		}()
	}
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 {
				d, err := e.s.Admit(e.ctx, &account.Admission{RequestID: fmt.Sprintf("w%d.%d", w, i), AccountID: acct, KeyID: "key_x", Priced: "m", Hold: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Outcome == account.Admitted {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	log := e.rateLog(acct, "rl")
	if n := admitted.Load(); n > limit || int64(len(log)) != n || placeholders(log) != 0 {
		t.Fatalf("%d admitted, %d in the log (%d placeholders): want at most %d, all logged, no placeholder", n, len(log), placeholders(log), limit)
	}
	if admitted.Load() < limit-2*10 {
		t.Fatalf("%d admitted: the leases left more than their slots unused", admitted.Load())
	}
}
