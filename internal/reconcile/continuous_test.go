package reconcile

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// continuous is a continuous run over a relay whose report holds 7 input
// tokens a window on key_b, against a ledger of 5, and counts the reports
// read.
func continuous(t *testing.T, st *store.Store, holder string, now *time.Time, reads *int) *Continuous {
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/beta"+vendorusage.OpenAICostsPath {
			// 24 windows of 7 tokens at 1,000 nano-USD, and 500 more.
			start, _ := strconv.ParseInt(r.URL.Query().Get("start_time"), 10, 64)
			w.Write([]byte(`{"data":[{"start_time":` + strconv.FormatInt(start, 10) + `,"end_time":` + strconv.FormatInt(start+86400, 10) +
				`,"results":[{"amount":{"value":0.0001685,"currency":"usd"}}]}],"has_more":false}`))
			return
		}
		if r.URL.Path != "/beta"+vendorusage.OpenAIPath {
			emptyOrNotFound(w, r)
			return
		}
		*reads++
		start, _ := strconv.ParseInt(r.URL.Query().Get("start_time"), 10, 64)
		w.Write([]byte(`{"data":[{"start_time":` + strconv.FormatInt(start, 10) + `,"end_time":` + strconv.FormatInt(start+3600, 10) +
			`,"results":[{"input_tokens":7,"api_key_id":"key_b","model":"gpt-x"}]}],"has_more":false}`))
	}))
	t.Cleanup(relay.Close)
	var entries []ledger.Entry
	for h := range 6 {
		at := hour.Add(time.Duration(h)*time.Hour + time.Minute)
		entries = append(entries, ledger.Entry{Settlement: account.Settlement{VendorKey: "k1", Priced: "gpt-x", StartedAt: at, EndedAt: at, Usage: usage.Usage{Input: 5}, Cost: 5000}})
	}
	return &Continuous{
		Runner: &Runner{
			Relay: relay.URL, Client: relay.Client(),
			Upstreams: []Upstream{{Name: "beta", Format: config.FormatChatCompletions, Keys: map[string]string{"k1": "key_b"},
				Serves: func(string) bool { return true }, Price: price, Costs: true}},
			Ledger: ledgerOf{"a1": entries},
		},
		State: st, Width: vendorusage.Hour, Delay: 10 * time.Minute, Interval: time.Minute, Lookback: 3 * time.Hour,
		Holder: holder, Logger: nil, Now: func() time.Time { return *now },
	}
}

// Windows are reconciled once, in order, when due, by the lease holder
// alone; a new runner resumes at the cursor; a window run again gives the
// same rows; a store outage mid-run loses nothing and counts nothing twice.
func TestContinuous(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	ctx := context.Background()
	now := hour.Add(3*time.Hour + 5*time.Minute) // 13:05: 10:00 and 11:00 due, 12:00 not (its delay runs to 13:10)
	reads := 0
	var heard []time.Time
	a := continuous(t, st, "a", &now, &reads)
	a.OnWindow = func(_ context.Context, start time.Time, rep Report) {
		heard = append(heard, start)
		if len(rep.Rows) != 1 || rep.Rows[0].Unexplained.Usage != (usage.Usage{Input: 2}) || rep.Rows[0].Unexplained.Cost != 2000 {
			t.Errorf("window %s: %+v", start, rep.Rows)
		}
	}
	if err := a.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if len(heard) != 2 || !heard[0].Equal(hour) || !heard[1].Equal(hour.Add(time.Hour)) {
		t.Fatalf("windows %v; want 10:00 and 11:00", heard)
	}
	// Another sidecar does nothing while a holds the lease.
	otherReads := 0
	b := continuous(t, st, "b", &now, &otherReads)
	now = now.Add(10 * time.Minute)
	if err := b.Tick(ctx); err != nil || otherReads != 0 {
		t.Fatalf("b read %d reports while a holds the lease (%v)", otherReads, err)
	}
	// a restarted: it resumes at 12:00.
	a2 := continuous(t, st, "a", &now, &reads)
	a2.OnWindow = a.OnWindow
	if err := a2.Tick(ctx); err != nil || len(heard) != 3 || !heard[2].Equal(hour.Add(2*time.Hour)) {
		t.Fatalf("after a restart: windows %v (%v)", heard, err)
	}
	kept, err := st.ReconcileWindows(ctx, "1h", hour, hour.Add(24*time.Hour))
	if err != nil || len(kept) != 3 {
		t.Fatalf("%d windows kept (%v)", len(kept), err)
	}
	// The same window again: the same rows, byte for byte.
	var again []time.Time
	a2.OnWindow = func(_ context.Context, start time.Time, _ Report) { again = append(again, start) }
	rep, err := a2.Runner.Run(ctx, hour, hour.Add(time.Hour), vendorusage.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := jsonOf(rep); string(b) != string(kept[hour]) {
		t.Errorf("10:00 again:\n%s\nkept:\n%s", b, kept[hour])
	}
	// The store goes away mid-run and comes back: the run resumes at the
	// first window not kept.
	now = now.Add(2 * time.Hour) // 15:15: 13:00 and 14:00 due
	m.SetError("LOADING")
	if err := a2.Tick(ctx); err == nil {
		t.Fatal("a run with the store down reported no error")
	}
	m.SetError("")
	if err := a2.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if len(again) != 2 || !again[0].Equal(hour.Add(3*time.Hour)) || !again[1].Equal(hour.Add(4*time.Hour)) {
		t.Fatalf("after the outage: windows %v; want 13:00 and 14:00 once each", again)
	}
	ws, err := Kept(ctx, st, vendorusage.Hour, hour, hour.Add(24*time.Hour))
	if err != nil || len(ws) != 5 {
		t.Fatalf("%d windows kept (%v); want 5", len(ws), err)
	}
	for i, w := range ws {
		if !w.Start.Equal(hour.Add(time.Duration(i)*time.Hour)) || len(w.Rows) != 1 || w.Rows[0].Unexplained.Cost != 2000 {
			t.Errorf("window %d: %+v", i, w)
		}
	}
}

// The hour that ends a UTC day sets the day's bill against the day's kept
// windows; a day the run did not see whole is not compared.
func TestContinuousDayCosts(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	day := hour.Truncate(24 * time.Hour)
	now := day.Add(24*time.Hour + 40*time.Minute)
	reads := 0
	c := continuous(t, st, "a", &now, &reads)
	c.Lookback = now.Sub(day.Add(-2 * time.Hour)) // from 22:00 the day before: that day is not whole
	var costs []CostRow
	c.OnWindow = func(_ context.Context, start time.Time, rep Report) {
		if len(rep.Costs) > 0 {
			costs = append(costs, rep.Costs...)
			if !start.Equal(day.Add(23 * time.Hour)) {
				t.Errorf("costs on the window of %s", start)
			}
		}
	}
	if err := c.Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := CostRow{Upstream: "beta", Start: day, Billed: 168_500, Priced: 168_000, Unexplained: 500}
	if len(costs) != 1 || costs[0] != want {
		t.Fatalf("costs %+v; want %+v", costs, want)
	}
	ws, err := Kept(context.Background(), st, vendorusage.Hour, day, day.Add(24*time.Hour))
	if err != nil || len(ws) != 24 || len(ws[23].Costs) != 1 {
		t.Fatalf("%d windows kept (%v)", len(ws), err)
	}
}

// A window whose reports take longer than a lease (a vendor's rate limits
// waited out) keeps its lease renewed: no second runner comes in. A lease
// another sidecar took meanwhile stops the window, nothing kept.
func TestContinuousLeaseHeldThroughAWindow(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	ctx := context.Background()
	const lease = "gw:{reconcile}:lease"
	now := hour.Add(3*time.Hour + 5*time.Minute) // 10:00 and 11:00 due
	// stalled is a runner whose report reads wait until released (or
	// their context ends), telling entered when the first is waiting.
	stalled := func(reads *int) (c *Continuous, entered, release chan struct{}) {
		c = continuous(t, st, "a", &now, reads)
		c.Interval = 20 * time.Millisecond
		entered, release = make(chan struct{}, 1), make(chan struct{})
		base := c.Runner.Client.Transport
		c.Runner.Client = &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			select {
			case entered <- struct{}{}:
			default:
			}
			select {
			case <-release:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
			return base.RoundTrip(r)
		})}
		return c, entered, release
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in 10s", what)
			}
		}
	}

	reads := 0
	a, entered, release := stalled(&reads)
	errc := make(chan error, 1)
	go func() { errc <- a.Tick(ctx) }()
	<-entered
	m.FastForward(2 * time.Minute) // past the lease taken at the window's start
	waitFor("lease renewed mid-window", func() bool { return m.Exists(lease) })
	otherReads := 0
	if err := continuous(t, st, "b", &now, &otherReads).Tick(ctx); err != nil || otherReads != 0 {
		t.Fatalf("b read %d reports while a's window ran (%v)", otherReads, err)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if kept, err := st.ReconcileWindows(ctx, "1h", hour, hour.Add(24*time.Hour)); err != nil || len(kept) != 2 {
		t.Fatalf("%d windows kept (%v); want 2", len(kept), err)
	}

	// The lease taken by another while a's next window waits: a stops.
	now = now.Add(time.Hour) // 12:00 due
	a, entered, _ = stalled(&reads)
	go func() { errc <- a.Tick(ctx) }()
	<-entered
	m.Set(lease, "b")
	if err := <-errc; !errors.Is(err, errLeaseLost) {
		t.Fatalf("a's window with its lease lost: %v", err)
	}
	if kept, err := st.ReconcileWindows(ctx, "1h", hour, hour.Add(24*time.Hour)); err != nil || len(kept) != 2 {
		t.Fatalf("%d windows kept (%v); want still 2", len(kept), err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
