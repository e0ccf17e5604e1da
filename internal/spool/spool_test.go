package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
	"github.com/modelgateway/gateway/internal/usage"
)

const balance = 1_000_000_000 // 1 USD in nano-USD

var errDown = errors.New("store down (test)")

// flaky is a store that fails every call while down is set, as an
// unreachable Redis would.
type flaky struct {
	*store.Store
	down atomic.Bool
}

func (f *flaky) Admit(ctx context.Context, a *account.Admission) (account.Decision, error) {
	if f.down.Load() {
		return account.Decision{}, errDown
	}
	return f.Store.Admit(ctx, a)
}

func (f *flaky) Settle(ctx context.Context, st account.Settlement) (bool, error) {
	if f.down.Load() {
		return false, errDown
	}
	return f.Store.Settle(ctx, st)
}

func (f *flaky) SettleBatch(ctx context.Context, sts []account.Settlement) []ledger.SettleResult {
	if f.down.Load() {
		res := make([]ledger.SettleResult, len(sts))
		for i := range res {
			res[i].Err = errDown
		}
		return res
	}
	return f.Store.SettleBatch(ctx, sts)
}

// settle settles one request through the spool.
func settle(ctx context.Context, l *Spool, st account.Settlement) (bool, error) {
	r := l.SettleBatch(ctx, []account.Settlement{st})[0]
	return r.Applied, r.Err
}

type env struct {
	t     *testing.T
	mr    *miniredis.Miniredis
	store *flaky
	acct  string
	key   string
	dir   string
	clock *testclock.Clock
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, mr: miniredis.RunT(t), dir: t.TempDir(), clock: testclock.New(time.Now().UTC())}
	rdb := redis.NewClient(&redis.Options{Addr: e.mr.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{HoldTTL: time.Minute, Now: e.clock.Now})
	e.store = &flaky{Store: st}
	ctx := context.Background()
	a, err := st.CreateAccount(ctx, "test", balance, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, k, err := st.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.acct, e.key = a.ID, k.ID
	return e
}

// open opens a Spool on the env's spool directory with a fresh registry.
func (e *env) open(o Options) (*Spool, *prometheus.Registry) {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.MinBackoff == 0 {
		o.MinBackoff, o.MaxBackoff = time.Millisecond, 10*time.Millisecond
	}
	l, err := Open(e.dir, e.store, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { l.Close(context.Background()) })
	return l, reg
}

// admit admits request id with a hold of 10,000 nano-USD and returns the
// settlement that would end it at cost.
func (e *env) admit(l *Spool, id string, cost int64) account.Settlement {
	e.t.Helper()
	// Admission goes to the store, never the spool, which only hears
	// that the store answered (as the sidecar wires it).
	d, err := e.store.Admit(context.Background(), &account.Admission{RequestID: id, AccountID: e.acct, KeyID: e.key, Priced: "m", Hold: 10_000})
	if err != nil || d.Outcome != account.Admitted {
		e.t.Fatalf("admit %s: %+v %v", id, d, err)
	}
	l.Answered()
	return account.Settlement{RequestID: id, AccountID: e.acct, KeyID: e.key, Priced: "m",
		Usage: usage.Usage{Input: 3, Output: 4}, Cost: cost, Status: 200, Stream: true, StartedAt: e.clock.Now(), EndedAt: e.clock.Now()}
}

// check asserts the account's balance, ledger and open holds.
func (e *env) check(wantCharged int64, wantEntries int, wantHolds int64) {
	e.t.Helper()
	ctx := context.Background()
	rep, err := e.store.Usage(ctx, e.acct, ledger.Total)
	if err != nil {
		e.t.Fatal(err)
	}
	entries, _, err := e.store.Ledger(ctx, e.acct, "", 100)
	if err != nil {
		e.t.Fatal(err)
	}
	n, _, err := e.store.OpenHolds(ctx, e.acct)
	if err != nil {
		e.t.Fatal(err)
	}
	if balance-rep.Balance != wantCharged || rep.Totals.Cost != wantCharged || len(entries) != wantEntries || n != wantHolds {
		e.t.Fatalf("charged %d, counted %d, %d ledger entries, %d holds; want %d, %d entries, %d holds",
			balance-rep.Balance, rep.Totals.Cost, len(entries), n, wantCharged, wantEntries, wantHolds)
	}
	seen := map[string]bool{}
	for _, en := range entries {
		if seen[en.RequestID] {
			e.t.Fatalf("%s settled twice", en.RequestID)
		}
		seen[en.RequestID] = true
	}
}

// waitEmpty waits until the replayer has emptied the spool.
func waitEmpty(t *testing.T, l *Spool) {
	t.Helper()
	eventually.That(t, 10*time.Second, "the replayer empties the spool", func() (bool, string) {
		n := l.Depth()
		return n == 0, fmt.Sprintf("%d settlements spooled", n)
	})
}

// counter reads a counter or gauge.
func counter(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// While the store is down a settlement is spooled and reported applied; it
// is applied, once, when the store is back.
func TestSettleSpoolsAndReplays(t *testing.T) {
	e := newEnv(t)
	storeErrors := 0
	l, _ := e.open(Options{OnStoreError: func() { storeErrors++ }})
	st := e.admit(l, "req_1", 4_000)
	e.store.down.Store(true)
	applied, err := settle(context.Background(), l, st)
	if err != nil || !applied {
		t.Fatalf("settle while down: %v %v; want spooled", applied, err)
	}
	if storeErrors != 1 {
		t.Fatalf("a spooled settlement counted %d store errors, want 1", storeErrors)
	}
	if l.Depth() != 1 || counter(t, l.metrics.spooled) != 1 || counter(t, l.metrics.depth) != 1 {
		t.Fatalf("depth %d", l.Depth())
	}
	e.check(0, 0, 1) // nothing charged yet; the hold still stands
	e.store.down.Store(false)
	waitEmpty(t, l)
	e.check(4_000, 1, 0)
	if got := counter(t, l.metrics.replayed.WithLabelValues("applied")); got != 1 {
		t.Fatalf("replayed %v", got)
	}
	if fi, err := os.Stat(filepath.Join(e.dir, fileName)); err != nil || fi.Size() != 0 {
		t.Fatalf("spool file after replay: %v %v", fi, err)
	}
}

// The same with a real outage: miniredis closed and restarted on its port.
func TestSettleSpoolsWhileRedisStopped(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{AttemptTimeout: time.Second})
	var sts []account.Settlement
	for _, id := range []string{"req_a", "req_b", "req_c"} {
		sts = append(sts, e.admit(l, id, 1_000))
	}
	e.mr.Close()
	for _, st := range sts {
		if applied, err := settle(context.Background(), l, st); err != nil || !applied {
			t.Fatalf("settle %s: %v %v", st.RequestID, applied, err)
		}
	}
	if l.Depth() != 3 {
		t.Fatalf("depth %d, want 3", l.Depth())
	}
	if err := e.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, l)
	e.check(3_000, 3, 0)
}

// A crash after a replay applied its records but before the spool was
// rewritten leaves them in the file; replaying them again charges nothing
// more.
func TestReplayTwiceChargesOnce(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{})
	st := e.admit(l, "req_1", 7_000)
	e.store.down.Store(true)
	if _, err := settle(context.Background(), l, st); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(filepath.Join(e.dir, fileName))
	if err != nil || len(saved) == 0 {
		t.Fatalf("spool file: %v", err)
	}
	e.store.down.Store(false)
	waitEmpty(t, l)
	e.check(7_000, 1, 0)
	l.Close(context.Background())

	// The "crash": the old file comes back.
	if err := os.WriteFile(filepath.Join(e.dir, fileName), saved, 0o600); err != nil {
		t.Fatal(err)
	}
	l2, _ := e.open(Options{})
	waitEmpty(t, l2)
	e.check(7_000, 1, 0)
	if got := counter(t, l2.metrics.replayed.WithLabelValues("duplicate")); got != 1 {
		t.Fatalf("duplicates %v, want 1", got)
	}
	// And a settlement applied directly, spooled again by mistake, too.
	if err := l2.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.file.append(st); err != nil {
		t.Fatal(err)
	}
	if err := l2.Replay(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.check(7_000, 1, 0)
}

// A settlement replayed after its hold expired and was released by another
// admission still charges exactly once.
func TestReplayAfterHoldExpired(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{})
	st := e.admit(l, "req_1", 5_000)
	e.store.down.Store(true)
	if _, err := settle(context.Background(), l, st); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Minute) // past the one-minute hold lease
	d, err := e.store.Store.Admit(context.Background(), &account.Admission{RequestID: "req_2", AccountID: e.acct, KeyID: e.key, Hold: 10_000})
	if err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %+v %v", d, err)
	}
	e.store.down.Store(false)
	waitEmpty(t, l)
	e.check(5_000, 1, 1) // req_2's hold is open
	l.Replay(context.Background())
	e.check(5_000, 1, 1)
}

// Settlements still spooled when the sidecar stops are replayed by the next
// one.
func TestReplayOnStart(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{})
	st := e.admit(l, "req_1", 2_000)
	e.store.down.Store(true)
	if _, err := settle(context.Background(), l, st); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	l.Close(ctx) // the last replay fails: the store is still down
	e.check(0, 0, 1)

	e.store.down.Store(false)
	l2, reg := e.open(Options{})
	waitEmpty(t, l2)
	e.check(2_000, 1, 0)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"gateway_spool_depth", "gateway_spool_bytes", "gateway_spooled_total", "gateway_spool_replayed_total", "gateway_spool_errors_total"} {
		if !names[n] {
			t.Errorf("%s not registered", n)
		}
	}
}

// Errors a retry cannot mend are returned, not spooled.
func TestPermanentErrorsAreNotSpooled(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{})
	ctx := context.Background()
	if _, err := settle(ctx, l, account.Settlement{RequestID: "req_x", AccountID: "nosuchacct", Status: 200}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("unknown account: %v", err)
	}
	e.store.down.Store(true)
	if _, err := settle(ctx, l, account.Settlement{AccountID: e.acct, Status: 200}); err == nil {
		t.Fatal("empty request id accepted")
	}
	if _, err := settle(ctx, l, account.Settlement{RequestID: "req_y", AccountID: e.acct, Cost: -1}); err == nil {
		t.Fatal("negative cost accepted")
	}
	if l.Depth() != 0 {
		t.Fatalf("depth %d", l.Depth())
	}
}

// A full spool refuses the settlement and says so.
func TestFullSpool(t *testing.T) {
	e := newEnv(t)
	// The size of one of e.admit's settlements.
	line, _ := encode(account.Settlement{RequestID: "req_1", AccountID: e.acct, KeyID: e.key, Priced: "m",
		Usage: usage.Usage{Input: 3, Output: 4}, Cost: 1_000, Status: 200, Stream: true, StartedAt: e.clock.Now(), EndedAt: e.clock.Now()}, time.Now())
	l, _ := e.open(Options{MaxBytes: int64(len(line) * 3 / 2)})
	a, b := e.admit(l, "req_1", 1_000), e.admit(l, "req_2", 1_000)
	e.store.down.Store(true)
	if _, err := settle(context.Background(), l, a); err != nil {
		t.Fatal(err)
	}
	_, err := settle(context.Background(), l, b)
	if !errors.Is(err, ErrFull) || !errors.Is(err, errDown) {
		t.Fatalf("err = %v; want the store's error and ErrFull", err)
	}
	if got := counter(t, l.metrics.errors.WithLabelValues("full")); got != 1 {
		t.Fatalf("full errors %v", got)
	}
	e.store.down.Store(false)
	waitEmpty(t, l)
	e.check(1_000, 1, 1) // req_2's hold waits for its expiry
}

// Without a spool directory store errors are returned as they are.
func TestNoSpoolDir(t *testing.T) {
	e := newEnv(t)
	l, err := Open("", e.store, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	st := e.admit(l, "req_1", 1_000)
	e.store.down.Store(true)
	if _, err := settle(context.Background(), l, st); !errors.Is(err, errDown) {
		t.Fatalf("err = %v", err)
	}
}

// Concurrent settlements while the store is down are all spooled and all
// replayed once.
func TestConcurrentSpooling(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{})
	const n = 40
	sts := make([]account.Settlement, n)
	for i := range sts {
		sts[i] = e.admit(l, "req_"+string(rune('a'+i%26))+string(rune('a'+i/26)), int64(100+i))
	}
	e.store.down.Store(true)
	var wg sync.WaitGroup
	for _, st := range sts {
		wg.Go(func() {
			if _, err := settle(context.Background(), l, st); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if l.Depth() != n {
		t.Fatalf("depth %d", l.Depth())
	}
	e.store.down.Store(false)
	waitEmpty(t, l)
	var want int64
	for i := range n {
		want += int64(100 + i)
	}
	e.check(want, n, 0)
}

// A live call the store answers ends the replayer's backoff: the spool
// empties as soon as the store is back under traffic.
func TestLiveCallEndsBackoff(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{MinBackoff: time.Hour, MaxBackoff: time.Hour})
	st := e.admit(l, "req_1", 3_000)
	e.store.down.Store(true)
	if _, err := settle(context.Background(), l, st); err != nil {
		t.Fatal(err)
	}
	e.store.down.Store(false)
	e.admit(l, "req_2", 0)
	waitEmpty(t, l)
	e.check(3_000, 1, 1)
}

// A batch settles in one go while the store is up; while it is down every
// settlement of the batch is spooled and later applied once, and one the
// store refuses for good (an unknown account) is returned, not spooled.
func TestSettleBatch(t *testing.T) {
	e := newEnv(t)
	l, _ := e.open(Options{AttemptTimeout: time.Second})
	var up, down []account.Settlement
	for _, id := range []string{"req_1", "req_2"} {
		up = append(up, e.admit(l, id, 1_000))
	}
	for _, id := range []string{"req_3", "req_4", "req_5"} {
		down = append(down, e.admit(l, id, 2_000))
	}
	unknown := up[0]
	unknown.RequestID, unknown.AccountID = "req_x", "acct_0000000000000000"
	res := l.SettleBatch(context.Background(), append(up, unknown))
	for i, r := range res[:2] {
		if r.Err != nil || !r.Applied || r.Spooled {
			t.Fatalf("settle %d while up: %+v", i, r)
		}
	}
	if !errors.Is(res[2].Err, store.ErrNotFound) {
		t.Fatalf("unknown account: %+v", res[2])
	}
	if l.Depth() != 0 {
		t.Fatalf("depth %d while up", l.Depth())
	}
	e.mr.Close()
	for i, r := range l.SettleBatch(context.Background(), down) {
		if r.Err != nil || !r.Applied || !r.Spooled {
			t.Fatalf("settle %d while down: %+v; want spooled", i, r)
		}
	}
	if l.Depth() != 3 {
		t.Fatalf("depth %d, want 3", l.Depth())
	}
	if err := e.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	waitEmpty(t, l)
	e.check(2*1_000+3*2_000, 5, 0)
}
