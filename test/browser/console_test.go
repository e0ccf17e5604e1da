package browser

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/chromedp"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/console"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

const (
	adminToken = "adm_browser_test_0123456789abcdef"
	xssModel   = `<img src=x onerror=alert(1)>`
	alphaModel = "claude-sonnet-4-5"
	betaModel  = "gpt-4o-mini"
)

func alphaRequest(s *launch.Stack, key string) (*http.Response, []byte) {
	return s.Do("POST", "/alpha/v1/messages",
		map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"},
		[]byte(`{"model":"`+alphaModel+`","max_tokens":64,"messages":[{"role":"user","content":"Hello there"}]}`))
}

func betaRequest(s *launch.Stack, key, model string) (*http.Response, []byte) {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 64,
		"messages": []map[string]string{{"role": "user", "content": "Hello there"}}})
	return s.Do("POST", "/beta/v1/chat/completions",
		map[string]string{"Authorization": "Bearer " + key, "content-type": "application/json"}, body)
}

// usd is how the pages show an amount of /v1/usage: exact to the nano-USD.
func usd(v any) string {
	f, _ := v.(float64)
	return pricing.FormatUSD(int64(math.Round(f * 1e9)))
}

// count is how the customer page shows a count (toLocaleString en-US).
func count(v any) string {
	f, _ := v.(float64)
	s := strconv.FormatInt(int64(f), 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestConsoles drives both consoles in one browser against one gateway:
// the customer page, another account's view of it, and the operator console.
func TestConsoles(t *testing.T) {
	s := launchtest.Start(t, launch.Options{
		SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken},
		// Suspension takes effect on the next request.
		SidecarArgs: []string{"--key-cache-ttl", "1ns"},
		Configure: func(c *config.Config) {
			for i := range c.Upstreams {
				if c.Upstreams[i].Name == "beta" {
					// Any model name a client sends is served and
					// recorded: the pages must show it as text.
					one := 1.0
					c.Upstreams[i].Models.UnknownModel = config.UnknownFallback
					c.Upstreams[i].Models.Fallback = &config.Price{Input: &one, Output: &one, MaxOutput: 4096}
				}
			}
		},
	})
	a := s.NewAccount(20, account.Limits{DailyNanoUSD: 15_000_000_000, RPM: 600, WindowMinutes: 1})
	b := s.NewAccount(7, account.Limits{})
	for _, send := range []func() (*http.Response, []byte){
		func() (*http.Response, []byte) { return alphaRequest(s, a.Key) },
		func() (*http.Response, []byte) { return alphaRequest(s, a.Key) },
		func() (*http.Response, []byte) { return betaRequest(s, a.Key, betaModel) },
		func() (*http.Response, []byte) { return betaRequest(s, a.Key, xssModel) },
		func() (*http.Response, []byte) { return betaRequest(s, b.Key, betaModel) },
	} {
		if resp, body := send(); resp.StatusCode != 200 {
			t.Fatalf("model request: %d %s", resp.StatusCode, body)
		}
	}
	s.WaitSettled()

	br := newBrowser(t)
	var tabs []*tab
	t.Run("customer", func(t *testing.T) { tabs = append(tabs, customerPage(t, s, br, a)) })
	t.Run("another account", func(t *testing.T) { tabs = append(tabs, otherAccount(t, s, br, a, b)) })
	var opsSecret string
	t.Run("operator", func(t *testing.T) {
		tb, secret := operatorConsole(t, s, br)
		tabs, opsSecret = append(tabs, tb), secret
	})

	// No credential ever went into a URL the browser requested, Envoy's
	// access log or the sidecar's log (at debug level).
	secrets := []string{a.Key, a.ReadOnly, b.Key, b.ReadOnly, adminToken, opsSecret}
	for _, tb := range tabs {
		urls := tb.requested()
		if len(urls) == 0 {
			t.Error("a tab recorded no requests")
		}
		noSecretsIn(t, "a URL the browser requested", urls, secrets...)
	}
	// Envoy writes its access log in buffered flushes (every 10 s by
	// default): wait for the console's requests to be in it.
	var access []byte
	eventually.That(t, 30*time.Second, "Envoy's access log to hold the console's requests", func() (bool, string) {
		var err error
		access, err = os.ReadFile(filepath.Join(s.Dir, "envoy-access.log"))
		return err == nil && bytes.Contains(access, []byte("/console/")) && bytes.Contains(access, []byte(console.PathDaily)),
			fmt.Sprintf("%d bytes, err %v", len(access), err)
	})
	noSecretsIn(t, "Envoy's access log", []string{string(access)}, secrets...)
	noSecretsIn(t, "Envoy's log", []string{s.Envoy.Log()}, secrets...)
	noSecretsIn(t, "the sidecar's log", []string{s.Sidecar.Log()}, secrets...)
}

func customerPage(t *testing.T, s *launch.Stack, br context.Context, a launch.Account) *tab {
	tb := newTab(t, br)
	tb.do(chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible("#token"))
	tb.screenshots("customer-signin")
	tb.do(chromedp.SendKeys("#token", a.ReadOnly), chromedp.Click(`#signin button[type="submit"]`), chromedp.WaitVisible(`body[data-loaded="true"]`))

	// The credential stays in this tab's session storage: not in the
	// address, not in a cookie, not in local storage.
	if got := eval[string](tb, `sessionStorage.getItem("gateway.console.credential")`); got != a.ReadOnly {
		t.Errorf("session storage holds %q", got)
	}
	if n := eval[int](tb, "localStorage.length"); n != 0 {
		t.Errorf("local storage has %d items", n)
	}
	if c := eval[string](tb, "document.cookie"); c != "" {
		t.Errorf("cookies: %q", c)
	}

	// The figures are /v1/usage's, for each period.
	usage := map[string]map[string]any{}
	for _, p := range []string{"day", "month", "total"} {
		usage[p] = s.Usage(a.ReadOnly, p)
	}
	if got, want := tb.text("#balance"), "$"+usd(usage["day"]["balance_usd"]); got != want {
		t.Errorf("balance %s, want %s", got, want)
	}
	for _, p := range []string{"day", "month", "total"} {
		u := usage[p]["usage"].(map[string]any)
		if got, want := tb.text("#spend-"+p), "$"+usd(u["cost_usd"]); got != want || u["cost_usd"].(float64) == 0 {
			t.Errorf("%s spend %s, want %s", p, got, want)
		}
		if got, want := tb.text("#requests-"+p), count(u["requests"]); got != want {
			t.Errorf("%s requests %s, want %s", p, got, want)
		}
		eval[bool](tb, `(() => { const s = document.getElementById("period"); s.value = "`+p+`"; s.dispatchEvent(new Event("change")); return true })()`)
		rows := tb.rows("#by-model")
		models := usage[p]["by_model"].([]any)
		if len(rows) != len(models) || len(models) != 3 {
			t.Fatalf("%s by model: %q, want %v", p, rows, models)
		}
		for i, m := range models {
			m := m.(map[string]any)
			want := []string{m["model"].(string), count(m["requests"]), count(m["input_tokens"]), count(m["output_tokens"]),
				count(m["cache_read_tokens"]), count(m["cache_write_5m_tokens"].(float64) + m["cache_write_1h_tokens"].(float64)), usd(m["cost_usd"])}
			if strings.Join(rows[i], "|") != strings.Join(want, "|") {
				t.Errorf("%s by model row %d: %q, want %q", p, i, rows[i], want)
			}
		}
		// Spend by project: the default project holds all of it here.
		rows = tb.rows("#by-project")
		projects := usage[p]["projects"].([]any)
		if len(rows) != len(projects) || len(projects) != 1 {
			t.Fatalf("%s by project: %q, want %v", p, rows, projects)
		}
		pr := projects[0].(map[string]any)
		if want := []string{"default", count(pr["requests"]), usd(pr["cost_usd"]), "no limit", "no limit", "no limit"}; strings.Join(rows[0], "|") != strings.Join(want, "|") ||
			pr["cost_usd"] != usage[p]["usage"].(map[string]any)["cost_usd"] {
			t.Errorf("%s by project row %q, want %q (the account's spend)", p, rows[0], want)
		}
	}
	// The limits: the daily limit with what is used of it.
	limits := tb.text("#limits")
	lim := usage["day"]["limits"].(map[string]any)
	for _, want := range []string{"Daily (USD)", "$" + usd(lim["daily_usd"]), "$" + usd(lim["daily_used_usd"]), "Requests per minute", "600"} {
		if !strings.Contains(limits, want) {
			t.Errorf("limits %q lack %q", limits, want)
		}
	}

	// The chart has one point per day of the series.
	var daily console.Daily
	resp, body := s.Do("GET", console.PathDaily, map[string]string{"Authorization": "Bearer " + a.ReadOnly}, nil)
	if resp.StatusCode != 200 || json.Unmarshal(body, &daily) != nil {
		t.Fatalf("daily: %d %s", resp.StatusCode, body)
	}
	if len(daily.Days) != store.MaxSeriesDays {
		t.Fatalf("series of %d days", len(daily.Days))
	}
	chart := eval[map[string]string](tb, `Object.assign({}, document.getElementById("chart").dataset)`)
	if chart["points"] != strconv.Itoa(len(daily.Days)) || chart["first"] != daily.Days[0].Date || chart["last"] != daily.Days[len(daily.Days)-1].Date {
		t.Errorf("chart %v, want %d points from %s to %s", chart, len(daily.Days), daily.Days[0].Date, daily.Days[len(daily.Days)-1].Date)
	}
	if n := eval[int](tb, `document.querySelectorAll("#chart canvas").length`); n == 0 {
		t.Error("the chart drew nothing")
	}

	// Recent requests, newest first; the hostile model name is text.
	ledger := tb.rows("#ledger")
	if len(ledger) != 4 {
		t.Fatalf("ledger rows: %q", ledger)
	}
	if ledger[0][2] != xssModel || ledger[0][1] != "test" || ledger[0][8] != "200" {
		t.Errorf("newest request: %q", ledger[0])
	}
	if n := eval[int](tb, `document.querySelectorAll("main img").length`); n != 0 {
		t.Errorf("the model name became %d img elements", n)
	}
	tb.screenshots("customer")

	// The month's CSV, downloaded with the button, is gatewayctl's export
	// of that month.
	month := time.Now().UTC().Format("2006-01")
	got := downloadCSV(t, tb, month)
	checkCSV(t, s, a, month, got)
	tb.clean()
	return tb
}

// downloadCSV clicks the page's download button and returns the file.
func downloadCSV(t *testing.T, tb *tab, month string) []byte {
	t.Helper()
	dir := t.TempDir()
	if _, err := chromedp.CallBrowser(tb.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: new(true),
	}); err != nil {
		t.Fatal(err)
	}
	events := chromedp.BrowserEvents(tb.ctx, browser.DownloadProgress)
	tb.do(chromedp.SetValue("#csv-month", month), chromedp.Click(`#csv-form button[type="submit"]`))
	for ev, err := range events {
		if err != nil {
			t.Fatalf("waiting for the download: %v", err)
		}
		switch ev.State {
		case browser.DownloadProgressStateCompleted:
			b, err := os.ReadFile(filepath.Join(dir, ev.GUID))
			if err != nil {
				t.Fatal(err)
			}
			return b
		case browser.DownloadProgressStateCanceled:
			t.Fatal("the download was cancelled")
		}
	}
	t.Fatal(errNoDownload)
	return nil
}

// checkCSV compares the page's CSV with `gatewayctl ledger export` of the
// same account, restricted to the entries recorded in the month (their
// ids' time), field by field.
func checkCSV(t *testing.T, s *launch.Stack, a launch.Account, month string, got []byte) {
	t.Helper()
	bin, err := launch.BuildBinary("gatewayctl")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "ledger", "export", "--no-commit", a.ID)
	cmd.Env = append(os.Environ(), "GATEWAY_ADMIN_ADDR="+s.Config.Listeners.Admin, "GATEWAY_ADMIN_TOKEN="+adminToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gatewayctl ledger export: %v %s", err, stderr.String())
	}
	from, _ := time.Parse("2006-01", month)
	to := from.AddDate(0, 1, 0)
	var want []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		var e map[string]any
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("export line %s: %v", line, err)
		}
		msStr, _, _ := strings.Cut(e["id"].(string), "-")
		ms, _ := strconv.ParseInt(msStr, 10, 64)
		if at := time.UnixMilli(ms); !at.Before(from) && at.Before(to) {
			want = append(want, e)
		}
	}
	rows, err := csv.NewReader(bytes.NewReader(got)).ReadAll()
	if err != nil {
		t.Fatalf("the CSV does not parse: %v\n%s", err, got)
	}
	if len(rows)-1 != len(want) || len(want) != 4 {
		t.Fatalf("the CSV has %d entries, the export %d", len(rows)-1, len(want))
	}
	header := rows[0]
	for i, e := range want {
		row := rows[i+1]
		for j, col := range header {
			exp := exportField(e, col)
			if col == "start_time" || col == "end_time" {
				g, err1 := time.Parse(time.RFC3339Nano, row[j])
				w, err2 := time.Parse(time.RFC3339Nano, exp)
				if err1 != nil || err2 != nil || !g.Equal(w) {
					t.Errorf("entry %d %s: %q, export %q", i, col, row[j], exp)
				}
				continue
			}
			if col == "key_label" {
				exp = "test" // the label NewAccount gives the key
			}
			if row[j] != exp {
				t.Errorf("entry %d %s: %q, export %q", i, col, row[j], exp)
			}
		}
	}
}

// exportField is a CSV column's value as the JSON export has it.
func exportField(e map[string]any, col string) string {
	var v any
	switch {
	case col == "cost_usd":
		n, _ := strconv.ParseInt(exportField(e, "cost_nano_usd"), 10, 64)
		return pricing.FormatUSD(n)
	case strings.HasPrefix(col, "price_"):
		v = e["prices_nano_usd_per_million"].(map[string]any)[strings.TrimPrefix(col, "price_")]
	case e["usage"].(map[string]any)[col] != nil:
		v = e["usage"].(map[string]any)[col]
	default:
		v = e[col]
	}
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case float64:
		return strconv.FormatInt(int64(v), 10)
	}
	return "?"
}

// A model key of another account signs in and sees its own account only.
func otherAccount(t *testing.T, s *launch.Stack, br context.Context, a, b launch.Account) *tab {
	tb := newTab(t, br)
	tb.do(chromedp.Navigate(s.URL+"/console/"), chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", b.Key), chromedp.Click(`#signin button[type="submit"]`), chromedp.WaitVisible(`body[data-loaded="true"]`))
	ub := s.Usage(b.Key, "total")
	if got, want := tb.text("#balance"), "$"+usd(ub["balance_usd"]); got != want {
		t.Errorf("balance %s, want %s", got, want)
	}
	if got, want := tb.text("#spend-total"), "$"+usd(ub["usage"].(map[string]any)["cost_usd"]); got != want {
		t.Errorf("total spend %s, want %s", got, want)
	}
	if rows := tb.rows("#ledger"); len(rows) != 1 || rows[0][2] != betaModel {
		t.Errorf("ledger rows: %q", rows)
	}
	page := eval[string](tb, "document.body.innerText")
	ua := s.Usage(a.ReadOnly, "total")
	for _, other := range []string{xssModel, alphaModel, a.ID, usd(ua["balance_usd"])} {
		if strings.Contains(page, other) {
			t.Errorf("the page of account B shows %q of account A", other)
		}
	}
	tb.clean()
	return tb
}

// An operator signs in, creates an account and a key, tops up and suspends
// the account; the key is then refused. Every action is audited.
func operatorConsole(t *testing.T, s *launch.Stack, br context.Context) (*tab, string) {
	base := "http://" + s.Config.Listeners.Console
	tb := newTab(t, br)
	tb.do(chromedp.Navigate(base+"/"), chromedp.WaitVisible("#token"))
	if loc := tb.location(); loc != base+"/signin" {
		t.Fatalf("signed out, / leads to %s", loc)
	}
	tb.screenshots("operator-signin")
	tb.do(chromedp.SendKeys("#token", adminToken), chromedp.Click(`main button[type="submit"]`), chromedp.WaitVisible("#accounts"))
	cookies := eval[string](tb, "document.cookie")
	if cookies != "" {
		t.Errorf("the session cookie is readable by scripts: %q", cookies)
	}
	tb.screenshots("operator-accounts")

	name := `ops <b>bold</b>`
	tb.do(chromedp.SendKeys("#name", name), chromedp.Click(`#create-account button[type="submit"]`), chromedp.WaitVisible("#topup"))
	accountURL := tb.location()
	id := strings.TrimPrefix(accountURL, base+"/accounts/")
	if h := tb.text("main h2"); !strings.Contains(h, name) {
		t.Errorf("the heading %q lacks the account name as text", h)
	}
	tb.do(chromedp.SendKeys("#key_label", "ops key"), chromedp.Click(`#create-key button[type="submit"]`), chromedp.WaitVisible("#secret"))
	secret := tb.text("#secret")
	if !strings.HasPrefix(secret, "cr_") {
		t.Fatalf("secret %q", secret)
	}
	tb.screenshots("operator-secret")
	tb.do(chromedp.Navigate(accountURL), chromedp.WaitVisible("#topup"),
		chromedp.SendKeys("#amount_usd", "3"), chromedp.Click(`#topup button[type="submit"]`), chromedp.WaitVisible(".notice"))
	if got := tb.text("#balance"); got != "$3.00" {
		t.Errorf("balance after the top-up: %s", got)
	}
	if resp, body := alphaRequest(s, secret); resp.StatusCode != 200 {
		t.Fatalf("the new key: %d %s", resp.StatusCode, body)
	}
	tb.do(chromedp.SendKeys("#reason", "test suspension"), chromedp.Click(`#suspension button[type="submit"]`), chromedp.WaitVisible("#suspended"))
	if resp, body := alphaRequest(s, secret); resp.StatusCode != 403 {
		t.Fatalf("the key of a suspended account: %d %s", resp.StatusCode, body)
	}

	// An action posted without the CSRF token is refused, cookie or not.
	// (From a tab of its own, whose refused request is expected.)
	forger := newTab(t, br)
	forger.do(chromedp.Navigate(base+"/models"), chromedp.WaitVisible("#models"))
	status := eval[int](forger, `fetch("/accounts/`+id+`/resume", {method: "POST", body: new URLSearchParams({reason: "forged"})}).then(r => r.status)`)
	if status != http.StatusForbidden {
		t.Errorf("an action without the CSRF token: %d", status)
	}
	if acct, err := s.Store.Account(context.Background(), id); err != nil || !acct.Suspended {
		t.Fatalf("the refused action changed the account: %+v %v", acct, err)
	}

	// Every action is in the audit trail, by the console's operator, and on
	// the account's page.
	audit, _, err := s.Store.RecentAudit(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range audit {
		if e.AccountID == id {
			if e.Actor != "console:admin" {
				t.Errorf("audit actor %q", e.Actor)
			}
			actions = append(actions, e.Action)
		}
	}
	if strings.Join(actions, ",") != "account.suspend,account.topup,key.create,account.create" {
		t.Errorf("audit trail of the account: %v", actions)
	}
	tb.do(chromedp.Navigate(accountURL), chromedp.WaitVisible("#audit"))
	auditRows := tb.rows("#audit")
	if len(auditRows) != 4 || auditRows[0][2] != "account.suspend" {
		t.Errorf("audit table: %q", auditRows)
	}
	tb.screenshots("operator-account")
	tb.do(chromedp.Navigate(base+"/models"), chromedp.WaitVisible("#models"))
	if rows := tb.rows("#models"); len(rows) < 10 {
		t.Errorf("models: %d rows", len(rows))
	}
	tb.screenshots("operator-models")
	tb.clean()
	return tb, secret
}
