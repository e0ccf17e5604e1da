package leases

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
)

const usd = 1_000_000_000

type rig struct {
	t     *testing.T
	ctx   context.Context
	st    *store.Store
	clock *testclock.Clock
	rdb   *redis.Client
	m     *Manager
	n     int
}

func newRig(t *testing.T) *rig {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c := testclock.New(time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: c.Now, HoldTTL: time.Minute})
	return &rig{t: t, ctx: context.Background(), st: st, clock: c, rdb: rdb,
		m: New(st, st, Options{Interval: time.Second, Now: c.Now})}
}

// limited creates an account of 1,000 USD with limits l.
func (r *rig) limited(l account.Limits) string {
	r.t.Helper()
	a, err := r.st.CreateAccount(r.ctx, "t", 1000*usd, l)
	if err != nil {
		r.t.Fatal(err)
	}
	return a.ID
}

func (r *rig) account(balance int64) string {
	a, err := r.st.CreateAccount(r.ctx, "t", balance, account.Limits{})
	if err != nil {
		r.t.Fatal(err)
	}
	return a.ID
}

// leaseFor creates an account of balance whose key holds a lease: its
// first request, of hold, admitted by the script, asked for it.
func (r *rig) leaseFor(balance, hold int64) string {
	r.t.Helper()
	acct := r.account(balance)
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	return acct
}

func (r *rig) admit(acct string, hold int64) account.Decision {
	r.t.Helper()
	return r.admitTokens(acct, hold, 0)
}

// admitTokens admits a request of token bound tokens, which must be admitted.
func (r *rig) admitTokens(acct string, hold, tokens int64) account.Decision {
	r.t.Helper()
	r.n++
	d, err := r.m.Admit(r.ctx, &account.Admission{RequestID: r.requestID(), AccountID: acct, KeyID: "key_1", Priced: "m", Hold: hold, Tokens: tokens})
	if err != nil || d.Outcome != account.Admitted {
		r.t.Fatalf("admit: %+v %v", d, err)
	}
	return d
}

// requestID is the id of the rig's last request.
func (r *rig) requestID() string { return "req" + string(rune('a'+r.n)) }

// leased admits a request that must come from the lease (with its token
// bound of the lease's tokens, where it has one) and returns its
// settlement at 1,000 nano-USD.
func (r *rig) leased(acct string, hold, tokens int64) account.Settlement {
	r.t.Helper()
	d := r.admitTokens(acct, hold, tokens)
	if d.Lease.ID == "" || d.Lease.Tokens != tokens {
		r.t.Fatalf("request %s: %+v, want admitted from the lease", r.requestID(), d)
	}
	return account.Settlement{RequestID: r.requestID(), AccountID: acct, KeyID: "key_1", Priced: "m", Status: 200, Cost: 1000, Lease: d.Lease}
}

// settle applies sts, each of which must be applied.
func (r *rig) settle(sts ...account.Settlement) {
	r.t.Helper()
	for _, res := range r.st.SettleBatch(r.ctx, sts) {
		if !res.Applied || res.Err != nil {
			r.t.Fatalf("settle %+v", res)
		}
	}
}

func (r *rig) report(acct string) ledger.UsageReport {
	u, err := r.st.Usage(r.ctx, acct, ledger.Total)
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
	const hold = 10_000_000
	acct := r.leaseFor(100_000*usd, hold)
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

// A lease returned for want of requests is taken again as soon as a
// request comes back, not an interval later: until then every request
// of the key costs a round trip to the store.
func TestLeaseTakenAgainAfterIdle(t *testing.T) {
	r := newRig(t)
	const hold = 10_000_000
	acct := r.leaseFor(100_000*usd, hold)
	r.m.flush(r.ctx)
	r.settle(r.leased(acct, hold, 0))
	r.m.Renew(r.ctx, true)
	// Two idle intervals: returned, and not yet forgotten.
	r.m.Renew(r.ctx, true)
	r.m.Renew(r.ctx, true)
	if u := r.report(acct); u.Leased != 0 {
		t.Fatalf("leased %d after two idle intervals", u.Leased)
	}
	if d := r.admit(acct, hold); d.Lease.ID != "" {
		t.Fatalf("admitted from a returned lease: %+v", d)
	}
	r.m.Renew(r.ctx, false) // the request's ask
	if u := r.report(acct); u.Leased == 0 {
		t.Fatal("no lease taken again when the request asked for one")
	}
	r.leased(acct, hold, 0)
}

// rateLog returns the members of an account's rate log, and how many are
// lease slots' placeholders.
func (r *rig) rateLog(rdb *redis.Client, acct string) (members []string, placeholders int) {
	r.t.Helper()
	members, err := rdb.ZRange(r.ctx, "gw:{acct:"+acct+"}:rl", 0, -1).Result()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, m := range members {
		if strings.HasPrefix(m, "L:") {
			placeholders++
		}
	}
	return members, placeholders
}

// An account with a request-rate limit is admitted from its lease, one
// request slot each; a request beyond the slots goes to the store's
// script; each record leaves its request, not a placeholder, in the log.
func TestAdmitFromLeaseWithRateLimit(t *testing.T) {
	r := newRig(t)
	acct := r.limited(account.Limits{RPM: 60, WindowMinutes: 1})
	const hold = 10_000_000
	r.admit(acct, hold) // by the script; asks for a lease
	r.m.Renew(r.ctx, false)
	// Slots: twice the one request seen, at least DefaultMinSlots: 2.
	if _, ph := r.rateLog(r.rdb, acct); ph != 2 {
		t.Fatalf("%d placeholders, want 2 slots", ph)
	}
	sts := []account.Settlement{r.leased(acct, hold, 0), r.leased(acct, hold, 0)}
	// No slot left: the script admits it, and counts the placeholders.
	if d := r.admit(acct, hold); d.Lease.ID != "" {
		t.Fatalf("admitted from the lease beyond its slots: %+v", d)
	}
	if r.m.Local.Load() != 2 || r.m.Fallback.Load() != 2 {
		t.Fatalf("local %d, fallback %d", r.m.Local.Load(), r.m.Fallback.Load())
	}
	// One settles before its record is sent: the record still goes, for
	// its slot.
	r.m.Settled(sts[0].Lease)
	r.settle(sts[0])
	r.m.flush(r.ctx)
	members, ph := r.rateLog(r.rdb, acct)
	if len(members) != 4 || ph != 0 {
		t.Fatalf("rate log %v, want the four requests and no placeholder", members)
	}
	if n, held, _ := r.st.OpenHolds(r.ctx, acct); n != 3 || held != 3*hold {
		t.Fatalf("%d holds of %d, want the script's two and one recorded", n, held)
	}
	r.m.Close(r.ctx)
	if members, _ := r.rateLog(r.rdb, acct); len(members) != 4 {
		t.Fatalf("rate log %v after Close", members)
	}
	if u := r.report(acct); u.Leased != 0 {
		t.Fatalf("leased %d after Close", u.Leased)
	}
}

// Two sidecars' managers (renewing and recording on their own loops) and
// the store's script race for one account's rate limit: no more requests
// are admitted than the limit, and the log holds exactly the admissions
// once the leases are returned.
func TestRateLimitRaceTwoSidecars(t *testing.T) {
	const limit = 120
	raceTwoSidecars(t, account.Limits{RPM: limit, WindowMinutes: 1}, 0, func(l *lease) { l.reqs = 50 }, func(r *race) {
		members, ph := (&rig{t: t, ctx: context.Background()}).rateLog(r.rdb, r.acct)
		if n := r.admitted; n > limit || int64(len(members)) != n || ph != 0 {
			t.Fatalf("%d admitted, %d in the log (%d placeholders): want at most %d, each logged once, no placeholder", n, len(members), ph, limit)
		}
		r.earlyRefusals(t, limit)
	})
}

// race is two sidecars' managers (renewing and recording on their own
// loops) and the store's script racing for one account's limit with
// requests that do not end: each manager first takes a lease, sized as if
// busy (busy sets its last interval's load), then six workers admit
// through the managers and two through the script.
type race struct {
	rdb      *redis.Client
	st       *store.Store
	acct     string
	admitted int64
	ms       []*Manager
}

// raceTwoSidecars runs the race until the leases took part in it: how
// many requests a lease admits depends on how the scheduler interleaves
// its renewals with the script's admissions, and on a loaded machine the
// script may take the whole limit first. Every run's outcome is checked
// by check (its own account); the last run's is returned.
func raceTwoSidecars(t *testing.T, limits account.Limits, tokens int64, busy func(l *lease), check func(*race)) *race {
	t.Helper()
	const attempts = 5
	for i := 1; ; i++ {
		r := raceOnce(t, limits, tokens, busy)
		check(r)
		local := r.ms[0].Local.Load() + r.ms[1].Local.Load()
		if local >= 4 {
			return r
		}
		if i == attempts {
			t.Fatalf("in %d runs, hardly any request was admitted from a lease: the race shows nothing", attempts)
		}
		t.Logf("run %d: %d admitted from leases; again", i, local)
	}
}

func raceOnce(t *testing.T, limits account.Limits, tokens int64, busy func(l *lease)) *race {
	t.Helper()
	rg := newRig(t)
	rdb, st, c := rg.rdb, rg.st, rg.clock
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	acct := rg.limited(limits)
	admission := func(id string) *account.Admission {
		return &account.Admission{RequestID: id, AccountID: acct, KeyID: "key_1", Priced: "m", Hold: 1000, Tokens: tokens}
	}
	var admitted atomic.Int64
	var ms []*Manager
	for i := range 2 {
		m := New(st, st, Options{Interval: 2 * time.Millisecond, Now: c.Now})
		ms = append(ms, m)
		// The first request of each is admitted by the script and takes
		// the lease; the second is admitted from it.
		for j := range 2 {
			d, err := m.Admit(ctx, admission(fmt.Sprintf("warm%d.%d", i, j)))
			if err != nil || d.Outcome != account.Admitted || (j == 1) != (d.Lease.ID != "") {
				t.Fatalf("warm-up %d.%d: %+v %v", i, j, d, err)
			}
			admitted.Add(1)
			if j == 0 {
				busy(m.leases[leaseKey{acct, "key_1"}])
				m.Renew(ctx, false)
			}
		}
	}
	var loops sync.WaitGroup
	for _, m := range ms {
		loops.Go(func() { m.Run(ctx) })
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 100 {
				adm := admission(fmt.Sprintf("w%d.%d", w, i))
				var d account.Decision
				var err error
				if w < 6 {
					d, err = ms[w%2].Admit(ctx, adm)
				} else {
					d, err = st.Admit(ctx, adm)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if d.Outcome == account.Admitted {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	loops.Wait()
	for _, m := range ms {
		m.Close(context.Background())
	}
	r := &race{rdb: rdb, st: st, acct: acct, admitted: admitted.Load(), ms: ms}
	t.Logf("%d admitted (%d and %d from leases)", r.admitted, ms[0].Local.Load(), ms[1].Local.Load())
	return r
}

// earlyRefusals checks what leasing costs: at most what the two leases
// held at the end, each at most the room / share.
func (r *race) earlyRefusals(t *testing.T, limit int64) {
	t.Helper()
	if r.admitted < limit-2*limit/DefaultShare {
		t.Fatalf("%d admitted, want at least %d", r.admitted, limit-2*limit/DefaultShare)
	}
}

// A record is sent at the end of the round after the one it was queued in:
// a request that settles before then (Settled) is never recorded, and one
// still running is, by the second round.
func TestRecordSentTheRoundAfter(t *testing.T) {
	r := newRig(t)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	r.admit(acct, hold) // by the script; it asks for the lease
	r.m.Renew(r.ctx, false)
	open := func() int64 {
		t.Helper()
		n, _, err := r.st.OpenHolds(r.ctx, acct)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	short := r.leased(acct, hold, 0)
	long := r.leased(acct, hold, 0)
	if left := r.m.send(r.ctx, false); left != 2 || open() != 1 {
		t.Fatalf("after the first round: %d queued, %d holds; want both records kept for the next round and only the script's hold", left, open())
	}
	r.m.Settled(short.Lease) // its settlement is queued: no record needed
	if left := r.m.send(r.ctx, false); left != 0 || open() != 2 {
		t.Fatalf("after the second round: %d queued, %d holds; want the running request recorded, the settled one not", left, open())
	}
	r.settle(short, long)
	if u := r.report(acct); u.Totals.Requests != 2 || open() != 1 {
		t.Fatalf("report %+v, %d holds; want both settled once, the script's hold left", u, open())
	}
}
