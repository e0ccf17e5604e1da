package extproc

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/modelgateway/gateway/internal/account"
)

// The interval between admission attempts of a request waiting for a
// concurrency slot: random in [minPoll, maxPoll), so that waiters refused
// together do not retry together.
const (
	minPoll = 25 * time.Millisecond
	maxPoll = 100 * time.Millisecond
)

// waitOutcome is how a wait for a concurrency slot ended (the outcome label
// of gateway_concurrency_waits_total).
type waitOutcome string

const (
	waitAdmitted  waitOutcome = "admitted"  // a slot freed and the request was admitted
	waitTimeout   waitOutcome = "timeout"   // the wait's bound passed first: 429
	waitCancelled waitOutcome = "cancelled" // the client went away
	waitRefused   waitOutcome = "refused"   // another limit, or the store, refused it
	waitFull      waitOutcome = "full"      // too many waiters on this sidecar: 429 at once
)

var waitOutcomes = []waitOutcome{waitAdmitted, waitTimeout, waitCancelled, waitRefused, waitFull}

// slotWaiter lets requests refused only by a concurrency limit wait for a
// slot. Waiting takes nothing in the store: each attempt is a whole
// admission (admit.lua), which takes the slot, the hold and the request's
// place in the rate window only when it admits, and a concurrency refusal
// counts nothing. Attempts poll: the slot may be freed by any sidecar.
// A waiting request blocks only its own stream's goroutine (gRPC starts a
// new one for a stream when its stream workers are all busy), and the
// number of waiters is bounded.
type slotWaiter struct {
	bound time.Duration // the longest any request waits; 0: none waits
	slots chan struct{} // one per waiting request
	now   func() time.Time
	// after is time.After; tests replace it (with the clock).
	after func(time.Duration) <-chan time.Time
	poll  func() time.Duration
}

func newSlotWaiter(bound time.Duration, waiters int) *slotWaiter {
	return &slotWaiter{
		bound: bound,
		slots: make(chan struct{}, waiters),
		now:   time.Now,
		after: time.After,
		poll:  func() time.Duration { return minPoll + rand.N(maxPoll-minPoll) },
	}
}

// limit is how long a request whose key allows wait may wait here.
func (w *slotWaiter) limit(wait time.Duration) time.Duration {
	return min(wait, w.bound)
}

// wait retries admit until it admits, refuses for anything but
// concurrency, fails, ctx ends or wait has passed; it returns the last
// decision (the concurrency refusal when the wait ended without a slot).
// The admission that is its reply is never cut by ctx: a request admitted
// as its client leaves is settled like any other whose client left.
func (w *slotWaiter) wait(ctx context.Context, wait time.Duration, refused account.Decision,
	admit func(context.Context) (account.Decision, error)) (account.Decision, waitOutcome, error) {
	select {
	case w.slots <- struct{}{}:
	default:
		return refused, waitFull, nil
	}
	defer func() { <-w.slots }()
	deadline := w.now().Add(wait)
	actx := context.WithoutCancel(ctx)
	for {
		left := deadline.Sub(w.now())
		select {
		case <-ctx.Done():
			return refused, waitCancelled, nil
		case <-w.after(max(min(w.poll(), left), 0)):
		}
		if ctx.Err() != nil {
			return refused, waitCancelled, nil
		}
		d, err := admit(actx)
		switch {
		case err != nil:
			return d, waitRefused, err
		case d.Outcome == account.Admitted:
			return d, waitAdmitted, nil
		case d.Outcome != account.ConcurrencyLimited:
			return d, waitRefused, nil
		case !w.now().Before(deadline):
			return d, waitTimeout, nil
		}
		refused = d
	}
}
