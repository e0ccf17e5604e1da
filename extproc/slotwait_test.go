package extproc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/testclock"
)

// fakeAdmitter answers admissions from a script: refused for concurrency
// until its admitAt'th attempt (0: never), then next.
type fakeAdmitter struct {
	attempts int
	admitAt  int
	next     account.Decision
	err      error
	ctxs     []context.Context
}

func (f *fakeAdmitter) admit(ctx context.Context) (account.Decision, error) {
	f.attempts++
	f.ctxs = append(f.ctxs, ctx)
	if f.admitAt > 0 && f.attempts >= f.admitAt {
		return f.next, f.err
	}
	return account.Decision{Outcome: account.ConcurrencyLimited, RetryAfter: time.Second, Level: account.KeyLevel}, nil
}

// testWaiter is a slotWaiter on a clock that each poll moves on by the
// interval slept, so that a test runs no real time.
func testWaiter(bound time.Duration, waiters int) (*slotWaiter, *testclock.Clock, *[]time.Duration) {
	clock := testclock.New(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	w := newSlotWaiter(bound, waiters, 0)
	w.now = clock.Now
	var slept []time.Duration
	w.after = func(d time.Duration) <-chan time.Time {
		slept = append(slept, d)
		clock.Advance(d)
		c := make(chan time.Time, 1)
		c <- clock.Now()
		return c
	}
	return w, clock, &slept
}

var concurrencyRefusal = account.Decision{Outcome: account.ConcurrencyLimited, RetryAfter: time.Second, Level: account.AccountLevel}

func TestSlotWaitAdmitsWhenASlotFrees(t *testing.T) {
	w, _, slept := testWaiter(time.Minute, 4)
	f := &fakeAdmitter{admitAt: 5, next: account.Decision{Outcome: account.Admitted}}
	d, outcome, err := w.wait(context.Background(), alice, 10*time.Second, concurrencyRefusal, f.admit)
	if err != nil || outcome != waitAdmitted || d.Outcome != account.Admitted {
		t.Fatalf("got %v %v %v, want admitted", d, outcome, err)
	}
	if f.attempts != 5 || len(*slept) != 5 {
		t.Fatalf("%d attempts after %d sleeps, want 5 and 5", f.attempts, len(*slept))
	}
	for _, s := range *slept {
		if s < minPoll || s >= maxPoll {
			t.Fatalf("slept %v between attempts, want [%v, %v)", s, minPoll, maxPoll)
		}
	}
	if n := w.waiting(); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
}

func TestSlotWaitTimesOutAtItsBound(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bound, wait time.Duration
	}{
		{"the key's wait", time.Minute, 2 * time.Second},
		{"the sidecar's bound", time.Second, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, clock, slept := testWaiter(tc.bound, 4)
			start := clock.Now()
			f := &fakeAdmitter{}
			d, outcome, err := w.wait(context.Background(), alice, w.limit(tc.wait), concurrencyRefusal, f.admit)
			if err != nil || outcome != waitTimeout || d.Outcome != account.ConcurrencyLimited || d.RetryAfter != time.Second {
				t.Fatalf("got %v %v %v, want a concurrency refusal after a timeout", d, outcome, err)
			}
			want := min(tc.bound, tc.wait)
			if waited := clock.Now().Sub(start); waited != want {
				t.Fatalf("waited %v, want exactly %v (the last attempt at the bound)", waited, want)
			}
			// Attempts at most every minPoll: a wait is not a busy loop.
			if most := int(want/minPoll) + 1; f.attempts > most || f.attempts < int(want/maxPoll) {
				t.Fatalf("%d attempts in %v, want %d to %d", f.attempts, want, int(want/maxPoll), most)
			}
			if f.attempts != len(*slept) {
				t.Fatalf("%d attempts, %d sleeps", f.attempts, len(*slept))
			}
		})
	}
}

func TestSlotWaitStopsWhenTheClientLeaves(t *testing.T) {
	w, _, _ := testWaiter(time.Minute, 4)
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeAdmitter{}
	admit := func(c context.Context) (account.Decision, error) {
		if f.attempts == 2 {
			cancel() // the client leaves during the third attempt
		}
		return f.admit(c)
	}
	d, outcome, err := w.wait(ctx, alice, 30*time.Second, concurrencyRefusal, admit)
	if err != nil || outcome != waitCancelled || d.Outcome != account.ConcurrencyLimited {
		t.Fatalf("got %v %v %v, want cancelled", d, outcome, err)
	}
	if f.attempts != 3 {
		t.Fatalf("%d attempts, want 3: none after the client left", f.attempts)
	}
	// An attempt is never cut by the client's leaving: an admission whose
	// reply were lost would leave a hold nobody settles.
	for _, c := range f.ctxs {
		if c.Done() != nil {
			t.Fatal("an admission attempt ran under the client's context")
		}
	}
}

func TestSlotWaitAnswersOtherRefusalsAtOnce(t *testing.T) {
	w, _, _ := testWaiter(time.Minute, 4)
	f := &fakeAdmitter{admitAt: 2, next: account.Decision{Outcome: account.RateLimited, RetryAfter: 30 * time.Second, Level: account.KeyLevel}}
	d, outcome, err := w.wait(context.Background(), alice, 30*time.Second, concurrencyRefusal, f.admit)
	if err != nil || outcome != waitRefused || d.Outcome != account.RateLimited || f.attempts != 2 {
		t.Fatalf("got %v %v %v after %d attempts, want the rate refusal at the 2nd", d, outcome, err, f.attempts)
	}
	storeDown := errors.New("store down")
	f = &fakeAdmitter{admitAt: 1, err: storeDown}
	if _, outcome, err := w.wait(context.Background(), alice, 30*time.Second, concurrencyRefusal, f.admit); !errors.Is(err, storeDown) || outcome != waitRefused {
		t.Fatalf("got %v %v, want the store's error", outcome, err)
	}
}

func TestSlotWaitBoundsWaiters(t *testing.T) {
	w, _, _ := testWaiter(time.Minute, 1)
	ctx, leave := context.WithCancel(context.Background())
	parked := make(chan waitOutcome)
	go func() { // one request already waits, of another key and account
		_, outcome, _ := w.wait(ctx, waitParty{"acct_b", "key_b"}, 30*time.Second, concurrencyRefusal, func(context.Context) (account.Decision, error) {
			<-ctx.Done()
			return concurrencyRefusal, nil
		})
		parked <- outcome
	}()
	eventually.That(t, 5*time.Second, "one waits", func() (bool, string) { return w.waiting() == 1, fmt.Sprint(w.waiting()) })
	f := &fakeAdmitter{admitAt: 1, next: account.Decision{Outcome: account.Admitted}}
	d, outcome, err := w.wait(context.Background(), alice, 30*time.Second, concurrencyRefusal, f.admit)
	if err != nil || outcome != waitFull || d != concurrencyRefusal || f.attempts != 0 {
		t.Fatalf("got %v %v %v after %d attempts, want the refusal at once", d, outcome, err, f.attempts)
	}
	leave()
	<-parked
	if _, outcome, _ := w.wait(context.Background(), alice, 30*time.Second, concurrencyRefusal, f.admit); outcome != waitAdmitted {
		t.Fatalf("with room: %v, want admitted", outcome)
	}
}

var alice = waitParty{account: "acct_a", key: "key_a"}

// manualTimers is a slotWaiter's after whose timers fire only when the
// test moves the clock on: for tests with many waiters at once.
type manualTimers struct {
	clock  *testclock.Clock
	mu     sync.Mutex
	timers []manualTimer
}

type manualTimer struct {
	at time.Time
	c  chan time.Time
}

func (m *manualTimers) after(d time.Duration) <-chan time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := make(chan time.Time, 1)
	m.timers = append(m.timers, manualTimer{m.clock.Now().Add(d), c})
	return c
}

// pending is the number of timers not yet fired.
func (m *manualTimers) pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

// advance moves the clock on by d and fires the timers due.
func (m *manualTimers) advance(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.clock.Advance(d)
	now := m.clock.Now()
	left := m.timers[:0]
	for _, tm := range m.timers {
		if tm.at.After(now) {
			left = append(left, tm)
			continue
		}
		tm.c <- now
	}
	m.timers = left
}

// manualWaiter is a room of size places, share for each key and account,
// polling every poll, on manual timers.
func manualWaiter(size, share int, poll time.Duration) (*slotWaiter, *manualTimers) {
	w := newSlotWaiter(time.Minute, size, share)
	m := &manualTimers{clock: testclock.New(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))}
	w.now, w.after = m.clock.Now, m.after
	w.poll = func() time.Duration { return poll }
	return w, m
}

// A key holds at most its share of the room, and so does an account
// across its keys: beyond it a request is refused at once, without an
// attempt, while another key's request still gets a place.
func TestSlotWaitShares(t *testing.T) {
	w, _ := manualWaiter(10, 2, 50*time.Millisecond)
	ctx, leave := context.WithCancel(context.Background())
	var attempts atomic.Int64
	refuse := func(context.Context) (account.Decision, error) {
		attempts.Add(1)
		return concurrencyRefusal, nil
	}
	ended := make(chan waitOutcome, 10)
	park := func(p waitParty, n int) {
		t.Helper()
		go func() {
			_, outcome, _ := w.wait(ctx, p, 30*time.Second, concurrencyRefusal, refuse)
			ended <- outcome
		}()
		eventually.That(t, 5*time.Second, "the request waits", func() (bool, string) {
			return w.waiting() == n, fmt.Sprint(w.waiting(), " waiting")
		})
	}
	park(alice, 1)
	park(alice, 2)
	for _, p := range []waitParty{alice, {account: alice.account, key: "key_a2"}} {
		if _, outcome, err := w.wait(ctx, p, 30*time.Second, concurrencyRefusal, refuse); outcome != waitFull || err != nil {
			t.Fatalf("%v beyond its share: %v %v, want refused at once", p, outcome, err)
		}
	}
	park(waitParty{account: "acct_b", key: "key_b"}, 3)
	if n := attempts.Load(); n != 0 {
		t.Fatalf("%d admission attempts before any poll, want 0", n)
	}
	leave()
	for range 3 {
		if outcome := <-ended; outcome != waitCancelled {
			t.Fatalf("a waiter ended %v, want cancelled", outcome)
		}
	}
	if n := w.waiting(); n != 0 {
		t.Fatalf("%d still waiting", n)
	}
}

// The waiters of one key ask for admission one at a time, the first of
// them once per poll, so that Redis sees one attempt per poll however
// many wait; when slots free they are admitted in order of arrival, each
// successor asking at once.
func TestSlotWaitOneAttemptPerKeyPerPoll(t *testing.T) {
	const waiters, poll = 50, 50 * time.Millisecond
	w, m := manualWaiter(500, 50, poll)
	var attempts atomic.Int64
	var open atomic.Bool // slots free: every attempt admits
	var mu sync.Mutex
	var order []int
	ended := make(chan waitOutcome, waiters)
	for i := range waiters {
		admit := func(context.Context) (account.Decision, error) {
			attempts.Add(1)
			if !open.Load() {
				return concurrencyRefusal, nil
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return account.Decision{Outcome: account.Admitted}, nil
		}
		go func() {
			_, outcome, _ := w.wait(context.Background(), alice, 30*time.Second, concurrencyRefusal, admit)
			ended <- outcome
		}()
		// One at a time, so that the order of arrival is known; each
		// arrival sets its timer (the first its poll, the others their
		// deadline).
		eventually.That(t, 5*time.Second, "the request waits", func() (bool, string) {
			return w.waiting() == i+1 && m.pending() == i+1, fmt.Sprint(w.waiting(), " waiting, ", m.pending(), " timers")
		})
	}
	for i := 1; i <= 20; i++ {
		m.advance(poll)
		eventually.That(t, 5*time.Second, "one attempt per poll", func() (bool, string) {
			n := attempts.Load()
			return n == int64(i) && m.pending() == waiters, fmt.Sprint(n, " attempts after ", i, " polls, ", m.pending(), " timers")
		})
	}
	open.Store(true)
	m.advance(poll)
	for range waiters {
		if outcome := <-ended; outcome != waitAdmitted {
			t.Fatalf("a waiter ended %v, want admitted", outcome)
		}
	}
	if n := attempts.Load(); n != 20+waiters {
		t.Fatalf("%d attempts, want %d: one per poll, then one per admission", n, 20+waiters)
	}
	for i, got := range order {
		if got != i {
			t.Fatalf("admitted in the order %v, want that of arrival", order)
		}
	}
}

// With more than fullRateKeys keys waiting, each key asks less often, so
// that the sidecar's attempts stay about fullRateKeys keys' worth.
func TestSlotWaitIntervalStretchesWithKeys(t *testing.T) {
	w, _ := manualWaiter(500, 50, 50*time.Millisecond)
	for _, tc := range []struct {
		keys int
		want time.Duration
	}{{1, 50 * time.Millisecond}, {fullRateKeys, 50 * time.Millisecond}, {4 * fullRateKeys, 200 * time.Millisecond}} {
		clear(w.queues)
		for i := range tc.keys {
			w.queues[strconv.Itoa(i)] = &slotQueue{}
		}
		if got := w.interval(); got != tc.want {
			t.Fatalf("%d keys wait: each asks every %v, want %v", tc.keys, got, tc.want)
		}
	}
}

// admitRequest runs a request's headers and body through x and returns the
// answer to the body.
func (r *rig) admitRequest(ctx context.Context, x *exchange) *extprocv3.ProcessingResponse {
	if resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(reqBody)), "anthropic-version", "2023-06-01"),
	}}); resp.GetImmediateResponse() != nil {
		return resp
	}
	return x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}})
}

// An exchange refused for concurrency by a key with a wait extends Envoy's
// message timeout by the wait, waits, and is admitted once the request
// holding the slot settles, counted once in the rate window; one whose
// client leaves while waiting is refused, having taken nothing.
func TestExchangeWaitsForASlot(t *testing.T) {
	r := newRigWith(t, "alpha", rigAccount{key: account.KeyOptions{Limits: account.Limits{
		Concurrency: 1, RPM: 100, WindowMinutes: 1, ConcurrencyWaitSeconds: 10}}})
	r.srv.waiter = newSlotWaiter(time.Minute, 4, 0)
	ctx := context.Background()
	first := &exchange{s: r.srv}
	if resp := r.admitRequest(ctx, first); resp.GetRequestBody() == nil {
		t.Fatalf("first request: %v", resp)
	}
	waiting := func(n int) {
		t.Helper()
		eventually.That(t, 5*time.Second, "waiters", func() (bool, string) {
			return r.srv.waiter.waiting() == n, fmt.Sprint(r.srv.waiter.waiting(), " waiting")
		})
	}

	sent := make(chan *extprocv3.ProcessingResponse, 1)
	second := &exchange{s: r.srv, extend: messageTimeout(func(m *extprocv3.ProcessingResponse) error { sent <- m; return nil })}
	answer := make(chan *extprocv3.ProcessingResponse, 1)
	go func() { answer <- r.admitRequest(ctx, second) }()
	waiting(1)
	if ext := <-sent; ext.GetOverrideMessageTimeout().AsDuration() != 10*time.Second+config.ExtProcMessageTimeout {
		t.Fatalf("message timeout extended by %v, want the wait + %v", ext.GetOverrideMessageTimeout().AsDuration(), config.ExtProcMessageTimeout)
	}
	first.finish() // the first request ends: its slot frees when it settles
	if resp := <-answer; resp.GetRequestBody() == nil {
		t.Fatalf("after the slot freed: %v", resp)
	}

	// A third waits for the second's slot; its client leaves.
	cctx, leave := context.WithCancel(ctx)
	third := &exchange{s: r.srv, extend: func(time.Duration) error { return nil }}
	go func() { answer <- r.admitRequest(cctx, third) }()
	waiting(1)
	leave()
	resp := <-answer
	if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 429 {
		t.Fatalf("a waiter whose client left: %v", resp)
	}
	if third.admitted {
		t.Fatal("the request whose client left was admitted")
	}
	waiting(0)
	rl, err := r.mr.ZMembers("gw:{acct:" + r.acct + "}:krl:" + second.key.ID)
	if err != nil || len(rl) != 2 {
		t.Fatalf("the rate window holds %v (%v), want the two admitted requests", rl, err)
	}
	second.finish()
}
