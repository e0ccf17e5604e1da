// Package leases admits requests against escrow leases in memory: a
// sidecar takes a slice of an account's spendable money (store.Leases,
// lua/lease.lua) and admits each request whose worst-case hold fits in what
// the slice has left without a round trip to Redis; its hold is recorded as
// an ordinary hold a few milliseconds later, in a batch
// (store.RecordLeased). Where the account or key has a request-rate limit
// the lease also holds request slots (placeholders in the rate logs the
// script counts), and a request needs one. Where the account or key has a
// concurrency limit the lease also holds seats (counted by the script as
// requests in flight), and a request needs a free one; a seat is not given
// back locally when its request ends: the renewal grants seats again.
// Where either has a tokens-per-minute limit the lease also holds tokens,
// counted by the script as held in a bucket a little in the future, and a
// request needs its token bound of them, until that bucket ends.
// Where the key's project has limits the lease counts against them as
// against the key's (money, slots, seats, tokens).
// Everything else (no lease, a hold that does not fit, no slot, seat or
// tokens left, a renewal in flight, the store failing) is admitted by the
// store's admission script, as without leases. While a lease's renewal is
// in flight, requests are admitted from an eighth of its free amount and
// seats set aside before the call (the call does not report them, so it
// cannot give them back), where the lease has no slots or tokens.
//
// Until its hold is recorded or its settlement applied, a leased request is
// known only to the sidecar; with an Outbox its record is kept there too,
// so that a sidecar killed without warning leaves its records for the next
// one to send.
//
// One Manager per sidecar. It renews its leases every Interval in one
// pipeline, sizing each from what the sidecar admitted for its account and
// key in the last interval (twice its holds, requests and token bounds:
// docs/billing.md, Leases), and tops a lease up at once, in the
// background, when its free amount, slots, seats or tokens fall below half
// their target. A lease idle for two intervals, or whose key's limits changed, is
// returned; all are returned by Close.
package leases

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/store"
)

// Store is the part of the store leases use.
type Store interface {
	HoldLease() time.Duration
	Leases(ctx context.Context, calls []account.LeaseCall) []account.LeaseResult
	RecordLeased(ctx context.Context, rs []account.LeasedRequest) error
}

// Admitter admits through the store's script: the fallback.
type Admitter interface {
	Admit(ctx context.Context, a *account.Admission) (account.Decision, error)
}

// Options tune a Manager; zero values take the defaults.
type Options struct {
	// Interval is how often leases are renewed (limits.lease_interval).
	Interval time.Duration
	// Share: a lease is at most the room left ÷ Share (limits.lease_share).
	Share int64
	// MinHolds: no lease smaller than this many of the largest recent hold
	// (limits.lease_min_holds).
	MinHolds int64
	// MinSlots: no rate-limited lease with fewer free request slots.
	MinSlots int64
	// MinSeats: no concurrency-limited lease with fewer free seats.
	MinSeats int64
	// MinTokenBounds: no tpm-limited lease with fewer free tokens than
	// this many of the largest recent token bound.
	MinTokenBounds int64
	// Outbox keeps each leased request's record outside the process
	// until Redis knows the request (internal/outbox); nil keeps none.
	Outbox Outbox
	Now    func() time.Time
	Logger *slog.Logger
}

// Outbox keeps records outside the process: KeepRecord returns the
// entry's slot (never 0), ok false when it has no room.
type Outbox interface {
	KeepRecord(r account.LeasedRequest) (slot int32, ok bool)
	Drop(slot int32)
}

// queued is a record waiting to be sent, and its outbox slot (0: none).
type queued struct {
	rec  account.LeasedRequest
	kept int32
}

// Defaults of Options. Those the configuration sets are its defaults.
const (
	DefaultInterval = time.Second
	DefaultShare    = config.DefaultLeaseShare
	DefaultMinHolds = config.DefaultLeaseMinHolds
	DefaultMinSlots = 2
	DefaultMinSeats = 2
	// DefaultMinTokenBounds is Options.MinTokenBounds's default.
	DefaultMinTokenBounds = 2
)

// slotLife is how long after a renewal its free slots may be used. Their
// placeholders are scored at the renewal and the shortest rate window is a
// minute: a request admitted from one within 30 s, recorded within about
// 20 ms, is in every window the placeholder counted in (docs/billing.md,
// Leases).
const slotLife = 30 * time.Second

// linger is the record loop's round: a record queued in one round is sent
// at the end of the next, between one and two lingers (10–20 ms) after its
// admission, with all the others due then. A request that settles before
// needs none (Settled): its settlement settles it from the lease, so a
// request shorter than a linger never costs a record.
const linger = 10 * time.Millisecond

type leaseKey struct{ account, key string }

// lease is one (account, key)'s lease on this sidecar; its fields are
// guarded by mu.
type lease struct {
	mu      sync.Mutex
	acct    string
	key     string
	id      string // "" when none is held
	keyOpen bool   // its holds count in the key's held and open (a budget, concurrency or tpm limit: admit.lua's kcount)
	free    int64
	target  int64
	stop    time.Time      // no admission from it after this
	limits  account.Limits // the key's limits it was taken under
	seen    account.Limits // the key's limits the last request came with
	// The key's project and its limits the lease was taken under, and
	// those the last request came with: a key moved to another project,
	// or a project whose limits changed, has its lease returned.
	project, seenProject  string
	projectLimits, seenPL account.Limits
	projectOpen           bool  // its holds count in the project's held and open (admit.lua's pcount)
	seq                   int64 // the last request's number in the lease id (from 1)
	admits                int64 // holds admitted this interval (from the lease or not)
	rate                  int64 // holds admitted in the last full interval
	reqs                  int64 // requests this interval (from the lease or not)
	reqRate               int64 // requests in the last full interval
	// Request slots: [next, hi) are free, or hi is -1 (no rate limit).
	// None is used while a renewal is in flight (renewing): the renewal
	// may remove the free ones' placeholders. The same holds for tokens.
	next, hi   int64
	slotTarget int64
	rates      int // the rate logs the slots are in (account.LevelAccount, LevelKey)
	slotStop   time.Time
	// renewing: a renewal is in flight. It sizes the lease from the free
	// amount and seats the call reported, and may give them back: while
	// it is in flight, requests take only from what was set aside before
	// the call and not reported (aside, asideSeats), which the renewal
	// adds back to the free amount and seats when it returns.
	renewing          bool
	aside, asideSeats int64
	// Seats: how many requests may still start from the lease; seated is
	// 0 when no concurrency limit applies (no seat needed).
	seats, seatTarget int64
	seated            int
	// Tokens per minute: how many tokens requests may still take from the
	// lease (each its bound), held in bucket tokenBucket of the token
	// windows tokenLevels says (0: no tpm limit, none needed), usable
	// until that bucket ends.
	tokens, tokenTarget int64
	tokenLevels         int
	tokenBucket         int64
	bounds, boundRate   int64 // token bounds admitted this and the last full interval
	maxBound            int64
	maxHold             int64
	idle                int       // full intervals without a request
	due                 bool      // a renewal was asked for
	retryAt             time.Time // no new lease before this (refused recently)
}

// Manager admits from leases and keeps them.
type Manager struct {
	st     Store
	next   Admitter
	o      Options
	prefix string
	log    *slog.Logger

	mu     sync.Mutex
	leases map[leaseKey]*lease

	healthy atomic.Bool // the last call to the store succeeded

	// gen numbers the leases this manager takes. A lease id names its
	// bitmap of recorded requests in Redis, kept for a week after the
	// lease is gone, so an id is never used twice: not per lease struct,
	// which is forgotten when idle and made again.
	gen atomic.Int64

	// The records of leased admissions not sent yet: queue those of
	// this round, old those of the round before, sent at the next tick
	// (recordLoop).
	qmu        sync.Mutex
	queue, old []queued
	wake       chan struct{}
	poke       chan struct{}

	// Local and Fallback count admissions from a lease and by the store.
	Local, Fallback atomic.Int64
}

// New returns a manager admitting from leases over st, and through next
// otherwise.
func New(st Store, next Admitter, o Options) *Manager {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Share < 1 {
		o.Share = DefaultShare
	}
	if o.MinHolds < 1 {
		o.MinHolds = DefaultMinHolds
	}
	if o.MinSlots < 1 {
		o.MinSlots = DefaultMinSlots
	}
	if o.MinSeats < 1 {
		o.MinSeats = DefaultMinSeats
	}
	if o.MinTokenBounds < 1 {
		o.MinTokenBounds = DefaultMinTokenBounds
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	var b [6]byte
	rand.Read(b[:])
	m := &Manager{st: st, next: next, o: o, prefix: hex.EncodeToString(b[:]), log: o.Logger,
		leases: map[leaseKey]*lease{}, wake: make(chan struct{}, 1), poke: make(chan struct{}, 1)}
	m.healthy.Store(true)
	return m
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// seatFree reports whether a request may be admitted from l's seats:
// always without a concurrency limit. l.mu is held.
func (l *lease) seatFree() bool {
	return l.seated == 0 || l.seats > 0
}

// tokensFree reports whether a request of token bound n may be admitted
// from l's tokens: always without a tokens-per-minute limit. Until the end
// of their bucket only, so that the request is counted in a bucket no
// earlier than its admission's. l.mu is held.
func (l *lease) tokensFree(now time.Time, n int64) bool {
	return l.tokenLevels == 0 || n <= l.tokens && store.TokenBucket(now) <= l.tokenBucket
}

// drop forgets l's lease: nothing is admitted from it until a new one,
// under a new id, is taken. l.mu is held.
func (l *lease) drop() {
	l.id, l.free, l.target, l.stop = "", 0, 0, time.Time{}
	l.seats, l.seated = 0, 0
	l.tokens, l.tokenLevels = 0, 0
	l.aside, l.asideSeats = 0, 0
}

// slotFree reports whether a request may be admitted from l's slots:
// always without a rate limit. l.mu is held.
func (l *lease) slotFree(now time.Time) bool {
	return l.hi < 0 || l.next < l.hi && now.Before(l.slotStop)
}

// asideShare: a renewal sets aside free ÷ asideShare (and as many of the
// free seats) for the requests admitted while it is in flight. At the
// top-up point (half the target, about an interval's holds) an eighth is
// about 125 ms of requests; a lease exceeds its share of the room by at
// most an eighth of what it had free before its renewal.
const asideShare = 8

// setsAside reports whether l's renewal sets aside for requests in
// flight: only money and seats are set aside. A rate-limited lease's free
// slots are placeholders scored at the renewal, and a tpm-limited lease's
// free tokens are held in a bucket the renewal moves: neither can be
// kept out of the call. l.mu is held.
func (l *lease) setsAside() bool {
	return l.hi < 0 && l.tokenLevels == 0
}

// fits reports whether a fits in l: in its free amount, slots, seats and
// tokens, or, while its renewal is in flight, in what was set aside for
// it. l.mu is held.
func (l *lease) fits(now time.Time, a *account.Admission) bool {
	if l.renewing {
		return l.setsAside() && a.Hold <= l.aside && (l.seated == 0 || l.asideSeats > 0)
	}
	return a.Hold <= l.free && l.slotFree(now) && l.seatFree() && l.tokensFree(now, a.Tokens)
}

// Admit admits a from its account and key's lease when its hold fits in
// it, in memory; otherwise through the store's script.
func (m *Manager) Admit(ctx context.Context, a *account.Admission) (account.Decision, error) {
	if a.KeyID != "" {
		// Taken in a call of its own: its frame (the request's record) is
		// gone before the fallback's round trip to Redis, the deepest
		// point of a stream's stack (extproc's TestStreamStackStaysSmall).
		if d, ok := m.fromLease(a); ok {
			m.Local.Add(1)
			return d, nil
		}
	}
	m.Fallback.Add(1)
	return m.next.Admit(ctx, a)
}

// fromLease admits a from its account and key's lease, in memory, when the
// lease has room for it (ok); otherwise it asks for a renewal when one is
// worth having.
func (m *Manager) fromLease(a *account.Admission) (d account.Decision, ok bool) {
	k := leaseKey{a.AccountID, a.KeyID}
	m.mu.Lock()
	l := m.leases[k]
	if l == nil {
		l = &lease{acct: a.AccountID, key: a.KeyID}
		m.leases[k] = l
	}
	m.mu.Unlock()
	now := m.o.Now()
	l.mu.Lock()
	l.admits += a.Hold
	l.reqs++
	l.maxHold = max(l.maxHold, a.Hold)
	l.bounds += a.Tokens
	l.maxBound = max(l.maxBound, a.Tokens)
	l.seen = a.KeyLimits
	project, pl := store.LeaseProject(a.ProjectID, a.ProjectLimits)
	l.seenProject, l.seenPL = project, pl
	if l.id != "" && m.healthy.Load() && now.Before(l.stop) && l.limits == a.KeyLimits &&
		l.project == project && l.projectLimits == pl && l.fits(now, a) {
		if l.renewing {
			l.aside -= a.Hold
		} else {
			l.free -= a.Hold
		}
		l.seq++
		ref := account.LeaseRef{ID: l.id, Seq: l.seq, Hold: a.Hold}
		rec := account.LeasedRequest{Lease: ref, KeyCounted: l.keyOpen, ProjectCounted: l.projectOpen, At: now, Admission: *a}
		if l.hi >= 0 {
			rec.Slot, rec.Rates = l.next, l.rates
			l.next++
		}
		if l.seated != 0 {
			// Its record (or settlement) takes the seat out of the lease in
			// Redis; here it is gone until a renewal grants seats again.
			if l.renewing {
				l.asideSeats--
			} else {
				l.seats--
			}
		}
		if l.tokenLevels != 0 && a.Tokens > 0 {
			// Its bound stays held in the lease's bucket, as its own.
			l.tokens -= a.Tokens
			ref.Tokens, ref.Bucket, ref.TokenLevels = a.Tokens, l.tokenBucket, l.tokenLevels
			rec.Lease = ref
		}
		// A renewal in flight tops the lease up already.
		low := !l.due && !l.renewing && (l.free < l.target/2 || l.hi >= 0 && l.hi-l.next < l.slotTarget/2 ||
			l.seated != 0 && l.seats < l.seatTarget/2 || l.tokenLevels != 0 && l.tokens < l.tokenTarget/2)
		if low {
			l.due = true
		}
		l.mu.Unlock()
		if low {
			signal(m.poke)
		}
		if kept, ok := m.keep(rec); ok {
			m.enqueue(rec, kept)
		} else {
			m.recordNow(rec)
		}
		return account.Decision{Outcome: account.Admitted, Lease: ref}, true
	}
	ask := !l.due && (l.id != "" || !now.Before(l.retryAt))
	if ask {
		l.due = true
	}
	l.mu.Unlock()
	if ask {
		signal(m.poke)
	}
	return account.Decision{}, false
}

// keep writes rec to the outbox, before its request is forwarded; ok is
// false when the outbox has no room (or rec does not fit a slot). Without
// an outbox there is nothing to keep.
func (m *Manager) keep(rec account.LeasedRequest) (kept int32, ok bool) {
	if m.o.Outbox == nil {
		return 0, true
	}
	return m.o.Outbox.KeepRecord(rec)
}

// recordNow sends the record of a leased request the outbox had no room
// for before the request is forwarded, as the admission script would hold
// it; if the store fails, it is queued as any other.
func (m *Manager) recordNow(rec account.LeasedRequest) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	err := m.st.RecordLeased(ctx, []account.LeasedRequest{rec})
	cancel()
	if err != nil {
		m.enqueue(rec, 0)
	}
}

// enqueue queues rec (kept in the outbox's slot kept) for the next rounds.
func (m *Manager) enqueue(rec account.LeasedRequest, kept int32) {
	m.qmu.Lock()
	m.queue = append(m.queue, queued{rec, kept})
	first := len(m.queue) == 1
	m.qmu.Unlock()
	if first {
		signal(m.wake)
	}
}

// Settled drops the hold record of a leased request whose settlement is
// queued, if it was not sent yet: the settlement settles it from the lease.
// A request that used a slot keeps its record: it replaces the slot's
// placeholder by the request (settlement does not touch the rate logs).
// The dropped record's outbox slot is returned (0: none): the caller drops
// it from the outbox once the settlement's own entry is kept there, or
// the settlement is applied or spooled.
func (m *Manager) Settled(ref account.LeaseRef) (kept int32) {
	m.qmu.Lock()
	defer m.qmu.Unlock()
	for _, q := range []*[]queued{&m.queue, &m.old} {
		for i, r := range *q {
			if r.rec.Lease == ref && r.rec.Slot == 0 {
				kept = r.kept
				*q = append((*q)[:i], (*q)[i+1:]...)
				return kept
			}
		}
	}
	return 0
}

// release drops a record's outbox entry once Redis holds the request.
func (m *Manager) release(kept int32) {
	if kept != 0 && m.o.Outbox != nil {
		m.o.Outbox.Drop(kept)
	}
}

// Run renews leases and records leased holds until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	go m.recordLoop(ctx)
	t := time.NewTicker(m.o.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Renew(ctx, true)
		case <-m.poke:
			m.Renew(ctx, false)
		}
	}
}

// Renew renews leases in one pipeline: every lease when full (the
// interval's pass, which also rolls the rates), else those asked for.
func (m *Manager) Renew(ctx context.Context, full bool) {
	m.mu.Lock()
	all := make([]*lease, 0, len(m.leases))
	for _, l := range m.leases {
		all = append(all, l)
	}
	m.mu.Unlock()
	var calls []account.LeaseCall
	var ls []*lease
	for _, l := range all {
		l.mu.Lock()
		c, ok, forget := m.renewal(l, full)
		l.mu.Unlock()
		if forget {
			// Not under l.mu: Close takes m.mu, then l.mu.
			m.mu.Lock()
			delete(m.leases, leaseKey{l.acct, l.key})
			m.mu.Unlock()
		}
		if ok {
			calls = append(calls, c)
			ls = append(ls, l)
		}
	}
	if len(calls) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, max(m.o.Interval, time.Second))
	defer cancel()
	started := m.o.Now()
	res := m.st.Leases(rctx, calls)
	var failed error
	var back []account.LeaseCall
	for i, r := range res {
		if r.Err != nil && failed == nil {
			failed = r.Err
		}
		if c, ok := m.renewed(ls[i], &calls[i], r, started); ok {
			back = append(back, c)
		}
	}
	m.healthy.Store(failed == nil)
	if failed != nil && ctx.Err() == nil {
		m.log.Warn("renewing leases failed; admitting through the store", "err", failed)
	}
	if len(back) > 0 {
		// What was set aside in leases their renewal returned: given
		// back now, not held until the sweeper finds them expired.
		for _, r := range m.st.Leases(rctx, back) {
			if r.Err != nil && ctx.Err() == nil {
				m.log.Warn("returning a lease failed; the sweeper returns it after its lease", "err", r.Err)
			}
		}
	}
}

// renewal is l's call in this pass, if it needs one (ok): every lease held
// on the interval's full pass (which also rolls its rates), else those
// asked for; forget: l is unused for long and may be dropped. l.mu is held.
func (m *Manager) renewal(l *lease, full bool) (c account.LeaseCall, ok, forget bool) {
	// A request since the last full pass ends the idleness on any pass:
	// a lease returned for it is taken again on the request's ask, not a
	// full pass later (until then every request of the key would go to
	// the store).
	if l.admits > 0 {
		l.idle = 0
	} else if full {
		l.idle++
	}
	if full {
		l.rate, l.admits = l.admits, 0
		l.reqRate, l.reqs = l.reqs, 0
		l.boundRate, l.bounds = l.bounds, 0
	}
	if !full && !l.due || l.id == "" && !l.due {
		return c, false, l.id == "" && l.idle > 2
	}
	l.due = false
	want := max(2*max(l.rate, l.admits), m.o.MinHolds*l.maxHold)
	if l.idle >= 2 || (l.id != "" && (l.limits != l.seen || l.project != l.seenProject || l.projectLimits != l.seenPL)) {
		want = 0
	}
	// An id is made just before its first call: one already held was
	// called under, and if Redis no longer has its lease it was swept.
	taken := l.id != ""
	if l.id == "" {
		if want == 0 {
			return c, false, false
		}
		l.id = m.prefix + "." + l.key + "." + strconv.FormatInt(m.gen.Add(1), 10)
		// A new id, a new bitmap: its requests are numbered from 1 (the
		// bitmap's size follows the highest number).
		l.seq = 0
		l.limits = l.seen
		l.keyOpen = l.limits.CountsInFlight()
		l.project, l.projectLimits = l.seenProject, l.seenPL
		l.projectOpen = l.projectLimits.CountsInFlight()
		l.next, l.hi = 1, 0
	}
	l.renewing = true
	if taken && want > 0 && l.setsAside() {
		// Not reported: the call cannot give it back.
		l.aside = l.free / asideShare
		l.free -= l.aside
		if l.seated != 0 {
			l.asideSeats = l.seats / asideShare
			l.seats -= l.asideSeats
		}
	}
	return account.LeaseCall{AccountID: l.acct, KeyID: l.key, LeaseID: l.id,
		Free: l.free, Want: want, Min: m.o.MinHolds * l.maxHold, Share: m.o.Share, KeyLimits: l.limits,
		ProjectID: l.project, ProjectLimits: l.projectLimits,
		Cursor: l.next, WantSlots: max(2*max(l.reqRate, l.reqs), m.o.MinSlots), MinSlots: m.o.MinSlots,
		FreeSeats: l.seats, WantSeats: max(2*max(l.reqRate, l.reqs), m.o.MinSeats), MinSeats: m.o.MinSeats,
		FreeTokens: l.tokens, WantTokens: max(2*max(l.boundRate, l.bounds), m.o.MinTokenBounds*l.maxBound),
		MinTokens: m.o.MinTokenBounds * l.maxBound, Taken: taken}, true, false
}

// renewed applies the store's answer r to call c, made at started, to l.
// When the answer returns the lease, back is the call that returns what
// was set aside in it and not used (ok).
func (m *Manager) renewed(l *lease, c *account.LeaseCall, r account.LeaseResult, started time.Time) (back account.LeaseCall, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewing = false
	aside, asideSeats := l.aside, l.asideSeats
	l.aside, l.asideSeats = 0, 0
	if r.Err != nil {
		// The lease stays as it was; its local expiry bounds it. Its
		// free slots may be gone: none until a renewal says.
		if l.hi >= 0 {
			l.hi = l.next
		}
		// Its free seats and tokens too may have been given back: none
		// until a renewal says. Had the call run, they stay counted in
		// Redis (refusing early, never admitting more) until the lease is
		// returned or swept.
		// What was set aside was not reported: still the lease's.
		l.free += aside
		l.seats = asideSeats
		l.tokens = 0
		return back, false
	}
	lease := m.st.HoldLease()
	l.free += r.Delta
	l.seats += r.Seats
	l.seated = r.Seated
	l.seatTarget = c.FreeSeats + r.Seats
	l.tokens += r.Tokens
	l.tokenLevels = r.TokenLevels
	l.tokenTarget = c.FreeTokens + r.Tokens
	l.tokenBucket = r.TokenBucket
	l.hi, l.rates = r.Hi, r.Rates
	if r.Hi >= 0 {
		l.slotTarget = r.Hi - l.next
		l.slotStop = started.Add(min(lease-holds.LeaseMargin(lease), slotLife))
	}
	target := c.Free + r.Delta
	if target <= 0 || l.free <= 0 && r.Reason != account.LeaseHeld {
		// Returned (or never taken): admitted by the script until a
		// new lease, under a new id, is taken.
		if aside > 0 || asideSeats > 0 {
			back, ok = m.returnCall(l, aside, asideSeats, 0), true
		}
		l.drop()
		if r.Reason != account.LeaseHeld || c.Want > 0 {
			l.retryAt = started.Add(m.o.Interval)
		}
		return back, ok
	}
	l.free += aside
	l.seats += asideSeats
	l.target = target
	l.stop = started.Add(lease - holds.LeaseMargin(lease))
	return back, false
}

// returnCall is the call that returns l to the store with free, seats
// and tokens unused. l.mu is held.
func (m *Manager) returnCall(l *lease, free, seats, tokens int64) account.LeaseCall {
	return account.LeaseCall{AccountID: l.acct, KeyID: l.key, LeaseID: l.id,
		Free: free, Want: 0, Min: 1, Share: m.o.Share, KeyLimits: l.limits,
		ProjectID: l.project, ProjectLimits: l.projectLimits, Cursor: l.next, FreeSeats: seats, FreeTokens: tokens, Taken: true}
}

// recordLoop sends the records of leased admissions in batches, a round
// every linger while any wait: each round sends the round before's.
func (m *Manager) recordLoop(ctx context.Context) {
	timer := time.NewTimer(linger)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		}
		for {
			timer.Reset(linger)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
			if m.send(ctx, false) == 0 {
				break
			}
		}
	}
}

// flush sends every queued record; it returns how many are queued after.
func (m *Manager) flush(ctx context.Context) int {
	return m.send(ctx, true)
}

// send sends the previous round's records, or every queued one (all),
// and returns how many are queued after. This round's become the
// previous.
func (m *Manager) send(ctx context.Context, all bool) int {
	m.qmu.Lock()
	batch := m.old
	m.old, m.queue = m.queue, nil
	if all {
		batch, m.old = append(batch, m.old...), nil
	}
	m.qmu.Unlock()
	if len(batch) == 0 {
		m.qmu.Lock()
		defer m.qmu.Unlock()
		return len(m.old) + len(m.queue)
	}
	recs := make([]account.LeasedRequest, len(batch))
	for i, q := range batch {
		recs[i] = q.rec
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := m.st.RecordLeased(rctx, recs)
	cancel()
	if err == nil {
		// Redis holds them now: the sweeper settles them if this process
		// dies.
		for _, q := range batch {
			m.release(q.kept)
		}
	}
	m.qmu.Lock()
	defer m.qmu.Unlock()
	if err != nil {
		// Kept, in front, for the next attempt: recording is idempotent.
		m.healthy.Store(false)
		m.log.Warn("recording leased holds failed; admitting through the store", "requests", len(batch), "err", err)
		m.old = append(batch, m.old...)
		if ctx.Err() != nil {
			return 0
		}
		retry := time.NewTimer(100 * time.Millisecond)
		m.qmu.Unlock()
		select {
		case <-ctx.Done():
		case <-retry.C:
		}
		m.qmu.Lock()
	}
	return len(m.old) + len(m.queue)
}

// Close records what is queued and returns every lease.
func (m *Manager) Close(ctx context.Context) {
	for m.flush(ctx) > 0 && ctx.Err() == nil {
	}
	m.mu.Lock()
	var calls []account.LeaseCall
	for _, l := range m.leases {
		l.mu.Lock()
		if l.id != "" {
			calls = append(calls, m.returnCall(l, l.free+l.aside, l.seats+l.asideSeats, l.tokens))
			l.drop()
		}
		l.mu.Unlock()
	}
	m.mu.Unlock()
	for _, r := range m.st.Leases(ctx, calls) {
		if r.Err != nil {
			m.log.Warn("returning a lease failed; the sweeper returns it after its lease", "err", r.Err)
		}
	}
}
