package extproc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
)

// settler applies settlements off the request path. A reply's last chunk is
// released to the client first; its settlement is queued here and one
// goroutine drains the queue, sending whatever has accumulated as one
// pipelined batch. The pending count per account lets a usage read on this
// sidecar wait for the replies it has already released.
//
// The queue is a slice under a mutex rather than a channel: only the
// settlement that finds it empty wakes the goroutine, which then lingers
// and takes the whole batch. A channel would wake it once per request,
// and at a thousand requests a second those wake-ups cost more CPU than
// the settlements themselves.
type settler struct {
	store   Settler
	timeout time.Duration
	// lines logs the request lines, one per settlement, from the batch's
	// callbacks (Options.RequestLogger); flushLog, when set, writes out a
	// batch's lines after them (Options.FlushRequestLog).
	lines    *slog.Logger
	flushLog func()
	// outbox, when set, keeps each queued settlement from enqueue until
	// the store or the spool has it: a SIGKILL leaves it for the next run.
	// It is the outbox the leases keep their records in (Options.Outbox).
	outbox SettlementKeeper

	// linger is how long a batch gathers (the constant linger; a test
	// lengthens it). A wait for the pending settlements cuts it short.
	linger time.Duration

	mu      sync.Mutex
	queue   []settleJob
	room    *sync.Cond               // signalled when the queue is taken
	pending map[string]*pendingCount // by account id; allKey counts every one
	wake    chan struct{}            // the queue is no longer empty
	full    chan struct{}            // the queue holds a whole batch, or a reader waits: send it now
}

// allKey is the pending count of all accounts; no account id is empty.
const allKey = ""

// maxBatch bounds one pipelined batch: enough to amortise the round trip,
// small enough that a batch never stalls the queue behind it for long.
const maxBatch = 128

// maxQueue bounds the settlements waiting: beyond it the store is far
// behind, and the request paths wait with it rather than pile up without
// bound.
const maxQueue = 8192

type settleJob struct {
	st   account.Settlement
	kept int32 // its outbox slot (its own, or its record's); 0 for none
	// after is told the outcome; it is given the queued settlement rather
	// than capturing its own, which would then be allocated per request.
	after func(st *account.Settlement, r ledger.SettleResult, took time.Duration)
}

type pendingCount struct {
	n    int
	done chan struct{} // closed when n drops to zero
}

func newSettler(a Settler, timeout time.Duration, lines *slog.Logger, flushLog func()) *settler {
	s := &settler{
		store: a, timeout: timeout, lines: lines, flushLog: flushLog, linger: linger, pending: map[string]*pendingCount{}, queue: make([]settleJob, 0, maxBatch),
		wake: make(chan struct{}, 1), full: make(chan struct{}, 1),
	}
	s.room = sync.NewCond(&s.mu)
	go s.run()
	return s
}

// expect counts a settlement of the account as pending before it is
// queued: the answer that ends a reply is sent before the reply settles
// (afterSend), and a usage read in between must wait for it too. The
// settlement is then queued with expected set (enqueue takes the count
// over), or the count is dropped (forgo).
func (s *settler) expect(accountID string) {
	s.mu.Lock()
	s.count(accountID, 1)
	s.mu.Unlock()
}

// forgo drops a count expect made for a settlement that is not queued (a
// background response parked instead).
func (s *settler) forgo(accountID string) {
	s.mu.Lock()
	s.count(accountID, -1)
	s.mu.Unlock()
}

// count adds d to the pending counts of the account and of all accounts,
// under s.mu; a count that drops to zero ends its waits.
func (s *settler) count(accountID string, d int) {
	for _, k := range [2]string{allKey, accountID} {
		p := s.pending[k]
		if p == nil {
			if d < 0 {
				continue
			}
			p = &pendingCount{done: make(chan struct{})}
			s.pending[k] = p
		}
		p.n += d
		if p.n <= 0 {
			close(p.done)
			delete(s.pending, k)
		}
	}
}

// enqueue counts the settlement as pending (unless expect has), then
// queues it. It blocks only when the queue is full. record is the outbox
// entry of the request's hold record (0: none), which the settlement's own
// entry replaces.
func (s *settler) enqueue(st account.Settlement, record int32, expected bool, after func(st *account.Settlement, r ledger.SettleResult, took time.Duration)) {
	kept := record
	if s.outbox != nil {
		// Kept before it is queued: a settlement the queue has is in the
		// outbox, while the outbox has room. It stands for the record
		// (sent alone, it settles the request from its lease), so one
		// entry per request is kept; with no room the record's stays
		// until the batch is applied.
		if k, ok := s.outbox.KeepSettlement(st); ok {
			if record != 0 {
				s.outbox.Drop(record)
			}
			kept = k
		}
	}
	s.mu.Lock()
	if !expected {
		s.count(st.AccountID, 1)
	}
	for len(s.queue) >= maxQueue {
		s.room.Wait()
	}
	s.queue = append(s.queue, settleJob{st: st, kept: kept, after: after})
	n := len(s.queue)
	s.mu.Unlock()
	switch n {
	case 1:
		signal(s.wake)
	case maxBatch:
		signal(s.full)
	}
}

// signal sends on a one-slot channel without waiting: a signal already
// there says the same.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// completed ends the pending count of each job's settlement, under one
// lock for the batch.
func (s *settler) completed(jobs []settleJob) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, j := range jobs {
		s.count(j.st.AccountID, -1)
	}
}

// wait returns once every settlement of the account (allKey: of every
// account) queued before the call has been applied or spooled, or when ctx
// ends.
func (s *settler) wait(ctx context.Context, accountID string) error {
	s.mu.Lock()
	p := s.pending[accountID]
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	// Someone reads what the batch will write: it goes now, not when its
	// linger ends (a batch being applied meanwhile makes the next one go
	// at once instead, which costs one batch's saving).
	signal(s.full)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pendingTotal is the number of settlements queued and not yet applied.
func (s *settler) pendingTotal() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.pending[allKey]; p != nil {
		return p.n
	}
	return 0
}

// linger is how long the settler waits for more settlements before sending
// a batch. A call's fixed cost in Redis (the account's sums, its key's
// state, its lease) is most of a settlement's there, so the batch is what
// lingering buys: at 1,000 requests a second, 20 ms gathers about twenty,
// and Redis's CPU per request was half what 5 ms gave (docs/benchmarks.md).
// A usage read on this sidecar, which waits for them, cuts it short
// (wait); it bounds how late a reply shows on other replicas.
const linger = 20 * time.Millisecond

func (s *settler) run() {
	// batch is the settler's own buffer; it and s.queue never share an
	// array: a short queue is taken by swapping the two, a long one by
	// copying its head out.
	batch := make([]settleJob, 0, maxBatch)
	sts := make([]account.Settlement, 0, maxBatch)
	timer := time.NewTimer(time.Hour) // reset to s.linger for each batch
	timer.Stop()
	for range s.wake {
		timer.Reset(s.linger)
		select {
		case <-timer.C:
		case <-s.full:
			timer.Stop()
		}
		for {
			s.mu.Lock()
			if len(s.queue) <= maxBatch {
				batch, s.queue = s.queue, batch[:0]
			} else {
				// Take one batch; the rest goes next, without lingering.
				batch = append(batch[:0], s.queue[:maxBatch]...)
				n := copy(s.queue, s.queue[maxBatch:])
				clear(s.queue[n:])
				s.queue = s.queue[:n]
			}
			more := len(s.queue) > 0
			s.room.Broadcast()
			s.mu.Unlock()
			if len(batch) > 0 {
				s.apply(batch, sts[:0])
			}
			clear(batch) // drop the settlements and callbacks it referenced
			if !more {
				break
			}
		}
	}
}

// apply settles a batch in one call, on its own deadline: the clients may
// be long gone, settlements never run on a request's context.
func (s *settler) apply(jobs []settleJob, sts []account.Settlement) {
	defer s.completed(jobs)
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	t0 := time.Now()
	for _, j := range jobs {
		sts = append(sts, j.st)
	}
	res := s.store.SettleBatch(ctx, sts)
	took := time.Since(t0)
	for i := range jobs {
		if jobs[i].kept != 0 && s.outbox != nil {
			// The store or the spool has it (or refused it for good).
			s.outbox.Drop(jobs[i].kept)
		}
		jobs[i].after(&jobs[i].st, res[i], took)
	}
	if s.flushLog != nil {
		s.flushLog()
	}
}
