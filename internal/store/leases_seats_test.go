package store

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
)

// seatSum reads a hash's "seats" field: the seats leases hold against the
// account's (hash "acct") or a key's ("ks:KEYID") concurrency limit.
func (e *env) seatSum(acct, hash string) int64 {
	e.t.Helper()
	v, err := e.rdb.HGet(e.ctx, acctKey(acct, hash), "seats").Result()
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		e.t.Fatalf("seats of %s: %v", hash, err)
	}
	return n
}

// recordSeat records a request admitted from a lease with seats.
func (e *env) recordSeat(acct, lease string, seq int64, req string, keyCounted bool, kl account.Limits) {
	e.t.Helper()
	err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
		Lease: account.LeaseRef{ID: lease, Seq: seq, Hold: 1}, KeyCounted: keyCounted,
		Admission: account.Admission{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Hold: 1, KeyLimits: kl},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// A lease on an account with a concurrency limit holds seats, counted by
// admit.lua as requests in flight; a record moves a seat into the holds, a
// settlement before the record gives it back, each once, in either order;
// a renewal re-grants its share of the room; returning gives the free
// seats back.
func testLeaseSeats(t *testing.T, e *env) {
	const conc = 40
	acct := e.account(100*usd, account.Limits{Concurrency: conc})
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, WantSeats: 100, MinSeats: 2})
	if r.Reason != account.LeaseHeld || r.Delta != usd || r.Seats != 5 || r.Seated != account.LevelAccount || r.Hi != -1 {
		t.Fatalf("lease %+v, want 1 USD and 5 seats (40 / share 8) against the account's limit", r)
	}
	if n := e.seatSum(acct, "acct"); n != 5 {
		t.Fatalf("account seats %d, want 5", n)
	}
	// admit.lua counts them as in flight: 35 more, not 36.
	for i := range conc - 5 {
		e.mustAdmit(acct, fmt.Sprintf("a%d", i), 1)
	}
	if d := e.admit(acct, "over", 1); d.Outcome != account.ConcurrencyLimited || d.Level != account.AccountLevel {
		t.Fatalf("the 41st in flight: %+v, want the account's concurrency limit", d)
	}
	// r1 recorded (twice: a retry): its seat becomes its hold, once.
	e.recordSeat(acct, lid, 1, "r1", false, account.Limits{})
	e.recordSeat(acct, lid, 1, "r1", false, account.Limits{})
	if n, _ := e.holds(acct); n != conc-5+1 || e.seatSum(acct, "acct") != 4 {
		t.Fatalf("after r1's record: %d holds, %d seats; want 36 and 4", n, e.seatSum(acct, "acct"))
	}
	if d := e.admit(acct, "over", 1); d.Outcome != account.ConcurrencyLimited {
		t.Fatalf("a record must not free a seat: %s", d.Outcome)
	}
	// r2 settles before its record: its seat leaves the lease, once.
	st2 := account.Settlement{RequestID: "r2", AccountID: acct, KeyID: "key_x", Priced: "m", Cost: 1,
		Lease: account.LeaseRef{ID: lid, Seq: 2, Hold: 1}}
	if !e.settle(st2) {
		t.Fatal("r2 not settled from the lease")
	}
	e.recordSeat(acct, lid, 2, "r2", false, account.Limits{})
	if e.settle(st2) {
		t.Fatal("r2 settled twice")
	}
	if n, _ := e.holds(acct); n != conc-5+1 || e.seatSum(acct, "acct") != 3 {
		t.Fatalf("after r2: %d holds, %d seats; want 36 and 3", n, e.seatSum(acct, "acct"))
	}
	// r1 settles: its hold leaves; one request fits again.
	if !e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_x", Priced: "m", Cost: 1,
		Lease: account.LeaseRef{ID: lid, Seq: 1, Hold: 1}}) {
		t.Fatal("r1 not settled")
	}
	e.mustAdmit(acct, "b0", 1)
	e.mustAdmit(acct, "b1", 1)
	if d := e.admit(acct, "over", 1); d.Outcome != account.ConcurrencyLimited {
		t.Fatalf("in flight 37 + 3 seats: %s, want refused", d.Outcome)
	}
	// The renewal: its 3 free seats added back, room 40 - 37 = 3: too
	// few (3 / 8 < 2): the lease is returned, seats and money.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd - 2, Want: usd, Min: 1, FreeSeats: 3, WantSeats: 100, MinSeats: 2})
	if r.Reason != account.LeaseTooSmall || r.Seats != -3 || r.Delta != -(usd-2) {
		t.Fatalf("renewal %+v, want the lease returned with its 3 seats", r)
	}
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 || e.seatSum(acct, "acct") != 0 {
		t.Fatalf("after the return: leased %d %v, %d seats", sum, m, e.seatSum(acct, "acct"))
	}
	for i := range 3 {
		e.mustAdmit(acct, fmt.Sprintf("c%d", i), 1)
	}
	if d := e.admit(acct, "over", 1); d.Outcome != account.ConcurrencyLimited {
		t.Fatalf("the 41st in flight: %s", d.Outcome)
	}
}

// A renewal re-grants seats up to its share of the room, its free seats
// added back; a lease's seats shrink with the room.
func testLeaseSeatsRenew(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{Concurrency: 80})
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, WantSeats: 4, MinSeats: 2})
	if r.Seats != 4 {
		t.Fatalf("lease %+v, want the 4 seats wanted", r)
	}
	// Two used and recorded, two free: renewed to 6 (wanted), then with
	// 70 more in flight, to (80 - 72 - 0 + free) / 8.
	e.recordSeat(acct, lid, 1, "r1", false, account.Limits{})
	e.recordSeat(acct, lid, 2, "r2", false, account.Limits{})
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd - 2, Want: usd, Min: 1, FreeSeats: 2, WantSeats: 6, MinSeats: 2})
	if r.Reason != account.LeaseHeld || r.Seats != 4 || e.seatSum(acct, "acct") != 6 {
		t.Fatalf("renewal %+v, %d seats; want 6 seats (+4)", r, e.seatSum(acct, "acct"))
	}
	for i := range 56 {
		e.mustAdmit(acct, fmt.Sprintf("a%d", i), 1)
	}
	// In flight 58, seats 6 (free): room 80 - 58 = 22 → 2 seats.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd, Want: usd, Min: 1, FreeSeats: 6, WantSeats: 6, MinSeats: 2})
	if r.Reason != account.LeaseHeld || r.Seats != -4 || e.seatSum(acct, "acct") != 2 {
		t.Fatalf("renewal %+v, %d seats; want 2 seats (-4)", r, e.seatSum(acct, "acct"))
	}
	// A seat taken during the renewal (not yet recorded) stays counted:
	// the sidecar said 2 free, 1 was taken since; the lease keeps it.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd, Want: 0, Min: 1, FreeSeats: 1})
	if r.Seats != -1 || e.seatSum(acct, "acct") != 1 {
		t.Fatalf("return %+v with one seat taken: %d seats left, want 1", r, e.seatSum(acct, "acct"))
	}
	if _, m := e.leased(acct); len(m) != 1 {
		t.Fatalf("leases %v: the lease stays while a request it admitted is unrecorded", m)
	}
	e.recordSeat(acct, lid, 3, "r3", false, account.Limits{})
	if n, _ := e.holds(acct); n != 59 || e.seatSum(acct, "acct") != 0 {
		t.Fatalf("after r3's record: %d holds, %d seats; want 59 and 0", n, e.seatSum(acct, "acct"))
	}
}

// A key's concurrency limit: seats in the key's state, counted with its
// open requests; a record counts the request in the key's open count and
// a settlement takes it out; a settlement before the record takes the
// seat from the key's sum.
func testLeaseKeySeats(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	kl := account.Limits{Concurrency: 16}
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, WantSeats: 100, MinSeats: 2, KeyLimits: kl})
	if r.Reason != account.LeaseHeld || r.Seats != 2 || r.Seated != account.LevelKey {
		t.Fatalf("lease %+v, want 2 seats (16 / 8) against the key's limit", r)
	}
	if e.seatSum(acct, "ks:key_x") != 2 || e.seatSum(acct, "acct") != 0 {
		t.Fatalf("seats: key %d, account %d", e.seatSum(acct, "ks:key_x"), e.seatSum(acct, "acct"))
	}
	for i := range 14 {
		wantAdmitted(t, e.admitKey(acct, "key_x", fmt.Sprintf("k%d", i), 1, 0, kl))
	}
	wantRefusal(t, e.admitKey(acct, "key_x", "over", 1, 0, kl), account.ConcurrencyLimited, account.KeyLevel, time.Second)
	e.recordSeat(acct, lid, 1, "r1", true, kl)
	if ks := e.keyState(acct, "key_x"); ks.InFlight != 15 || e.seatSum(acct, "ks:key_x") != 1 {
		t.Fatalf("after the record: key %+v, %d seats", ks, e.seatSum(acct, "ks:key_x"))
	}
	st2 := account.Settlement{RequestID: "r2", AccountID: acct, KeyID: "key_x", Priced: "m", Cost: 1,
		Lease: account.LeaseRef{ID: lid, Seq: 2, Hold: 1}}
	if !e.settle(st2) {
		t.Fatal("r2 not settled from the lease")
	}
	e.recordSeat(acct, lid, 2, "r2", true, kl)
	if ks := e.keyState(acct, "key_x"); ks.InFlight != 15 || e.seatSum(acct, "ks:key_x") != 0 {
		t.Fatalf("after r2: key %+v, %d seats; want 15 in flight, no seat", ks, e.seatSum(acct, "ks:key_x"))
	}
	if !e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_x", Priced: "m", Cost: 1,
		Lease: account.LeaseRef{ID: lid, Seq: 1, Hold: 1}}) {
		t.Fatal("r1 not settled")
	}
	if ks := e.keyState(acct, "key_x"); ks.InFlight != 14 || ks.Held != 14 {
		t.Fatalf("after r1 settled: key %+v, want 14 in flight holding 14", ks)
	}
	// The key's concurrency limit removed: the lease's kind changed.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd - 2, Want: usd, Min: 1, WantSeats: 100, MinSeats: 2})
	if r.Reason != account.LeaseNotAllowed {
		t.Fatalf("renewal under other limits: %+v", r)
	}
	if _, m := e.leased(acct); len(m) != 0 || e.seatSum(acct, "ks:key_x") != 0 {
		t.Fatalf("leases %v, key seats %d after the return", m, e.seatSum(acct, "ks:key_x"))
	}
}

// A dead sidecar's lease is swept with its seats, free or taken by
// requests whose record never came.
func testLeaseSeatSweep(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{Concurrency: 80})
	kl := account.Limits{Concurrency: 40}
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, WantSeats: 100, MinSeats: 2, KeyLimits: kl})
	if r.Seats != 5 || r.Seated != account.LevelAccount|account.LevelKey {
		t.Fatalf("lease %+v, want 5 seats (the key's 40 / 8) against both limits", r)
	}
	e.recordSeat(acct, lid, 1, "r1", true, kl)
	e.clock.Advance(holdTTL + 1)
	res := e.sweep(acct)
	if len(res.LeasesReturned) != 1 {
		t.Fatalf("sweep %+v", res)
	}
	if a, k := e.seatSum(acct, "acct"), e.seatSum(acct, "ks:key_x"); a != 0 || k != 0 {
		t.Fatalf("seats after the sweep: account %d, key %d", a, k)
	}
}

// No seat, no lease: a limit whose room is too small to slice.
func testLeaseSeatsTooSmall(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{Concurrency: 15})
	if r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: "l.1", Want: usd, Min: 1, WantSeats: 100, MinSeats: 2}); r.Reason != account.LeaseTooSmall || r.Delta != 0 || r.Seats != 0 {
		t.Fatalf("15 / 8 seats: %+v, want no lease", r)
	}
	if sum, m := e.leased(acct); sum != 0 || len(m) != 0 || e.seatSum(acct, "acct") != 0 {
		t.Fatalf("leased %d %v, %d seats", sum, m, e.seatSum(acct, "acct"))
	}
}
