package control

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/testclock"
	"github.com/modelgateway/gateway/internal/usage"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/store"
)

func setup(t *testing.T) (*Handler, *store.Store, *testclock.Clock, string, string) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	clk := testclock.New(time.Date(2026, 1, 31, 23, 59, 58, 0, time.UTC))
	st := store.New(rdb, store.Options{Now: clk.Now})
	ctx := context.Background()
	acct, err := st.CreateAccount(ctx, "a", 5_000_000_000, account.Limits{DailyNanoUSD: 2_000_000_000, RPM: 60, WindowMinutes: 1})
	if err != nil {
		t.Fatal(err)
	}
	ro, _, err := st.CreateKey(ctx, acct.ID, account.ReadOnlyToken, account.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Region: "eu", Upstreams: []string{"alpha", "beta"}, Store: st, Keys: auth.NewCache(st, time.Nanosecond), Now: clk.Now})
	return h, st, clk, acct.ID, ro
}

func settle(t *testing.T, st *store.Store, acct, id string, cost int64) {
	t.Helper()
	ctx := context.Background()
	if d, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: acct, KeyID: "k", Priced: "m", Hold: cost}); err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %+v %v", d, err)
	}
	if _, err := st.Settle(ctx, account.Settlement{RequestID: id, AccountID: acct, KeyID: "k", Priced: "m", Usage: usage.Usage{Input: 10, Output: 5}, Cost: cost, Status: 200}); err != nil {
		t.Fatal(err)
	}
}

func getUsage(t *testing.T, h *Handler, token, period string) Usage {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/v1/usage?period="+period, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("usage: %d %s", rec.Code, rec.Body)
	}
	var u Usage
	if err := json.Unmarshal(rec.Body.Bytes(), &u); err != nil {
		t.Fatal(err)
	}
	return u
}

// A request just before UTC midnight at a month end counts in that day and
// month; one just after counts in the new day and month; total has both.
func TestPeriodsAcrossMidnightAndMonthEnd(t *testing.T) {
	h, st, clk, acct, ro := setup(t)
	settle(t, st, acct, "before", 300_000_000) // $0.30 at 23:59:58 on Jan 31
	if u := getUsage(t, h, ro, "day"); u.Usage.Requests != 1 || u.Usage.CostUSD != 0.3 || u.Limits.DailyUsedUSD != 0.3 {
		t.Fatalf("day before midnight: %+v", u)
	}
	clk.Set(time.Date(2026, 2, 1, 0, 0, 1, 0, time.UTC))
	settle(t, st, acct, "after", 200_000_000) // $0.20 at 00:00:01 on Feb 1
	day, month, total := getUsage(t, h, ro, "day"), getUsage(t, h, ro, "month"), getUsage(t, h, ro, "total")
	if day.Usage.Requests != 1 || day.Usage.CostUSD != 0.2 || day.Limits.DailyUsedUSD != 0.2 {
		t.Fatalf("day after midnight: %+v", day)
	}
	if month.Usage.Requests != 1 || month.Usage.CostUSD != 0.2 {
		t.Fatalf("new month: %+v", month)
	}
	if total.Usage.Requests != 2 || total.Usage.CostUSD != 0.5 || total.BalanceUSD != 4.5 {
		t.Fatalf("total: %+v", total)
	}
	if total.Limits.DailyUSD != 2 || total.Limits.RPM != 60 || total.Limits.WindowMinutes != 1 || total.Currency != "USD" {
		t.Fatalf("limits: %+v", total)
	}
	if len(total.ByModel) != 1 || total.ByModel[0].Requests != 2 || total.ByModel[0].InputTokens != 20 {
		t.Fatalf("by_model: %+v", total.ByModel)
	}
}

// USD values are the integer ledger divided once: sums of many small costs
// show exactly, with no float drift.
func TestUSDDoesNotDrift(t *testing.T) {
	h, st, _, acct, ro := setup(t)
	for i := 0; i < 50; i++ { // below the 60 rpm limit
		settle(t, st, acct, "r"+string(rune('a'+i%26))+string(rune('a'+i/26)), 1_234_567) // $0.001234567
	}
	u := getUsage(t, h, ro, "total")
	if u.Usage.CostUSD != 0.06172835 || u.BalanceUSD != 4.93827165 {
		t.Fatalf("cost %v balance %v; want exactly 0.06172835 and 4.93827165", u.Usage.CostUSD, u.BalanceUSD)
	}
}

type downStore struct{ UsageReader }

func (downStore) Ping(context.Context) error { return errors.New("down") }

func TestHealth(t *testing.T) {
	h, st, clk, _, _ := setup(t)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/health", nil))
	var rep Health
	json.Unmarshal(rec.Body.Bytes(), &rep)
	if rec.Code != 200 || rep.Status != "ok" || rep.Region != "eu" || len(rep.Upstreams) != 2 || rep.TS != "2026-01-31T23:59:58Z" {
		t.Fatalf("%d %+v", rec.Code, rep)
	}
	down := New(Options{Region: "eu", Store: downStore{st}, Keys: auth.NewCache(st, 0), Now: clk.Now})
	rec = httptest.NewRecorder()
	down.ServeHTTP(rec, httptest.NewRequest("GET", "/health", nil))
	json.Unmarshal(rec.Body.Bytes(), &rep)
	if rec.Code != 503 || rep.Status == "ok" || rep.TS == "" {
		t.Fatalf("store down: %d %+v", rec.Code, rep)
	}
	notServing := New(Options{Store: st, Keys: auth.NewCache(st, 0), Serving: func() bool { return false }})
	rec = httptest.NewRecorder()
	notServing.ServeHTTP(rec, httptest.NewRequest("GET", "/health", nil))
	if rec.Code != 503 {
		t.Fatalf("processor not serving: %d", rec.Code)
	}
}

// The store is pinged at most once per probe interval however often
// monitoring polls.
func TestHealthProbeIsCached(t *testing.T) {
	_, st, clk, _, _ := setup(t)
	cs := &countingStore{UsageReader: st}
	h := New(Options{Store: cs, Keys: auth.NewCache(st, 0), Now: clk.Now})
	for i := 0; i < 50; i++ {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
	}
	if cs.pings != 1 {
		t.Fatalf("%d pings for 50 polls within one interval", cs.pings)
	}
	clk.Advance(time.Second)
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/health", nil))
	if cs.pings != 2 {
		t.Fatalf("no new ping after the interval: %d", cs.pings)
	}
}

type countingStore struct {
	UsageReader
	pings int
}

func (c *countingStore) Ping(ctx context.Context) error { c.pings++; return c.UsageReader.Ping(ctx) }

var _ http.Handler = (*Handler)(nil)

// hungStore accepts pings and never answers them until the context ends.
type hungStore struct{ UsageReader }

func (hungStore) Ping(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

type fixedEndpoints map[string]string

func (f fixedEndpoints) Endpoints() map[string]string { return f }

func getHealth(t *testing.T, h *Handler, path string) (int, Health, http.Header) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	var rep Health
	if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
		t.Fatalf("%s: %v: %s", path, err, rec.Body)
	}
	return rec.Code, rep, rec.Header()
}

// A store that accepts and never answers costs /health under a second, and
// /health says so; /livez stays 200 and /readyz goes 503.
func TestHealthWithHungStore(t *testing.T) {
	_, st, _, _, _ := setup(t)
	h := New(Options{Upstreams: []string{"alpha"}, Store: hungStore{st}, Keys: auth.NewCache(st, 0)})
	start := time.Now()
	code, rep, hdr := getHealth(t, h, "/health")
	if took := time.Since(start); took > time.Second {
		t.Fatalf("/health took %v with a hung store", took)
	}
	if code != 503 || rep.Status != StatusUnavailable || len(rep.Problems) != 1 || rep.Problems[0] != "store: not answering" || hdr.Get("Retry-After") == "" {
		t.Fatalf("hung store: %d %+v %v", code, rep, hdr)
	}
	if code, _, _ := getHealth(t, h, "/livez"); code != 200 {
		t.Fatalf("/livez with a hung store: %d", code)
	}
	if code, rep, _ := getHealth(t, h, "/readyz"); code != 503 || len(rep.Problems) != 1 {
		t.Fatalf("/readyz with a hung store: %d %+v", code, rep)
	}
}

// An upstream with no usable endpoint makes /health 503 and is named; one
// served by its reserve is fine; readiness ignores upstreams.
func TestHealthNamesUpstreamWithoutEndpoint(t *testing.T) {
	_, st, _, _, _ := setup(t)
	eps := fixedEndpoints{"alpha": "none", "beta": "reserve"}
	h := New(Options{Upstreams: []string{"alpha", "beta"}, Store: st, Keys: auth.NewCache(st, 0), Endpoints: eps})
	code, rep, _ := getHealth(t, h, "/health")
	if code != 503 || rep.Status == StatusOK || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "upstream alpha") || rep.Endpoints["beta"] != "reserve" {
		t.Fatalf("alpha without endpoint: %d %+v", code, rep)
	}
	if code, _, _ := getHealth(t, h, "/readyz"); code != 200 {
		t.Fatalf("/readyz: %d", code)
	}
	eps["alpha"] = "reserve"
	if code, rep, _ := getHealth(t, h, "/health"); code != 200 || rep.Status != StatusOK {
		t.Fatalf("both on the reserve: %d %+v", code, rep)
	}
}

// Exactly one period with a listed value, or none; anything else is 400, never
// a silent default.
func TestUsageQueryIsUnambiguous(t *testing.T) {
	h, st, _, acct, ro := setup(t)
	for query, want := range map[string]int{
		"":                           200,
		"?period=day":                200,
		"?period=month":              200,
		"?period=total":              200,
		"?period=month;":             400,
		"?period=month;period=day":   400,
		"?period=month&period=day":   400,
		"?period=day&period=day":     400,
		"?period=":                   400,
		"?period=week":               400,
		"?period=day&other=1":        400,
		"?period=%64ay":              200, // "day", percent-encoded
		"?period=Day":                400,
		"?period=day%00":             400,
		"?period=" + string(rune(0)): 400,
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/usage", nil)
		req.URL.RawQuery = query[min(1, len(query)):]
		req.Header.Set("Authorization", "Bearer "+ro)
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("%q: %d %s, want %d", query, rec.Code, rec.Body, want)
		}
	}
	// A suspended account still reads its usage.
	if err := st.SetSuspended(context.Background(), acct, true); err != nil {
		t.Fatal(err)
	}
	getUsage(t, h, ro, "day")
}

// Two credential headers are refused, whatever their values.
func TestUsageRefusesRepeatedCredentials(t *testing.T) {
	h, _, _, _, ro := setup(t)
	for name, set := range map[string]func(http.Header){
		"two x-api-key":          func(h http.Header) { h.Add("X-Api-Key", ro); h.Add("X-Api-Key", ro) },
		"two Authorization":      func(h http.Header) { h.Add("Authorization", "Bearer "+ro); h.Add("Authorization", "Bearer "+ro) },
		"joined with a comma":    func(h http.Header) { h.Set("X-Api-Key", ro+", "+ro) },
		"x-api-key and a bearer": func(h http.Header) { h.Set("X-Api-Key", ro); h.Set("Authorization", "Bearer ro_someoneelse123") },
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/v1/usage", nil)
		set(req.Header)
		h.ServeHTTP(rec, req)
		if rec.Code != 401 {
			t.Errorf("%s: %d %s, want 401", name, rec.Code, rec.Body)
		}
	}
}

// Before the endpoints' state is known (the sidecar has not read Envoy's
// yet), neither /health nor /readyz says ready: requests would get 503.
func TestNotReadyBeforeEndpointsAreKnown(t *testing.T) {
	_, st, _, _, _ := setup(t)
	eps := fixedEndpoints{"alpha": "unknown", "beta": "primary"}
	h := New(Options{Upstreams: []string{"alpha", "beta"}, Store: st, Keys: auth.NewCache(st, 0), Endpoints: eps})
	for _, path := range []string{"/health", "/readyz"} {
		if code, rep, _ := getHealth(t, h, path); code != 503 || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "not yet known") {
			t.Fatalf("%s with alpha unknown: %d %+v", path, code, rep)
		}
	}
	eps["alpha"] = "primary"
	for _, path := range []string{"/health", "/readyz"} {
		if code, _, _ := getHealth(t, h, path); code != 200 {
			t.Fatalf("%s once known: %d", path, code)
		}
	}
}

type explainedEndpoints struct {
	fixedEndpoints
	problems map[string]string
}

func (e explainedEndpoints) Problem(u string) string { return e.problems[u] }

// An upstream whose endpoint is unknown for a known reason (no Envoy
// cluster of its name) is named with that reason, in one line, by both
// /health and /readyz.
func TestHealthNamesTheMissingCluster(t *testing.T) {
	_, st, _, _, _ := setup(t)
	cause := "no Envoy cluster for upstream alpha: expected cluster named alpha, or set upstreams[].envoy_cluster"
	eps := explainedEndpoints{fixedEndpoints{"alpha": "unknown", "beta": "primary"}, map[string]string{"alpha": cause}}
	h := New(Options{Upstreams: []string{"alpha", "beta"}, Store: st, Keys: auth.NewCache(st, 0), Endpoints: eps})
	for _, path := range []string{"/health", "/readyz"} {
		if code, rep, _ := getHealth(t, h, path); code != 503 || len(rep.Problems) != 1 || rep.Problems[0] != cause {
			t.Fatalf("%s with alpha's cluster missing: %d %+v", path, code, rep)
		}
	}
}

// Under the reduced contract the sidecar may have no Envoy admin to read
// (a pod of its own behind a control plane's Envoy): an unknown endpoint
// does not keep it from being ready or healthy, since replies name their
// endpoint; a known outage still shows on /health.
func TestEndpointsLearnedFromReplies(t *testing.T) {
	_, st, _, _, _ := setup(t)
	cause := "Envoy's admin interface at http://127.0.0.1:9901 (listeners.envoy_admin) is not answering"
	eps := explainedEndpoints{fixedEndpoints{"alpha": "unknown", "beta": "none"}, map[string]string{"alpha": cause}}
	h := New(Options{Upstreams: []string{"alpha", "beta"}, Store: st, Keys: auth.NewCache(st, 0), Endpoints: eps, EndpointsLearned: true})
	if code, rep, _ := getHealth(t, h, "/readyz"); code != 200 || len(rep.Problems) != 0 {
		t.Fatalf("/readyz with endpoints learned from replies: %d %+v", code, rep)
	}
	if code, rep, _ := getHealth(t, h, "/health"); code != 503 || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "upstream beta: no usable endpoint") {
		t.Fatalf("/health: %d %+v; want only beta's known outage", code, rep)
	}
}

// Every usage kind has its own field in the usage JSON (GET /v1/usage and
// the console's): a kind added to internal/usage fails here until
// Quantities carries it.
func TestQuantitiesCarryEveryKind(t *testing.T) {
	var u usage.Usage
	for i, k := range usage.Kinds {
		k.Set(&u, int64(i+1))
	}
	b, err := json.Marshal(QuantitiesOf(u))
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]int64
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	for _, v := range fields {
		seen[v] = true
	}
	for i, k := range usage.Kinds {
		if !seen[int64(i+1)] {
			t.Errorf("kind %s (%d) is in no field of %s", k.Name, i+1, b)
		}
	}
	if len(fields) != len(usage.Kinds) {
		t.Errorf("%d fields for %d kinds: %s", len(fields), len(usage.Kinds), b)
	}
}
