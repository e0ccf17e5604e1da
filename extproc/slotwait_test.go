package extproc

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	w := newSlotWaiter(bound, waiters)
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
	d, outcome, err := w.wait(context.Background(), 10*time.Second, concurrencyRefusal, f.admit)
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
	if len(w.slots) != 0 {
		t.Fatalf("%d waiter slots still taken", len(w.slots))
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
			d, outcome, err := w.wait(context.Background(), w.limit(tc.wait), concurrencyRefusal, f.admit)
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
	d, outcome, err := w.wait(ctx, 30*time.Second, concurrencyRefusal, admit)
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
	d, outcome, err := w.wait(context.Background(), 30*time.Second, concurrencyRefusal, f.admit)
	if err != nil || outcome != waitRefused || d.Outcome != account.RateLimited || f.attempts != 2 {
		t.Fatalf("got %v %v %v after %d attempts, want the rate refusal at the 2nd", d, outcome, err, f.attempts)
	}
	storeDown := errors.New("store down")
	f = &fakeAdmitter{admitAt: 1, err: storeDown}
	if _, outcome, err := w.wait(context.Background(), 30*time.Second, concurrencyRefusal, f.admit); !errors.Is(err, storeDown) || outcome != waitRefused {
		t.Fatalf("got %v %v, want the store's error", outcome, err)
	}
}

func TestSlotWaitBoundsWaiters(t *testing.T) {
	w, _, _ := testWaiter(time.Minute, 1)
	w.slots <- struct{}{} // one request already waits
	f := &fakeAdmitter{admitAt: 1, next: account.Decision{Outcome: account.Admitted}}
	d, outcome, err := w.wait(context.Background(), 30*time.Second, concurrencyRefusal, f.admit)
	if err != nil || outcome != waitFull || d != concurrencyRefusal || f.attempts != 0 {
		t.Fatalf("got %v %v %v after %d attempts, want the refusal at once", d, outcome, err, f.attempts)
	}
	<-w.slots
	if _, outcome, _ := w.wait(context.Background(), 30*time.Second, concurrencyRefusal, f.admit); outcome != waitAdmitted {
		t.Fatalf("with room: %v, want admitted", outcome)
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
	r.srv.waiter = newSlotWaiter(time.Minute, 4)
	ctx := context.Background()
	first := &exchange{s: r.srv}
	if resp := r.admitRequest(ctx, first); resp.GetRequestBody() == nil {
		t.Fatalf("first request: %v", resp)
	}
	waiting := func(n int) {
		t.Helper()
		eventually.That(t, 5*time.Second, "waiters", func() (bool, string) {
			return len(r.srv.waiter.slots) == n, fmt.Sprint(len(r.srv.waiter.slots), " waiting")
		})
	}

	sent := make(chan *extprocv3.ProcessingResponse, 1)
	second := &exchange{s: r.srv, send: func(m *extprocv3.ProcessingResponse) error { sent <- m; return nil }}
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
	third := &exchange{s: r.srv, send: func(*extprocv3.ProcessingResponse) error { return nil }}
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
