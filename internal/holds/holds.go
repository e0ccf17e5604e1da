// Package holds keeps the holds of running requests alive and settles the
// holds of requests whose sidecar died.
//
// A hold is admitted with a lease (the store's HoldLease). Each sidecar runs
// one Renewer: every third of a lease it renews the holds of all its open
// requests in one pipelined round trip (one script call per account) and
// stores each request's latest checkpoint, its best-known usage and cost so
// far. A request therefore never loses its hold while it runs, however long it
// streams. If the sidecar dies, its holds stop being renewed; the Sweeper, a
// loop in every sidecar, finds them once their lease has run out and settles
// each at its last checkpoint, flagged interrupted. Settlement is idempotent by
// request id, so a sweep racing another sweep, or a late settlement of the
// request itself, charges once.
//
// A sidecar cut off from Redis cannot renew: each request knows when its
// lease ends as far as its sidecar knows (the start of the last renewal
// that succeeded, plus the lease), and stops being served a safety margin
// before (Open.Expired), so that nothing is served after a sweeper
// elsewhere may have settled it. Its own settlement, arriving later, is
// reconciled with the sweep's charge by the store. A sweeper whose store
// failed (StoreFailed) sweeps nothing until a lease after the store
// answers again: after an outage every sidecar's renewals and spooled
// settlements get a lease to land before a request is charged at its
// checkpoint.
//
// A request that has ended stays registered, with its settlement as its final
// checkpoint, until the store has taken the settlement (the processor then
// calls Forget) or, when it waits in the spool (Redis was unreachable), until
// a renewal finds the hold gone: meanwhile the hold is kept, and should the
// sweeper still come first it charges what the settlement would have.
package holds

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
)

// Store is the part of the store the renewer and the sweeper use.
type Store interface {
	HoldLease() time.Duration
	RenewHolds(ctx context.Context, rs []account.Renewal) (gone []string, err error)
	DueHoldAccounts(ctx context.Context, limit int64) ([]string, error)
	SweepHolds(ctx context.Context, accountID string) (ledger.SweepResult, error)
}

// Open is one running request registered with a Renewer.
type Open struct {
	account, request string
	want             atomic.Bool
	ckpt             atomic.Pointer[account.Checkpoint]
	sent             *account.Checkpoint // last checkpoint written; renewer goroutine only
	// status and endpoint are how the reply began (Began): what a renewal
	// writes while the request has published no checkpoint and none was
	// written, built only then, so that a reply's start allocates no
	// settlement.
	headMu   sync.Mutex
	status   int
	endpoint string
	// stop is when the request must stop being served, unix ns: its
	// lease's end as last renewed, less the safety margin.
	stop atomic.Int64
	// since is when the request was admitted, unix ns; leased that it was
	// admitted from a lease (its hold is recorded a little later).
	since  int64
	leased atomic.Bool
}

// FromLease marks the request as admitted from a lease (internal/leases):
// its hold is recorded a few milliseconds after admission, so a renewal
// that finds no hold within an interval of admission keeps renewing it.
func (o *Open) FromLease() {
	if o != nil {
		o.leased.Store(true)
	}
}

// Expired reports whether the request's lease may have ended by now (its
// sidecar could not renew it): a sweeper may settle it at any moment, so
// it must not be served any further.
func (o *Open) Expired(now time.Time) bool {
	return o != nil && now.UnixNano() >= o.stop.Load()
}

// LeaseMargin is how long before its lease ends, as its sidecar knows it,
// a request that could not be renewed stops being served: room for the
// clocks of sidecars to disagree and for the last chunk in flight.
func LeaseMargin(lease time.Duration) time.Duration {
	return min(lease/6, 5*time.Second)
}

// WantCheckpoint reports, once per renewal interval, that the renewer would
// like a fresh checkpoint. The request's own goroutine computes it (its meter
// is not safe to read from another goroutine) and calls Checkpoint.
func (o *Open) WantCheckpoint() bool {
	// Read first: this runs for every chunk, and a swap would write the
	// flag's cache line each time.
	if o == nil || !o.want.Load() {
		return false
	}
	return o.want.Swap(false)
}

// Began records how the reply began: its status and the endpoint that
// serves it, the part of the outcome known before its body.
func (o *Open) Began(status int, endpoint string) {
	if o == nil {
		return
	}
	o.headMu.Lock()
	o.status, o.endpoint = status, endpoint
	o.headMu.Unlock()
}

// head is the checkpoint of a request that has published none: how its
// reply began, nil before it did.
func (o *Open) head() *account.Checkpoint {
	o.headMu.Lock()
	defer o.headMu.Unlock()
	if o.status == 0 {
		return nil
	}
	return &account.Checkpoint{Status: o.status, Endpoint: o.endpoint}
}

// Checkpoint publishes the request's best-known outcome so far.
func (o *Open) Checkpoint(c *account.Checkpoint) {
	if o == nil {
		return
	}
	o.ckpt.Store(c)
}

// Renewer renews the holds of a sidecar's open requests.
type Renewer struct {
	st  Store
	log *slog.Logger
	// OnStoreError, when set, is told when a renewal failed (the sweeper's
	// StoreFailed).
	OnStoreError func(time.Time)
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu   sync.Mutex
	open map[string]*Open // by request id
}

// NewRenewer returns a renewer over st.
func NewRenewer(st Store, log *slog.Logger) *Renewer {
	if log == nil {
		log = slog.Default()
	}
	return &Renewer{st: st, log: log, open: map[string]*Open{}}
}

func (r *Renewer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// stopAt is when a lease renewed (or admitted) at t stops serving.
func (r *Renewer) stopAt(t time.Time) int64 {
	lease := r.st.HoldLease()
	return t.Add(lease - LeaseMargin(lease)).UnixNano()
}

// Register starts renewing an admitted request's hold, admitted by a call
// that started at since (its lease runs from then at the latest). Forget
// ends it.
func (r *Renewer) Register(accountID, requestID string, since time.Time) *Open {
	if r == nil {
		return nil
	}
	o := &Open{account: accountID, request: requestID, since: since.UnixNano()}
	o.stop.Store(r.stopAt(since))
	o.want.Store(true)
	r.mu.Lock()
	r.open[requestID] = o
	r.mu.Unlock()
	return o
}

// Finish records that the request has ended with final as its outcome. Its
// hold is renewed until Forget, or until a renewal finds it gone.
func (r *Renewer) Finish(o *Open, final *account.Checkpoint) {
	if r == nil || o == nil {
		return
	}
	o.ckpt.Store(final)
}

// Forget stops renewing a request's hold at once: its settlement was applied.
func (r *Renewer) Forget(o *Open) {
	if r == nil || o == nil {
		return
	}
	r.mu.Lock()
	delete(r.open, o.request)
	r.mu.Unlock()
}

// Len is the number of requests being renewed.
func (r *Renewer) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

// Interval is how often holds are renewed: a third of the lease, so that two
// renewals in a row may fail before a running request's hold can expire.
func (r *Renewer) Interval() time.Duration {
	return max(r.st.HoldLease()/3, 10*time.Millisecond)
}

// Run renews until ctx ends.
func (r *Renewer) Run(ctx context.Context) {
	t := time.NewTicker(r.Interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.RenewOnce(ctx)
		}
	}
}

// RenewOnce renews every open request's hold now, in one pipeline, and asks
// each request for a fresh checkpoint for the next round.
func (r *Renewer) RenewOnce(ctx context.Context) {
	r.mu.Lock()
	batch := make([]*Open, 0, len(r.open))
	for _, o := range r.open {
		batch = append(batch, o)
	}
	r.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	rs := make([]account.Renewal, len(batch))
	for i, o := range batch {
		rs[i] = account.Renewal{AccountID: o.account, RequestID: o.request}
		// Only a changed checkpoint is written.
		c := o.ckpt.Load()
		if c == nil && o.sent == nil {
			c = o.head()
		}
		if c != nil && c != o.sent {
			rs[i].Checkpoint = c
		}
	}
	// A renewal must finish well inside the lease to be of any use.
	rctx, cancel := context.WithTimeout(ctx, r.Interval())
	defer cancel()
	// The store dates the new lease from its own reading of the clock,
	// taken after this one.
	started := r.now()
	gone, err := r.st.RenewHolds(rctx, rs)
	if err != nil {
		r.log.Warn("renewing holds failed", "requests", len(batch), "err", err)
		if r.OnStoreError != nil {
			r.OnStoreError(started)
		}
		return
	}
	stop := r.stopAt(started)
	// Settled (by the request or the sweeper): nothing left to renew, and
	// its service is not extended: a request still running whose hold
	// a sweeper settled (this sidecar could not renew it in time: cut off,
	// or its process stopped) is served no further than the lease it had,
	// which has passed. A request admitted from a lease within the last
	// interval may not have its hold recorded yet (internal/leases): it is
	// kept one more round.
	recent := started.Add(-r.Interval()).UnixNano()
	ended := make(map[*Open]bool, len(gone))
	r.mu.Lock()
	for _, id := range gone {
		o := r.open[id]
		if o != nil && o.leased.Load() && o.since > recent {
			continue
		}
		delete(r.open, id)
		ended[o] = true // nil when forgotten meanwhile: in no batch
	}
	r.mu.Unlock()
	for i, o := range batch {
		if ended[o] {
			continue
		}
		if rs[i].Checkpoint != nil {
			o.sent = rs[i].Checkpoint
		}
		o.stop.Store(stop)
		o.want.Store(true)
	}
}

// Sweeper settles holds whose lease ran out.
type Sweeper struct {
	st  Store
	log *slog.Logger
	// OnSweep, when set, is told of each sweep that settled or released
	// something.
	OnSweep func(accountID string, r ledger.SweepResult)
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// quiet: no sweep before this time, unix ns (StoreFailed).
	quiet atomic.Int64
}

// StoreFailed records that a call of this sidecar to the store failed at
// t: nothing is swept until a lease after it, so that once the store is
// back the holds of requests that could not be renewed during the outage
// are renewed or settled by their own sidecars first.
func (s *Sweeper) StoreFailed(t time.Time) {
	until := t.Add(s.st.HoldLease()).UnixNano()
	for {
		q := s.quiet.Load()
		if q >= until || s.quiet.CompareAndSwap(q, until) {
			return
		}
	}
}

func (s *Sweeper) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// NewSweeper returns a sweeper over st.
func NewSweeper(st Store, log *slog.Logger) *Sweeper {
	if log == nil {
		log = slog.Default()
	}
	return &Sweeper{st: st, log: log}
}

// sweepAccounts bounds the accounts one pass looks at.
const sweepAccounts = 100

// Run sweeps every interval until ctx ends.
func (s *Sweeper) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.SweepOnce(ctx)
		}
	}
}

// SweepOnce settles the expired holds of the accounts that are due, and
// returns the number of requests it settled.
func (s *Sweeper) SweepOnce(ctx context.Context) int {
	now := s.now()
	if now.UnixNano() < s.quiet.Load() {
		return 0
	}
	ids, err := s.st.DueHoldAccounts(ctx, sweepAccounts)
	if err != nil {
		s.log.Warn("sweeping holds failed", "err", err)
		s.StoreFailed(now)
		return 0
	}
	settled := 0
	for _, id := range ids {
		r, err := s.st.SweepHolds(ctx, id)
		if err != nil {
			s.log.Warn("sweeping holds failed", "account", id, "err", err)
			continue
		}
		for i, st := range r.Interrupted {
			if !r.Applied[i] {
				continue
			}
			settled++
			s.log.Info("request",
				"request_id", st.RequestID, "account", st.AccountID, "key", st.KeyID,
				"endpoint", st.Endpoint, "model", st.Priced, "status", st.Status,
				"stream", st.Stream, "usage", st.Usage,
				"cost_nano_usd", st.Cost, "estimated", st.Estimated, "interrupted", true)
		}
		if (len(r.Interrupted) > 0 || r.Released > 0) && s.OnSweep != nil {
			s.OnSweep(id, r)
		}
	}
	return settled
}
