// Package spool keeps settlements that could not reach the store in a local
// file until they can be applied.
//
// A settlement is the only record that an admitted request was served; if it
// is lost the account is never charged and the request's hold lingers until
// it expires. When the store is unreachable as a request ends, the Spool
// appends the settlement to an append-only file in the spool directory and
// syncs it before Settle returns. A background replayer retries spooled
// settlements with backoff until the store takes them, then rewrites the file
// without them. A sidecar that starts finds the records its predecessor left
// and replays them.
//
// Replay is safe because the store settles each request id at most once: a
// settlement applied, then replayed after a crash that came before the
// spool file was rewritten, charges once; a settlement replayed after its
// hold expired still charges, once.
package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/store"
)

// Store is what a Spool wraps; *store.Store implements it.
type Store interface {
	Settle(ctx context.Context, s account.Settlement) (applied bool, err error)
	SettleBatch(ctx context.Context, sts []account.Settlement) []ledger.SettleResult
}

// Options tune a Spool. Zero values pick the defaults.
type Options struct {
	// MaxBytes bounds the spool file; default 64 MiB, some 150,000
	// settlements.
	MaxBytes int64
	// MinBackoff and MaxBackoff bound the wait between replay passes while
	// the store stays unreachable; defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// AttemptTimeout bounds one replayed settlement; default 5s.
	AttemptTimeout time.Duration
	Registerer     prometheus.Registerer
	// OnStoreError is called when the store failed a settlement that the
	// spool then took: the settlement is safe, but the store is not, and
	// store error counts must say so.
	OnStoreError func()
	Logger       *slog.Logger
	Now          func() time.Time
}

// Spool passes admissions to the store and settles through it, spooling
// settlements the store cannot take. It implements the processor's Accounts.
type Spool struct {
	store   Store
	file    *journal // nil: no spool directory, failures are not kept
	metrics *metrics
	log     *slog.Logger
	onErr   func()

	minBackoff, maxBackoff, attemptTimeout time.Duration

	wake     chan struct{} // a record was appended
	up       chan struct{} // the store answered a live call while records wait
	cancel   context.CancelFunc
	done     chan struct{} // the replayer has returned
	replayMu sync.Mutex    // one replay pass at a time
	once     sync.Once
}

// Open opens (creating it if needed) the spool in dir and starts replaying
// whatever a previous run left there. An empty dir gives a Spool without a
// spool, which returns the store's errors as they are. The directory is
// locked: two sidecars cannot share it.
func Open(dir string, st Store, o Options) (*Spool, error) {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Spool{
		store: st, log: o.Logger, onErr: o.OnStoreError,
		minBackoff: o.MinBackoff, maxBackoff: o.MaxBackoff, attemptTimeout: o.AttemptTimeout,
		wake: make(chan struct{}, 1), up: make(chan struct{}, 1), done: make(chan struct{}),
	}
	if dir == "" {
		l.log.Warn("store.spool_dir is not set: settlements that cannot reach the store are lost")
		l.metrics = newMetrics(o.Registerer, nil)
		close(l.done)
		l.cancel = func() {}
		return l, nil
	}
	f, rep, err := openJournal(dir, o.MaxBytes, o.Now)
	if err != nil {
		return nil, err
	}
	l.file = f
	l.metrics = newMetrics(o.Registerer, f)
	if rep.corrupt > 0 {
		l.metrics.errors.WithLabelValues("corrupt").Add(float64(rep.corrupt))
		l.log.Error("spool: damaged records set aside", "dir", dir, "records", rep.corrupt, "copy", rep.kept)
	}
	if rep.torn {
		l.log.Warn("spool: dropped a record cut short by a crash; it was never acknowledged", "dir", dir)
	}
	if rep.records > 0 {
		l.log.Info("spool: replaying settlements left by a previous run", "dir", dir, "records", rep.records)
	}

	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(ctx)
	return l, nil
}

// Answered notes that the store answered a live call (an admission): if
// settlements wait in the spool, the replayer need not sit out its backoff.
func (l *Spool) Answered() {
	if l.file == nil || l.Depth() == 0 {
		return
	}
	signal(l.up)
}

// signal wakes whoever waits on c, without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// SettleBatch settles many requests through the store in one round trip
// within ctx. A settlement the store cannot take because it cannot be
// reached is spooled and reported applied: it is on disk and will be applied
// exactly once. Errors that a retry cannot mend (an unknown account, an
// invalid settlement) are returned as they are, and so is the store's error
// when the spool cannot take the settlement either.
func (l *Spool) SettleBatch(ctx context.Context, sts []account.Settlement) []ledger.SettleResult {
	res := make([]ledger.SettleResult, len(sts))
	valid := make([]account.Settlement, 0, len(sts))
	idx := make([]int, 0, len(sts))
	for i, st := range sts {
		if err := store.CheckSettlement(st); err != nil {
			res[i].Err = err
			continue
		}
		valid = append(valid, st)
		idx = append(idx, i)
	}
	answered := false
	for j, r := range l.store.SettleBatch(ctx, valid) {
		i := idx[j]
		if r.Err == nil {
			answered = true
		}
		if r.Err == nil || permanent(r.Err) || l.file == nil {
			res[i] = r
			continue
		}
		res[i] = l.spool(valid[j], r.Err)
	}
	if answered {
		l.Answered()
	}
	return res
}

// spool appends a settlement the store could not take (err) to the spool.
// A spooled settlement reports applied: it is on disk and will be applied
// exactly once.
func (l *Spool) spool(st account.Settlement, err error) ledger.SettleResult {
	depth, serr := l.file.append(st)
	if serr != nil {
		reason := "write"
		if errors.Is(serr, ErrFull) {
			reason = "full"
		}
		l.metrics.errors.WithLabelValues(reason).Inc()
		return ledger.SettleResult{Err: fmt.Errorf("%w; and spooling it failed: %w", err, serr)}
	}
	l.metrics.spooled.Inc()
	if l.onErr != nil {
		l.onErr()
	}
	l.log.Warn("settlement spooled: the store is unreachable",
		"request_id", st.RequestID, "account", st.AccountID, "depth", depth, "err", err)
	signal(l.wake)
	return ledger.SettleResult{Applied: true, Spooled: true}
}

// permanent reports whether a store error will not go away by retrying.
func permanent(err error) bool {
	return errors.Is(err, store.ErrNotFound)
}

// Depth returns the number of settlements waiting in the spool.
func (l *Spool) Depth() int {
	if l.file == nil {
		return 0
	}
	n, _ := l.file.depth()
	return n
}

// Replay makes one pass over the spooled settlements, oldest first, and
// rewrites the spool without those the store took. It stops at the first
// store error, which it returns: the store is most likely still down.
func (l *Spool) Replay(ctx context.Context) error {
	if l.file == nil {
		return nil
	}
	l.replayMu.Lock()
	defer l.replayMu.Unlock()
	batch := l.file.snapshot()
	if len(batch) == 0 {
		return nil
	}
	done := make(map[uint64]bool, len(batch))
	var err error
	for _, e := range batch {
		actx, cancel := context.WithTimeout(ctx, l.attemptTimeout)
		applied, serr := l.store.Settle(actx, e.st)
		cancel()
		switch {
		case serr == nil && applied:
			l.metrics.replayed.WithLabelValues("applied").Inc()
		case serr == nil:
			l.metrics.replayed.WithLabelValues("duplicate").Inc()
		case permanent(serr):
			l.metrics.replayed.WithLabelValues("dropped").Inc()
			l.log.Error("spool: dropping a settlement the store refuses", "request_id", e.st.RequestID,
				"account", e.st.AccountID, "cost_nano_usd", e.st.Cost, "err", serr)
		default:
			err = fmt.Errorf("spool: replay %s: %w", e.st.RequestID, serr)
		}
		if err != nil {
			break
		}
		done[e.seq] = true
	}
	if len(done) > 0 {
		if cerr := l.file.remove(done); cerr != nil {
			// The file still holds some applied records; replaying them
			// again is harmless.
			l.metrics.errors.WithLabelValues("compact").Inc()
			err = errors.Join(err, cerr)
		}
	}
	if err != nil {
		l.metrics.errors.WithLabelValues("replay").Inc()
	} else {
		l.log.Info("spool: replayed settlements", "records", len(done))
	}
	return err
}

// run replays the spool whenever it holds records, waiting between failed
// passes with exponential backoff, cut short when a live call shows that
// the store is back.
func (l *Spool) run(ctx context.Context) {
	defer close(l.done)
	wait := time.Duration(0) // records from a previous run: try at once
	for {
		if l.Depth() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-l.wake:
			}
			// The store just failed a settlement: give it a moment.
			wait = l.minBackoff
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-l.up:
				t.Stop()
			}
		}
		if err := l.Replay(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = min(max(2*wait, l.minBackoff), l.maxBackoff)
			l.log.Warn("spool: replay failed; retrying", "depth", l.Depth(), "retry_in", wait.String(), "err", err)
			continue
		}
		wait = 0
	}
}

// Close stops the replayer, makes a last replay pass within ctx and closes
// the spool file. Settlements still spooled stay in the file for the next
// run.
func (l *Spool) Close(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.cancel()
		<-l.done
		if l.file == nil {
			return
		}
		if l.Depth() > 0 {
			if rerr := l.Replay(ctx); rerr != nil {
				l.log.Warn("spool: settlements left for the next start", "depth", l.Depth(), "err", rerr)
			}
		}
		err = l.file.close()
	})
	return err
}
