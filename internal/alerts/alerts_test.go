package alerts

import (
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
	"github.com/modelgateway/gateway/internal/usage"
)

// verify checks a delivery's signature as a receiver would: HMAC-SHA256 of
// id "." timestamp "." body under the shared secret.
func verify(t *testing.T, secret []byte, r *http.Request, body []byte) {
	t.Helper()
	ts, err := strconv.ParseInt(r.Header.Get(HeaderTimestamp), 10, 64)
	if err != nil {
		t.Errorf("timestamp %q", r.Header.Get(HeaderTimestamp))
	}
	want := Sign(secret, r.Header.Get(HeaderID), ts, body)
	if !hmac.Equal([]byte(r.Header.Get(HeaderSignature)), []byte(want)) {
		t.Errorf("signature %q, want %q", r.Header.Get(HeaderSignature), want)
	}
}

// Secrets: "whsec_" and base64 is the key it encodes (the Standard
// Webhooks test vector signs as the official libraries do); a secret
// without the prefix is its own bytes.
func TestSecrets(t *testing.T) {
	key, err := ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	if got := Sign(key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`)); got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("test vector signed %s", got)
	}
	if StandardSecret(key) != "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" {
		t.Fatalf("StandardSecret %s", StandardSecret(key))
	}
	// Padded or not, as the libraries accept it.
	for _, s := range []string{"whsec_c2VjcmV0", "whsec_c2VjcmV0MQ", "whsec_c2VjcmV0MQ=="} {
		k, err := ParseSecret(s)
		if err != nil || !strings.HasPrefix(string(k), "secret") {
			t.Errorf("%s: %q %v", s, k, err)
		}
	}
	if k, err := ParseSecret("raw-secret"); err != nil || string(k) != "raw-secret" {
		t.Errorf("raw secret: %q %v", k, err)
	}
	for _, bad := range []string{"", "whsec_", "whsec_not base64!"} {
		if _, err := ParseSecret(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A receiver answering 500 twice gets the same event a third time, signed
// each time with the same id; then it is delivered.
func TestDeliveryRetriedAndSigned(t *testing.T) {
	secret := []byte("whsec-test")
	type got struct {
		id   string
		body []byte
	}
	attempts := make(chan got, 10)
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		verify(t, secret, r, body)
		mu.Lock()
		n++
		fail := n <= 2
		mu.Unlock()
		if fail {
			w.WriteHeader(500)
		}
		attempts <- got{r.Header.Get(HeaderID), body}
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	results := make(chan string, 10)
	d := NewDispatcher([]Endpoint{{URL: srv.URL, Secret: secret}}, DispatcherOptions{Backoff: time.Millisecond, Registerer: reg,
		onResult: func(r string) { results <- r }})
	defer d.Close()
	d.Publish(Event{ID: "evt_1", Type: BalanceLow, AccountID: "acct_1", Data: map[string]any{"balance_usd": 1.5}})
	var ids []string
	for range 3 {
		a := <-attempts
		ids = append(ids, a.id)
		var ev Event
		if err := json.Unmarshal(a.body, &ev); err != nil || ev.ID != "evt_1" || ev.Type != BalanceLow || ev.Data["balance_usd"] != 1.5 {
			t.Fatalf("body %s: %v", a.body, err)
		}
	}
	if ids[0] != "evt_1" || ids[1] != ids[0] || ids[2] != ids[0] {
		t.Fatalf("ids %v", ids)
	}
	for _, want := range []string{"retried", "retried", "delivered"} {
		if r := <-results; r != want {
			t.Fatalf("result %s, want %s", r, want)
		}
	}
	if r := testutil.ToFloat64(d.deliveries.WithLabelValues("retried")); r != 2 {
		t.Fatalf("retried %v, want 2", r)
	}
	if r := testutil.ToFloat64(d.deliveries.WithLabelValues("delivered")); r != 1 {
		t.Fatalf("delivered %v, want 1", r)
	}
}

// The events of one Publish reach each receiver in order, retries
// included: the second is not sent while the first is in flight or
// waiting to be retried.
func TestDeliveryInPublishOrder(t *testing.T) {
	type attempt struct {
		id     string
		status int
	}
	attempts := make(chan attempt, 10)
	inFlight := make(chan struct{})
	release := make(chan struct{})
	first := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, status := r.Header.Get(HeaderID), 200
		if first { // one worker: one attempt at a time, so no lock
			first = false
			inFlight <- struct{}{}
			<-release
			status = 500
		}
		w.WriteHeader(status)
		attempts <- attempt{id, status}
	}))
	defer srv.Close()
	d := NewDispatcher([]Endpoint{{URL: srv.URL, Secret: []byte("s")}}, DispatcherOptions{Workers: 1, Backoff: time.Millisecond})
	defer d.Close()
	d.Publish(Event{ID: "evt_80", Type: BudgetThreshold}, Event{ID: "evt_100", Type: BudgetThreshold})
	<-inFlight
	if n := len(d.queue); n != 0 {
		t.Fatalf("%d deliveries queued behind the first one in flight", n)
	}
	close(release)
	var got []attempt
	for range 3 {
		got = append(got, <-attempts)
	}
	if want := []attempt{{"evt_80", 500}, {"evt_80", 200}, {"evt_100", 200}}; !slices.Equal(got, want) {
		t.Fatalf("attempts %v, want %v", got, want)
	}
}

// A receiver that hangs holds one worker; Publish never waits for it, and
// what the bounded queue cannot take is dropped and counted.
func TestHungReceiverNeverBlocksPublish(t *testing.T) {
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	d := NewDispatcher([]Endpoint{{URL: srv.URL, Secret: []byte("s")}}, DispatcherOptions{Workers: 1, QueueSize: 2, Timeout: time.Hour})
	d.Publish(Event{ID: "evt_0", Type: BalanceLow})
	<-arrived // the one worker is stuck in the receiver
	for i := range 9 {
		d.Publish(Event{ID: "evt_" + strconv.Itoa(i+1), Type: BalanceLow})
	}
	if dropped := testutil.ToFloat64(d.deliveries.WithLabelValues("dropped")); dropped != 7 {
		t.Fatalf("dropped %v, want 7 (9 published, 2 queued)", dropped)
	}
}

// Endpoints receive only the event types they asked for.
func TestEndpointEvents(t *testing.T) {
	e := Endpoint{Events: []string{BudgetThreshold}}
	if e.wants(BalanceLow) || !e.wants(BudgetThreshold) || !(Endpoint{}).wants(StoreUnreachable) {
		t.Fatal("event filter")
	}
}

// recorder is a Publisher that keeps what it is given.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Publish(evs ...Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, evs...)
}

func (r *recorder) take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

// twoSidecars returns two watchers over st, as two sidecars run them, each
// publishing to its own recorder.
func twoSidecars(st Store, now func() time.Time) ([2]*recorder, [2]*Watcher) {
	var pubs [2]*recorder
	var ws [2]*Watcher
	for i := range ws {
		pubs[i] = &recorder{}
		ws[i] = NewWatcher(st, pubs[i], WatcherOptions{Now: now, Registerer: prometheus.NewRegistry()})
	}
	return pubs, ws
}

// Two watchers (two sidecars) over one store: each crossing fires exactly
// once between them; a new window, a new threshold or a balance that rose
// and fell again is a new crossing.
func TestEachCrossingOnceAcrossSidecars(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	clk := testclock.New(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: clk.Now})
	a, err := st.CreateAccount(ctx, "acme", 10_000, account.Limits{DailyNanoUSD: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetBalanceAlert(ctx, a.ID, 9000); err != nil {
		t.Fatal(err)
	}
	_, k, err := st.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{Label: "ci",
		Limits: account.Limits{TotalNanoUSD: 500}, ExpiresAt: clk.Now().Add(3 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	pubs, ws := twoSidecars(st, clk.Now)
	spend := func(id string, cost int64) {
		t.Helper()
		if _, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: a.ID, KeyID: k.ID, Hold: cost, KeyLimits: k.Limits}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Settle(ctx, account.Settlement{RequestID: id, AccountID: a.ID, KeyID: k.ID, Cost: cost, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	// events runs both watchers' passes, concurrently, twice, and returns
	// what they published together.
	events := func() []Event {
		t.Helper()
		for range 2 {
			var wg sync.WaitGroup
			for _, w := range ws {
				wg.Add(1)
				go func() { defer wg.Done(); w.CheckAll(ctx) }()
			}
			wg.Wait()
		}
		return append(pubs[0].take(), pubs[1].take()...)
	}
	kinds := func(evs []Event) map[string]int {
		m := map[string]int{}
		for _, e := range evs {
			k := e.Type
			if e.Type == BudgetThreshold {
				k += ":" + e.Data["level"].(string) + ":" + e.Data["window"].(string) + ":" + strconv.FormatInt(e.Data["percent"].(int64), 10)
			}
			m[k]++
			if e.ID == "" || e.AccountID != a.ID {
				t.Errorf("event %+v", e)
			}
		}
		return m
	}
	// The key expires within a week: one event.
	if got := kinds(events()); len(got) != 1 || got[KeyExpiring] != 1 {
		t.Fatalf("first pass %v", got)
	}
	spend("r1", 400) // key total 80 %, account daily 40 %
	if got := kinds(events()); len(got) != 1 || got[BudgetThreshold+":key:total:80"] != 1 {
		t.Fatalf("at 80 %% of the key's total: %v", got)
	}
	spend("r2", 100) // key total 100 %; account daily 50 %
	if got := kinds(events()); len(got) != 1 || got[BudgetThreshold+":key:total:100"] != 1 {
		t.Fatalf("at 100 %% of the key's total: %v", got)
	}
	if got := events(); len(got) != 0 {
		t.Fatalf("nothing new, yet %v", kinds(got))
	}
	// Raise the key's cap; the account's day reaches 80 % and the balance
	// falls below its threshold.
	if err := st.SetKeyLimits(ctx, a.ID, k.ID, account.Limits{TotalNanoUSD: 10_000}); err != nil {
		t.Fatal(err)
	}
	k.Limits = account.Limits{TotalNanoUSD: 10_000}
	spend("r3", 300) // daily 800 of 1000; balance 9200
	if got := kinds(events()); len(got) != 1 || got[BudgetThreshold+":account:daily:80"] != 1 {
		t.Fatalf("at 80 %% of the account's day: %v", got)
	}
	// A refusal by the daily limit fires its 100 % although settled spend
	// is below it.
	for _, w := range ws {
		w.Refused(a.ID, k.ID, account.AccountLevel, account.DailyLimited)
		n := <-w.nudges
		if err := w.CheckAccount(ctx, n.accountID, []nudge{n}); err != nil {
			t.Fatal(err)
		}
	}
	if got := kinds(append(pubs[0].take(), pubs[1].take()...)); len(got) != 1 || got[BudgetThreshold+":account:daily:100"] != 1 {
		t.Fatalf("after a refusal by the day: %v", got)
	}
	// Balance: 10,000 - 800 = 9,200, above 9,000. A new day: spend 300.
	clk.Set(clk.Now().Add(24 * time.Hour))
	spend("r5", 300) // balance 8,900 < 9,000; the new day at 30 %
	if got := kinds(events()); len(got) != 1 || got[BalanceLow] != 1 {
		t.Fatalf("balance below the threshold: %v", got)
	}
	// A top-up above the threshold re-arms it; the next fall fires again.
	if _, _, err := st.TopUp(ctx, a.ID, 200, "t1"); err != nil {
		t.Fatal(err)
	}
	if got := events(); len(got) != 0 {
		t.Fatalf("after a top-up %v", kinds(got))
	}
	spend("r6", 500) // balance 8,600; the day at 80 %
	got := kinds(events())
	if len(got) != 2 || got[BalanceLow] != 1 || got[BudgetThreshold+":account:daily:80"] != 1 {
		t.Fatalf("second fall and the new day's 80 %%: %v", got)
	}
	// What is left of each budget set, never +Inf.
	if v := testutil.ToFloat64(ws[0].remaining.WithLabelValues(a.ID, "", "daily")); v != 0.0000002 {
		t.Fatalf("remaining daily %v", v)
	}
	if n := testutil.CollectAndCount(ws[0].remaining); n != 2 { // the account's day, the key's total
		t.Fatalf("%d remaining series", n)
	}
}

// A budget's thresholds fire in order, at settled + held spend: a refusal
// while settled spend is below 80 % sends the 80 % and then the 100 %, and
// no 80 % follows when settled spend later reaches it; running requests'
// holds count towards a threshold.
func TestBudgetThresholdsInOrder(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	clk := testclock.New(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: clk.Now})
	a, err := st.CreateAccount(ctx, "acme", 1_000_000, account.Limits{DailyNanoUSD: 1000})
	if err != nil {
		t.Fatal(err)
	}
	pub := &recorder{}
	w := NewWatcher(st, pub, WatcherOptions{Now: clk.Now})
	admit := func(id string, hold int64) {
		t.Helper()
		if d, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: a.ID, KeyID: "key_x", Hold: hold}); err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit %s: %+v %v", id, d, err)
		}
	}
	settle := func(id string, cost int64) {
		t.Helper()
		if _, err := st.Settle(ctx, account.Settlement{RequestID: id, AccountID: a.ID, KeyID: "key_x", Cost: cost, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	var percents []int64
	look := func(refused bool) {
		t.Helper()
		var n []nudge
		if refused {
			n = []nudge{{a.ID, "", account.AccountLevel, account.DailyLimited}}
		}
		if err := w.CheckAccount(ctx, a.ID, n); err != nil {
			t.Fatal(err)
		}
		for _, e := range pub.take() {
			percents = append(percents, e.Data["percent"].(int64))
		}
	}
	admit("r1", 500)
	settle("r1", 500)
	look(false) // 50 %
	// A request whose worst case does not fit is refused: the budget is
	// spent as far as clients see.
	look(true)
	admit("r2", 300)
	settle("r2", 300) // settled 80 %
	look(false)
	if !slices.Equal(percents, []int64{80, 100}) {
		t.Fatalf("thresholds fired %v; want [80 100]", percents)
	}

	// The next day: a running request's hold brings spend to 80 %.
	clk.Set(clk.Now().Add(24 * time.Hour))
	percents = nil
	admit("r3", 500)
	settle("r3", 500)
	admit("r4", 300) // running
	look(false)
	if !slices.Equal(percents, []int64{80}) {
		t.Fatalf("with a hold at 80 %%: %v", percents)
	}
}

// A project's budgets fire budget.threshold as the account's do: once
// across sidecars per crossing, 80 % before 100 %, at settled + held spend,
// its 100 % at once on a refusal by the project; the event names the
// project. The default project has no budgets of its own.
func TestProjectBudgetThresholds(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	clk := testclock.New(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: clk.Now})
	a, err := st.CreateAccount(ctx, "acme", 1_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pl := account.Limits{DailyNanoUSD: 1000, TotalNanoUSD: 5000}
	p, err := st.CreateProject(ctx, a.ID, "search", pl)
	if err != nil {
		t.Fatal(err)
	}
	// A project with a budget and no spend: no event names it.
	if _, err := st.CreateProject(ctx, a.ID, "idle", account.Limits{DailyNanoUSD: 1000}); err != nil {
		t.Fatal(err)
	}
	_, k, err := st.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{Label: "ci", ProjectID: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	pubs, ws := twoSidecars(st, clk.Now)
	admit := func(id string, hold int64) {
		t.Helper()
		d, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: a.ID, KeyID: k.ID, Hold: hold, ProjectID: p.ID, ProjectLimits: pl})
		if err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit %s: %+v %v", id, d, err)
		}
	}
	settle := func(id string, cost int64) {
		t.Helper()
		if _, err := st.Settle(ctx, account.Settlement{RequestID: id, AccountID: a.ID, KeyID: k.ID, ProjectID: p.ID, Cost: cost, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	// look runs both watchers' passes and returns the crossings published,
	// as "window:percent", checking that each names the project.
	look := func(refused ...nudge) []string {
		t.Helper()
		for _, w := range ws {
			if err := w.CheckAccount(ctx, a.ID, refused); err != nil {
				t.Fatal(err)
			}
		}
		var got []string
		for _, e := range append(pubs[0].take(), pubs[1].take()...) {
			if e.Type != BudgetThreshold || e.Data["level"] != "project" || e.ProjectID != p.ID || e.KeyID != "" || e.AccountID != a.ID {
				t.Errorf("event %+v", e)
			}
			got = append(got, fmt.Sprintf("%s:%d", e.Data["window"], e.Data["percent"]))
		}
		return got
	}
	admit("r1", 500)
	settle("r1", 500)
	if got := look(); len(got) != 0 {
		t.Fatalf("at 50 %% of the project's day: %v", got)
	}
	admit("r2", 300) // running: 800 of 1000 with its hold
	if got := look(); !slices.Equal(got, []string{"daily:80"}) {
		t.Fatalf("at 80 %% of the project's day (a hold counted): %v", got)
	}
	settle("r2", 300)
	if got := look(); len(got) != 0 {
		t.Fatalf("nothing new, yet %v", got)
	}
	// A request refused by the project's day: its 100 % fires now, once.
	ws[0].Refused(a.ID, k.ID, account.ProjectLevel, account.DailyLimited)
	n := <-ws[0].nudges
	if got := look(n); !slices.Equal(got, []string{"daily:100"}) {
		t.Fatalf("after a refusal by the project's day: %v", got)
	}
	// A key's refusal is not the project's.
	if got := look(nudge{a.ID, k.ID, account.KeyLevel, account.TotalLimited}); len(got) != 0 {
		t.Fatalf("after a key's refusal: %v", got)
	}
	// Four days on: the total reaches 80 % (4800 of 5000), the day 100 %.
	for i := range 4 {
		clk.Set(clk.Now().Add(24 * time.Hour))
		id := fmt.Sprintf("d%d", i)
		admit(id, 1000)
		settle(id, 1000)
	}
	got := look()
	slices.Sort(got)
	if !slices.Equal(got, []string{"daily:100", "daily:80", "total:80"}) {
		t.Fatalf("four days on: %v", got)
	}
}

// The store unreachable for the configured time fires once per outage.
func TestStoreUnreachableOncePerOutage(t *testing.T) {
	clk := testclock.New(time.Unix(1e9, 0))
	pub := &recorder{}
	w := NewWatcher(nil, pub, WatcherOptions{Now: clk.Now, StoreUnreachableAfter: time.Minute, Sidecar: "a"})
	w.StoreResult(false)
	clk.Set(clk.Now().Add(59 * time.Second))
	w.StoreResult(false)
	if n := len(pub.take()); n != 0 {
		t.Fatalf("%d events before the minute", n)
	}
	clk.Set(clk.Now().Add(time.Second))
	w.StoreResult(false)
	w.StoreResult(false)
	if evs := pub.take(); len(evs) != 1 || evs[0].Type != StoreUnreachable || evs[0].Data["sidecar"] != "a" {
		t.Fatalf("events %+v", evs)
	}
	w.StoreResult(true)
	w.StoreResult(false)
	clk.Set(clk.Now().Add(time.Minute))
	w.StoreResult(false)
	if n := len(pub.take()); n != 1 {
		t.Fatalf("%d events for the second outage", n)
	}
}

// model.mismatch fires once per account, upstream and pair of models per
// ModelMismatchEvery across sidecars, and again after it.
func TestModelMismatchRateLimited(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	st := store.New(rdb, store.Options{})
	a, err := st.CreateAccount(ctx, "acme", 10_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pubs, ws := twoSidecars(st, nil)
	fire := func(requested, priced usage.PricedModel) []Event {
		for range 3 {
			for _, w := range ws {
				w.ModelMismatch(ctx, "beta", a.ID, "k1", requested, priced)
			}
		}
		return append(pubs[0].take(), pubs[1].take()...)
	}
	evs := fire("gpt-4o-mini", "o1-pro")
	if len(evs) != 1 {
		t.Fatalf("%d events, want one", len(evs))
	}
	e := evs[0]
	if e.Type != ModelMismatch || e.AccountID != a.ID || e.KeyID != "k1" || e.Data["upstream"] != "beta" ||
		e.Data["requested_model"] != "gpt-4o-mini" || e.Data["priced_model"] != "o1-pro" {
		t.Fatalf("event %+v", e)
	}
	if evs := fire("gpt-4o-mini", "o1-pro"); len(evs) != 0 {
		t.Fatalf("%d events within the window", len(evs))
	}
	if evs := fire("gpt-4o-mini", "gpt-4o"); len(evs) != 1 {
		t.Fatalf("%d events for another model, want one", len(evs))
	}
	m.FastForward(ModelMismatchEvery)
	if evs := fire("gpt-4o-mini", "o1-pro"); len(evs) != 1 {
		t.Fatalf("%d events after the window, want one", len(evs))
	}
}
