package extproc

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/leases"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/logbuf"
	"github.com/modelgateway/gateway/internal/outbox"
	"github.com/modelgateway/gateway/internal/usage"
)

// With leases on (the default), most requests are admitted from a lease,
// with no Redis round trip on their critical path, and records and
// settlements go in batches: under a load of many requests, at most two
// round trips per request in all, renewals included.
func TestRoundTripsPerLeasedRequest(t *testing.T) {
	const n = 300
	r := newRig(t)
	// A lease of at least n holds: the critical path's round trips do not
	// depend on the rate this machine allows (a lease sized for the rate
	// seen runs out more often on a loaded one).
	m := leases.New(r.st, r.st, leases.Options{Interval: time.Hour, MinHolds: 4 * n, Logger: slog.New(slog.DiscardHandler)})
	r.srv.admitter = m
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	// The first requests go to the store and ask for a lease; wait for one
	// admitted from it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		before := r.trips.critical.Load()
		r.request(t)
		if r.trips.critical.Load() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no request admitted from a lease")
		}
	}
	if err := r.srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	before, criticalBefore := r.trips.n.Load(), r.trips.critical.Load()
	for range n {
		r.request(t)
	}
	if err := r.srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m.Close(ctx) // what is left to record, and the lease returned
	if got := r.trips.critical.Load() - criticalBefore; got > 1 {
		t.Errorf("%d Redis round trips on the critical paths of %d requests, want all but at most one admitted from the lease", got, n)
	}
	got := r.trips.n.Load() - before
	t.Logf("%d Redis round trips for %d leased requests: %.3f per request", got, n, float64(got)/n)
	if got > 2*n {
		t.Errorf("%d Redis round trips for %d leased requests, want at most %d", got, n, 2*n)
	}
	rep, err := r.st.Usage(ctx, r.acct, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Requests < n {
		t.Fatalf("usage counts %d requests, want at least %d", rep.Totals.Requests, n)
	}
}

// batchCounter applies every settlement and counts its calls.
type batchCounter struct{ calls atomic.Int64 }

func (b *batchCounter) SettleBatch(_ context.Context, sts []account.Settlement) []ledger.SettleResult {
	b.calls.Add(1)
	res := make([]ledger.SettleResult, len(sts))
	for i := range res {
		res[i].Applied = true
	}
	return res
}

// writeCounter counts the writes it is given.
type writeCounter struct {
	mu     sync.Mutex
	out    bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes++
	return w.out.Write(p)
}

// The request lines a batch's callbacks log go out in one write per batch,
// before the batch's settlements count as done: a usage read that waited
// for them finds their lines written.
func TestSettlerWritesABatchsLinesOnce(t *testing.T) {
	const n = 50
	var out writeCounter
	lines := logbuf.New(&out)
	store := &batchCounter{}
	s := newSettler(store, time.Second, slog.New(slog.DiscardHandler), func() { lines.Flush() })
	for i := range n {
		s.enqueue(account.Settlement{RequestID: fmt.Sprintf("req_%d", i), AccountID: "acct_1"}, 0, false,
			func(st *account.Settlement, _ ledger.SettleResult, _ time.Duration) {
				fmt.Fprintf(lines, "%s\n", st.RequestID)
			})
	}
	if err := s.wait(context.Background(), allKey); err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	if got := strings.Count(out.out.String(), "\n"); got != n {
		t.Fatalf("%d lines written once the settlements were done, want %d", got, n)
	}
	if calls := store.calls.Load(); int64(out.writes) != calls {
		t.Fatalf("%d writes for %d batches, want one each", out.writes, calls)
	}
}

// gatedStore applies a batch only once released, and says when it has one.
type gatedStore struct {
	got     chan int
	release chan struct{}
}

func (g *gatedStore) SettleBatch(_ context.Context, sts []account.Settlement) []ledger.SettleResult {
	g.got <- len(sts)
	<-g.release
	res := make([]ledger.SettleResult, len(sts))
	for i := range res {
		res[i].Applied = true
	}
	return res
}

// A wait for an account's pending settlements (a usage read) sends their
// batch at once rather than when its linger ends.
func TestAWaitCutsTheLingerShort(t *testing.T) {
	store := &gatedStore{got: make(chan int, 1), release: make(chan struct{})}
	close(store.release)
	s := newSettler(store, time.Second, slog.New(slog.DiscardHandler), nil)
	s.linger = time.Hour
	s.enqueue(account.Settlement{RequestID: "req_1", AccountID: "acct_1"}, 0, false, func(*account.Settlement, ledger.SettleResult, time.Duration) {})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.wait(ctx, "acct_1"); err != nil {
		t.Fatalf("the wait ended with %v: the batch waited for its linger", err)
	}
	if n := <-store.got; n != 1 {
		t.Fatalf("a batch of %d, want the one settlement", n)
	}
}

// A queued settlement is in the outbox from enqueue until the store has
// it, while its batch is being applied too, in place of its request's hold
// record; a SIGKILL meanwhile leaves it for the next run, which reads it
// back whole.
func TestSettlerKeepsQueuedSettlementsInTheOutbox(t *testing.T) {
	dir := t.TempDir()
	box, _, _, err := outbox.Open(filepath.Join(dir, "outbox"), 16)
	if err != nil {
		t.Fatal(err)
	}
	store := &gatedStore{got: make(chan int, 1), release: make(chan struct{})}
	s := newSettler(store, time.Second, slog.New(slog.DiscardHandler), nil)
	s.outbox = box
	want := account.Settlement{RequestID: "req_1", AccountID: "acct_1", KeyID: "key_1", Priced: "m", Status: 200, Cost: 1234,
		Usage: usage.Usage{Input: 10, Output: 20}, Lease: account.LeaseRef{ID: "l.1", Seq: 3, Hold: 5000}}
	record, ok := box.KeepRecord(account.LeasedRequest{Lease: want.Lease, Admission: account.Admission{RequestID: "req_1", AccountID: "acct_1"}})
	if !ok {
		t.Fatal("record not kept")
	}
	s.enqueue(want, record, false, func(*account.Settlement, ledger.SettleResult, time.Duration) {})
	if box.Kept() != 1 {
		t.Fatalf("%d kept once queued, want 1: the settlement, in place of the record", box.Kept())
	}
	<-store.got // the batch is in the store's hands, not applied yet
	if box.Kept() != 1 {
		t.Fatalf("%d kept while the batch is applied, want 1", box.Kept())
	}
	// What a process killed now would leave: the file as it is.
	b, err := os.ReadFile(filepath.Join(dir, "outbox"))
	if err != nil {
		t.Fatal(err)
	}
	close(store.release)
	if err := s.wait(context.Background(), allKey); err != nil {
		t.Fatal(err)
	}
	if box.Kept() != 0 {
		t.Fatalf("%d kept once applied, want 0", box.Kept())
	}
	box.Close()
	if err := os.WriteFile(filepath.Join(dir, "outbox"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	box, left, _, err := outbox.Open(filepath.Join(dir, "outbox"), 16)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	if len(left) != 1 {
		t.Fatalf("%d entries left by the killed run, want 1", len(left))
	}
	kind, _, got, err := outbox.Decode(left[0])
	if err != nil || kind != outbox.KindSettlement || !reflect.DeepEqual(got, want) {
		t.Fatalf("left %q %+v (%v), want the settlement %+v", kind, got, err, want)
	}
}

// With no room for the settlement, its request's record stays in the
// outbox until the batch is applied: the request is never unkept.
func TestSettlerKeepsTheRecordWhenTheOutboxIsFull(t *testing.T) {
	box, _, _, err := outbox.Open(filepath.Join(t.TempDir(), "outbox"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	store := &gatedStore{got: make(chan int, 1), release: make(chan struct{})}
	s := newSettler(store, time.Second, slog.New(slog.DiscardHandler), nil)
	s.outbox = box
	lease := account.LeaseRef{ID: "l.1", Seq: 1, Hold: 5000}
	record, ok := box.KeepRecord(account.LeasedRequest{Lease: lease, Admission: account.Admission{RequestID: "req_1", AccountID: "acct_1"}})
	if !ok {
		t.Fatal("record not kept")
	}
	s.enqueue(account.Settlement{RequestID: "req_1", AccountID: "acct_1", Status: 200, Lease: lease}, record, false,
		func(*account.Settlement, ledger.SettleResult, time.Duration) {})
	<-store.got
	if box.Kept() != 1 || box.Refused() != 1 {
		t.Fatalf("%d kept, %d refused while the batch is applied; want the record kept, the settlement refused", box.Kept(), box.Refused())
	}
	close(store.release)
	if err := s.wait(context.Background(), allKey); err != nil {
		t.Fatal(err)
	}
	if box.Kept() != 0 {
		t.Fatalf("%d kept once applied, want 0", box.Kept())
	}
}
