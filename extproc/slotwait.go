package extproc

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/account"
)

// The interval between admission attempts of a key waiting for a
// concurrency slot: random in [minPoll, maxPoll), so that keys refused
// together do not retry together.
const (
	minPoll = 25 * time.Millisecond
	maxPoll = 100 * time.Millisecond
)

// fullRateKeys is how many keys may wait on one sidecar before their
// polls slow down: with more, each key's interval is stretched so that
// the sidecar as a whole makes about fullRateKeys keys' worth of
// attempts (about 16 a second each), whatever the number of keys.
const fullRateKeys = 10

// waitOutcome is how a wait for a concurrency slot ended (the outcome label
// of gateway_concurrency_waits_total).
type waitOutcome string

const (
	waitAdmitted  waitOutcome = "admitted"  // a slot freed and the request was admitted
	waitTimeout   waitOutcome = "timeout"   // the wait's bound passed first: 429
	waitCancelled waitOutcome = "cancelled" // the client went away
	waitRefused   waitOutcome = "refused"   // another limit, or the store, refused it
	waitFull      waitOutcome = "full"      // no room for it on this sidecar (or its key's or account's share is taken): 429 at once
)

var waitOutcomes = []waitOutcome{waitAdmitted, waitTimeout, waitCancelled, waitRefused, waitFull}

// waitParty is whose request waits: its account and key.
type waitParty struct {
	account, key string
}

// slotWaiter is a sidecar's waiting room for requests refused only by a
// concurrency limit. Waiting takes nothing in the store: each attempt is
// a whole admission (admit.lua), which takes the slot, the hold and the
// request's place in the rate window only when it admits, and a
// concurrency refusal counts nothing. Attempts poll: the slot may be
// freed by any sidecar.
//
// It is fair and cheap: one key, and one account, holds at most share of
// the room's size places (beyond them its requests are refused at once,
// while other keys still wait); and the waiters of one key queue in
// order of arrival, only the first of them asking for admission, so that
// Redis sees one attempt per waiting key per poll (fewer per key once
// more than fullRateKeys keys wait), plus one each time a waiter was
// admitted (its successor asks at once: more slots may be free), however
// many requests wait. A waiting request blocks only its own stream's
// goroutine.
type slotWaiter struct {
	bound time.Duration // the longest any request waits; 0: none waits
	size  int           // the most requests waiting at once
	share int           // the most one key, and one account, may have waiting
	now   func() time.Time
	// after is time.After; tests replace it (with the clock).
	after func(time.Duration) <-chan time.Time
	poll  func() time.Duration

	mu       sync.Mutex
	n        int
	queues   map[string]*slotQueue // by key
	accounts map[string]int        // waiters by account
}

// slotQueue is the waiters of one key, first come first.
type slotQueue struct {
	waiters []*slotTurn
}

// slotTurn is one waiting request's place in its key's queue.
type slotTurn struct {
	first chan struct{} // closed when it becomes the first of its queue
	// eager is set (before first is closed) when the waiter before it
	// was admitted: it asks at once rather than after a poll.
	eager bool
}

// defaultWaiterShare is the share of the room one key or account may
// hold when none is configured: a tenth, at least one.
func defaultWaiterShare(size int) int {
	return max(size/10, 1)
}

func newSlotWaiter(bound time.Duration, waiters, share int) *slotWaiter {
	if share <= 0 {
		share = defaultWaiterShare(waiters)
	}
	return &slotWaiter{
		bound:    bound,
		size:     waiters,
		share:    min(share, waiters),
		now:      time.Now,
		after:    time.After,
		poll:     func() time.Duration { return minPoll + rand.N(maxPoll-minPoll) },
		queues:   map[string]*slotQueue{},
		accounts: map[string]int{},
	}
}

// limit is how long a request whose key allows wait may wait here.
func (w *slotWaiter) limit(wait time.Duration) time.Duration {
	return min(wait, w.bound)
}

// waiting is how many requests wait now.
func (w *slotWaiter) waiting() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// enter queues a request of p, or reports that there is no room for it.
func (w *slotWaiter) enter(p waitParty) (*slotTurn, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[p.key]
	if w.n >= w.size || w.accounts[p.account] >= w.share || (q != nil && len(q.waiters) >= w.share) {
		return nil, false
	}
	if q == nil {
		q = &slotQueue{}
		w.queues[p.key] = q
	}
	t := &slotTurn{first: make(chan struct{})}
	q.waiters = append(q.waiters, t)
	if len(q.waiters) == 1 {
		close(t.first)
	}
	w.n++
	w.accounts[p.account]++
	return t, true
}

// leave takes t out of its queue; when it was the first, the next in line
// takes over the asking (at once when t was admitted).
func (w *slotWaiter) leave(p waitParty, t *slotTurn, admitted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	q := w.queues[p.key]
	for i, u := range q.waiters {
		if u == t {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			if i == 0 && len(q.waiters) > 0 {
				q.waiters[0].eager = admitted
				close(q.waiters[0].first)
			}
			break
		}
	}
	if len(q.waiters) == 0 {
		delete(w.queues, p.key)
	}
	w.n--
	if w.accounts[p.account]--; w.accounts[p.account] == 0 {
		delete(w.accounts, p.account)
	}
}

// interval is the time until the first waiter of a key asks again: the
// poll, stretched when more than fullRateKeys keys wait so that the
// sidecar's attempts stay about fullRateKeys keys' worth.
func (w *slotWaiter) interval() time.Duration {
	w.mu.Lock()
	keys := len(w.queues)
	w.mu.Unlock()
	d := w.poll()
	if keys > fullRateKeys {
		d = d * time.Duration(keys) / fullRateKeys
	}
	return d
}

// wait waits for p's request, refused for concurrency, to be admitted:
// it queues behind p's other waiters and, once first, retries admit
// until it admits, refuses for anything but concurrency, fails, ctx ends
// or wait has passed; it returns the last decision (the concurrency
// refusal when the wait ended without a slot). The admission that is its
// reply is never cut by ctx: a request admitted as its client leaves is
// settled like any other whose client left.
func (w *slotWaiter) wait(ctx context.Context, p waitParty, wait time.Duration, refused account.Decision,
	admit func(context.Context) (account.Decision, error)) (account.Decision, waitOutcome, error) {
	t, ok := w.enter(p)
	if !ok {
		return refused, waitFull, nil
	}
	admitted := false
	defer func() { w.leave(p, t, admitted) }()
	deadline := w.now().Add(wait)
	actx := context.WithoutCancel(ctx)

	// Behind others of its key: wait to be first.
	select {
	case <-t.first:
	default:
		select {
		case <-ctx.Done():
			return refused, waitCancelled, nil
		case <-w.after(max(deadline.Sub(w.now()), 0)):
			return refused, waitTimeout, nil
		case <-t.first:
		}
	}
	w.mu.Lock()
	eager := t.eager
	w.mu.Unlock()
	for {
		if !eager {
			left := deadline.Sub(w.now())
			select {
			case <-ctx.Done():
				return refused, waitCancelled, nil
			case <-w.after(max(min(w.interval(), left), 0)):
			}
		}
		eager = false
		if ctx.Err() != nil {
			return refused, waitCancelled, nil
		}
		d, err := admit(actx)
		switch {
		case err != nil:
			return d, waitRefused, err
		case d.Outcome == account.Admitted:
			admitted = true
			return d, waitAdmitted, nil
		case d.Outcome != account.ConcurrencyLimited:
			return d, waitRefused, nil
		case !w.now().Before(deadline):
			return d, waitTimeout, nil
		}
		refused = d
	}
}
