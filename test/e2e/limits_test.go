package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// burstResult is what one request of a burst saw.
type burstResult struct {
	status int
	body   string
}

// burst sends n streaming requests at once, alternating between the pairs,
// and returns each one's status once every request has been decided. The
// fake vendors hold admitted streams open after their first event, so every
// admitted request is still in flight (holding its hold, its slot and its
// token bound) when the last is decided; end cuts them.
func burst(t *testing.T, pairs []*launch.Stack, n int, key string, body []byte) (res []burstResult, end func()) {
	t.Helper()
	return burstOf(t, pairs, n, func(int) string { return key }, body)
}

// burstOf is burst with request i sent with key(i).
func burstOf(t *testing.T, pairs []*launch.Stack, n int, key func(i int) string, body []byte) (res []burstResult, end func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	res = make([]burstResult, n)
	var decided, done sync.WaitGroup
	for i := range n {
		decided.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			req, _ := http.NewRequestWithContext(ctx, "POST", pairs[i%len(pairs)].URL+alphaPath, bytes.NewReader(body))
			for k, v := range messagesHeaders(key(i)) {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				res[i].status = -1
				decided.Done()
				return
			}
			defer resp.Body.Close()
			res[i].status = resp.StatusCode
			if resp.StatusCode != 200 {
				b, _ := io.ReadAll(resp.Body)
				res[i].body = string(b)
				decided.Done()
				return
			}
			// The first event arrived: the vendor is answering.
			bufio.NewReader(resp.Body).ReadString('\n')
			decided.Done()
			io.Copy(io.Discard, resp.Body) // until end cuts it
		}()
	}
	decided.Wait()
	return res, func() {
		cancel()
		done.Wait()
		client.CloseIdleConnections()
	}
}

// peakInFlight is the most requests the pairs' fake vendors served at once
// since their reset, added up (at least the true peak across both).
func peakInFlight(pairs []*launch.Stack) int {
	n := 0
	for _, p := range pairs {
		n += p.Primary.Stats()["messages_peak_in_flight"]
	}
	return n
}

// Each kind of limit at each level holds across two sidecars sharing one
// Redis: of concurrent requests whose holds (slots, token bounds) together
// exceed what is left, exactly the affordable number is admitted, the
// others are refused with the status and message of that limit, the fake
// vendor never has more in flight than a concurrency limit allows, and
// balance change = ledger = counters afterwards. With Redis stopped every
// limited request fails closed with 503.
func TestLimitsConservationTwoSidecars(t *testing.T) {
	rs := redistest.NewServer(t)
	a := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr})
	pairs := []*launch.Stack{a, b}
	body := messagesBody(true, "")
	hold := priceOf(t, a, "alpha", alphaModel).Hold(int64(len(body)), 256)
	bound := int64(len(body)) + 256 // every body byte a token, plus max_tokens
	ctx := context.Background()
	// A spend refusal's message: nothing settled while the admitted
	// streams hold their slots, all of them held.
	spend := func(limit string, of, held int64) string {
		return fmt.Sprintf("%s: $0.00 of $%s used, $%s held by requests in flight; this request could cost up to $%s",
			limit, pricing.FormatUSD(of), pricing.FormatUSD(held), pricing.FormatUSD(hold))
	}

	cases := []struct {
		name     string
		balance  int64 // nano-USD; 0: 100 USD
		acct     account.Limits
		key      account.Limits
		admitted int
		status   int
		message  string
		series   string // the refusals' gateway_limit_refusals_total series
	}{
		{name: "key concurrency", key: account.Limits{Concurrency: 3}, admitted: 3, status: 429, message: "concurrent request limit reached for this key", series: `gateway_limit_refusals_total{kind="concurrency",level="key"}`},
		{name: "account concurrency", acct: account.Limits{Concurrency: 2}, admitted: 2, status: 429, message: "concurrent request limit reached for this account", series: `gateway_limit_refusals_total{kind="concurrency",level="account"}`},
		{name: "key tokens per minute", key: account.Limits{TPM: 3*bound + bound/2}, admitted: 3, status: 429, message: fmt.Sprintf("tokens-per-minute limit for this key: 0 of %d tokens used in the last 60 s, %d held by requests in flight; this request may use up to %d tokens", 3*bound+bound/2, 3*bound, bound), series: `gateway_limit_refusals_total{kind="tpm",level="key"}`},
		{name: "account tokens per minute", acct: account.Limits{TPM: 2*bound + bound/2}, admitted: 2, status: 429, message: fmt.Sprintf("tokens-per-minute limit for this account: 0 of %d tokens used in the last 60 s, %d held by requests in flight; this request may use up to %d tokens", 2*bound+bound/2, 2*bound, bound), series: `gateway_limit_refusals_total{kind="tpm",level="account"}`},
		{name: "key daily", key: account.Limits{DailyNanoUSD: 4*hold + hold/2}, admitted: 4, status: 429, message: spend("daily spend limit for this key", 4*hold+hold/2, 4*hold), series: `gateway_limit_refusals_total{kind="daily",level="key"}`},
		{name: "key monthly", key: account.Limits{MonthlyNanoUSD: 3*hold + hold/2}, admitted: 3, status: 429, message: spend("monthly spend limit for this key", 3*hold+hold/2, 3*hold), series: `gateway_limit_refusals_total{kind="monthly",level="key"}`},
		{name: "account monthly", acct: account.Limits{MonthlyNanoUSD: 3*hold + hold/2}, admitted: 3, status: 429, message: spend("monthly spend limit for this account", 3*hold+hold/2, 3*hold), series: `gateway_limit_refusals_total{kind="monthly",level="account"}`},
		{name: "key lifetime", key: account.Limits{TotalNanoUSD: 2*hold + hold/2}, admitted: 2, status: 402, message: spend("lifetime spend limit for this key", 2*hold+hold/2, 2*hold), series: `gateway_limit_refusals_total{kind="total",level="key"}`},
		{name: "balance", balance: 3*hold + hold/2, admitted: 3, status: 402, message: fmt.Sprintf("insufficient balance: the balance is $%s, $%s of it held by requests in flight; this request could cost up to $%s", pricing.FormatUSD(3*hold+hold/2), pricing.FormatUSD(3*hold), pricing.FormatUSD(hold)), series: `gateway_limit_refusals_total{kind="balance",level="account"}`},
		{name: "strictest wins", acct: account.Limits{Concurrency: 5, MonthlyNanoUSD: 4*hold + hold/2}, key: account.Limits{Concurrency: 6, DailyNanoUSD: 2*hold + hold/2},
			admitted: 2, status: 429, message: spend("daily spend limit for this key", 2*hold+hold/2, 2*hold), series: `gateway_limit_refusals_total{kind="daily",level="key"}`},
	}
	const n = 10
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			balance := c.balance
			if balance == 0 {
				balance = 100_000_000_000
			}
			acct, err := a.Store.CreateAccount(ctx, c.name, balance, c.acct)
			if err != nil {
				t.Fatal(err)
			}
			key, _, err := a.Store.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: "limited", Limits: c.key})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range pairs {
				p.Primary.Reset()
				p.Primary.Control(map[string]any{"event_delay_ms": 600_000, "reply_words": 3})
			}
			refusals := func() (n float64) {
				for _, p := range pairs {
					n += metricValue(t, p, c.series)
				}
				return n
			}
			before := refusals()
			res, end := burst(t, pairs, n, key, body)
			admitted := 0
			for _, r := range res {
				switch {
				case r.status == 200:
					admitted++
				case r.status != c.status || !strings.Contains(r.body, c.message):
					t.Errorf("refusal %d %s; want %d naming %q", r.status, r.body, c.status, c.message)
				}
			}
			peak := peakInFlight(pairs)
			end()
			if got := refusals() - before; got != float64(n-admitted) {
				t.Errorf("%s rose by %v; %d were refused", c.series, got, n-admitted)
			}
			// Tokens per minute roll over 60 s: a burst across a UTC
			// minute admits no more than one within it.
			if want := c.admitted; admitted != want {
				t.Fatalf("admitted %d of %d; want exactly %d", admitted, n, want)
			}
			if peak > admitted {
				t.Fatalf("the vendor had %d requests in flight at once; %d were admitted", peak, admitted)
			}
			if lim := max(c.key.Concurrency, c.acct.Concurrency); lim > 0 && (peak > int(min(nonZero(c.key.Concurrency), nonZero(c.acct.Concurrency))) || peak != admitted) {
				t.Fatalf("peak in flight %d with a concurrency limit; admitted %d", peak, admitted)
			}
			// The cut streams settle once their sidecars see them end.
			eventually.That(t, 15*time.Second, "the cut streams settle", func() (bool, string) {
				n, held, err := a.Store.Store.OpenHolds(ctx, acct.ID)
				return err == nil && n == 0, fmt.Sprint(n, " holds of ", held, " ", err)
			})
			a.WaitSettled()
			b.WaitSettled()
			conserved(t, a.Store.Store, acct.ID, balance)
			if s, err := a.Store.KeyStates(ctx, acct.ID, keyID(t, a, key)); err != nil || s[0].InFlight != 0 || s[0].Held != 0 {
				t.Fatalf("key state after the cut streams settled: %+v, %v", s, err)
			}
		})
	}

	// Redis stopped: every limited request fails closed.
	limited := a.NewAccount(100, account.Limits{Concurrency: 5, TPM: 1_000_000, MonthlyNanoUSD: 1e12})
	rs.Stop()
	for _, p := range pairs {
		for range 2 {
			if resp, _ := p.Do("POST", alphaPath, messagesHeaders(limited.Key), messagesBody(false, "")); resp.StatusCode != 503 {
				t.Fatalf("with Redis stopped: %d, want 503", resp.StatusCode)
			}
		}
	}
	rs.Start()
}

func nonZero(n int64) int64 {
	if n == 0 {
		return 1 << 62
	}
	return n
}

func keyID(t *testing.T, s *launch.Stack, secret string) string {
	t.Helper()
	k, err := s.Store.LookupKey(context.Background(), store.HashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// conserved checks balance change = ledger = usage counters, and no hold
// left.
func conserved(t *testing.T, st *store.Store, accountID string, initial int64) {
	t.Helper()
	ctx := context.Background()
	entries, _, err := st.Ledger(ctx, accountID, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var inLedger int64
	for _, e := range entries {
		inLedger += e.Cost
	}
	u, err := st.Usage(ctx, accountID, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	n, held, err := st.OpenHolds(ctx, accountID)
	if err != nil {
		t.Fatal(err)
	}
	if initial-u.Balance != inLedger || inLedger != u.Totals.Cost || n != 0 || held != 0 || u.Balance < 0 {
		t.Fatalf("balance change %d, ledger %d, counters %d, open holds %d (%d held), balance %d",
			initial-u.Balance, inLedger, u.Totals.Cost, n, held, u.Balance)
	}
}

// A key's limit changed with gatewayctl while its requests run takes effect
// within the key cache's lifetime on both sidecars, without rotating the
// key; the audit trail names who changed it.
func TestKeyLimitChangedWhileRunning(t *testing.T) {
	a := launchtest.Start(t, launch.Options{SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken}})
	b := launchtest.Start(t, launch.Options{RedisAddr: a.RedisAddr})
	ctl := adminCtl(t, a, "GATEWAY_ADMIN_ACTOR=ops-alice")
	acct := a.NewAccount(100, noLimits)
	id := keyID(t, a, acct.Key)
	for _, p := range []*launch.Stack{a, b} {
		if status, body := message(p, acct.Key, alphaModel); status != 200 {
			t.Fatalf("before the change: %d %s", status, body)
		}
	}
	// Requests keep running on both sidecars while the limit changes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, p := range []*launch.Stack{a, b} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					message(p, acct.Key, alphaModel)
				}
			}
		})
	}
	// The first requests' spend reaches the key's usage once their
	// settlements are sent (a batch lingers 20 ms); the admin read does
	// not wait for them.
	var spentBefore int64
	eventually.True(t, 5*time.Second, "the first requests' spend in the key's usage", func() bool {
		spentBefore, _ = strconv.ParseInt(field(t, ctl.json("keys", "limits", acct.ID, id), "usage.total_used_nano_usd"), 10, 64)
		return spentBefore > 0
	})
	r := ctl.json("keys", "limits", acct.ID, id, "--total-usd", "0.000001")
	if field(t, r, "key.limits.total_nano_usd") != "1000" {
		t.Fatalf("limits %v", r)
	}
	// Both sidecars refuse within the key cache's lifetime (2 s by default).
	for _, p := range []*launch.Stack{a, b} {
		eventually.That(t, 2*config.DefaultKeyCacheTTL+time.Second, "the new lifetime cap refuses", func() (bool, string) {
			status, body := message(p, acct.Key, alphaModel)
			return status == 402 && strings.Contains(body, "lifetime spend limit for this key: $"), fmt.Sprint(status, " ", body)
		})
	}
	close(stop)
	wg.Wait()
	// What the key spent before stays counted; the key is the same.
	after := ctl.json("keys", "limits", acct.ID, id)
	spentAfter, _ := strconv.ParseInt(field(t, after, "usage.total_used_nano_usd"), 10, 64)
	if field(t, after, "key.id") != id || spentBefore == 0 || spentAfter < spentBefore {
		t.Fatalf("after the change %v (spent before %d)", after, spentBefore)
	}
	audit := ctl.json("audit")
	found := false
	for _, e := range audit["entries"].([]any) {
		m := e.(map[string]any)
		if m["action"] == "key.limits" && m["key_id"] == id && m["actor"] == "ops-alice" && strings.Contains(m["detail"].(string), "total_nano_usd=1000") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no audit entry of the change by ops-alice in %v", audit)
	}
}

// webhookReceiver is a real HTTP receiver on loopback that verifies each
// delivery's signature and answers 500 to the first two attempts of the
// first event it sees.
type webhookReceiver struct {
	t      *testing.T
	secret []byte
	srv    *httptest.Server

	mu       sync.Mutex
	attempts map[string]int // by event id
	events   map[string]alerts.Event
	failing  string // the event id answered 500 twice
	hang     chan struct{}
	got      chan alerts.Event // each attempt that was answered 2xx
}

func newWebhookReceiver(t *testing.T, secret string) *webhookReceiver {
	w := &webhookReceiver{t: t, secret: []byte(secret), attempts: map[string]int{}, events: map[string]alerts.Event{}, got: make(chan alerts.Event, 100)}
	w.srv = httptest.NewServer(http.HandlerFunc(w.serve))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhookReceiver) serve(rw http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ts, _ := strconv.ParseInt(r.Header.Get(alerts.HeaderTimestamp), 10, 64)
	id := r.Header.Get(alerts.HeaderID)
	if want := alerts.Sign(w.secret, id, ts, body); !hmac.Equal([]byte(want), []byte(r.Header.Get(alerts.HeaderSignature))) {
		w.t.Errorf("delivery %s: bad signature", id)
		rw.WriteHeader(400)
		return
	}
	var ev alerts.Event
	if err := json.Unmarshal(body, &ev); err != nil || ev.ID != id {
		w.t.Errorf("delivery %s: body %s", id, body)
	}
	w.mu.Lock()
	hang := w.hang
	w.attempts[id]++
	if w.failing == "" {
		w.failing = id
	}
	fail := id == w.failing && w.attempts[id] <= 2
	w.events[id] = ev
	w.mu.Unlock()
	if hang != nil {
		<-hang
	}
	if fail {
		rw.WriteHeader(500)
		return
	}
	w.got <- ev
}

// Alerts with two sidecars: each budget crossing reaches a real receiver
// once (one event id, claimed once across both sidecars), signed; the event
// answered 500 twice arrives a third time with the same id; a receiver that
// hangs does not hold up model requests; no payload carries a key.
func TestWebhookAlertsTwoSidecars(t *testing.T) {
	const secret = "whsec-e2e-5b7a"
	recv := newWebhookReceiver(t, secret)
	conf := func(c *config.Config) {
		c.Alerts.Interval = config.Duration(200 * time.Millisecond)
		c.Alerts.Webhooks = []config.Webhook{{URL: recv.srv.URL, SecretEnv: "GATEWAY_WEBHOOK_SECRET"}}
	}
	env := []string{"GATEWAY_WEBHOOK_SECRET=" + secret}
	a := launchtest.Start(t, launch.Options{Configure: conf, SidecarEnv: env})
	b := launchtest.Start(t, launch.Options{RedisAddr: a.RedisAddr, Configure: conf, SidecarEnv: env})
	body := messagesBody(false, "")
	hold := priceOf(t, a, "alpha", alphaModel).Hold(int64(len(body)), 256)
	ctx := context.Background()
	acct, err := a.Store.CreateAccount(ctx, "alerted", 100_000_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// A daily budget of forty holds: admission stops once spend, the holds
	// of requests not yet settled (a few) and one more hold would exceed
	// it, so requests go on past 80 % of it, and the first refusal is its
	// 100 %.
	for _, p := range []*launch.Stack{a, b} {
		p.Primary.Control(map[string]any{"reply_words": 100})
	}
	key, _, err := a.Store.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: "ci", Limits: account.Limits{DailyNanoUSD: 40 * hold}})
	if err != nil {
		t.Fatal(err)
	}
	pairs := []*launch.Stack{a, b}
	refused := false
	for i := 0; i < 2000 && !refused; i++ {
		resp, rb := pairs[i%2].Do("POST", alphaPath, messagesHeaders(key), body)
		switch resp.StatusCode {
		case 200:
		case 429:
			refused = true
		default:
			t.Fatalf("status %d %s", resp.StatusCode, rb)
		}
	}
	if !refused {
		t.Fatal("the daily budget never refused")
	}
	// The two crossings (80 % and 100 %) arrive, each once delivered.
	seen := map[string]string{}
	for len(seen) < 2 {
		select {
		case ev := <-recv.got:
			if ev.Type != alerts.BudgetThreshold || ev.AccountID != acct.ID || ev.Data["level"] != "key" || ev.Data["window"] != "daily" {
				t.Fatalf("event %+v", ev)
			}
			p := fmt.Sprint(ev.Data["percent"])
			if prev, ok := seen[p]; ok && prev != ev.ID {
				t.Fatalf("%s %% fired twice: %s and %s", p, prev, ev.ID)
			}
			seen[p] = ev.ID
		case <-time.After(30 * time.Second):
			t.Fatalf("events so far %v", seen)
		}
	}
	recv.mu.Lock()
	failing, attempts := recv.failing, recv.attempts[recv.failing]
	for id, ev := range recv.events {
		raw, _ := json.Marshal(ev)
		if strings.Contains(string(raw), key) || strings.Contains(string(raw), key[3:]) {
			t.Errorf("event %s carries the key", id)
		}
	}
	recv.mu.Unlock()
	if attempts != 3 || (seen["80"] != failing && seen["100"] != failing) {
		t.Fatalf("the event answered 500 twice (%s) was attempted %d times", failing, attempts)
	}
	// Both sidecars together published each crossing once.
	published := 0
	for _, p := range pairs {
		published += int(metricValue(t, p, `gateway_alerts_total{type="budget.threshold"}`))
	}
	if published != 2 {
		t.Fatalf("the sidecars published %d budget events, want 2", published)
	}

	// A receiver that hangs: model requests are answered all the same.
	release := make(chan struct{})
	recv.mu.Lock()
	recv.hang = release
	recv.mu.Unlock()
	defer close(release)
	if err := a.Store.SetBalanceAlert(ctx, acct.ID, 200_000_000_000); err != nil { // above the balance: fires now
		t.Fatal(err)
	}
	other := a.NewAccount(10, noLimits)
	eventually.That(t, 30*time.Second, "a delivery hangs in the receiver", func() (bool, string) {
		recv.mu.Lock()
		defer recv.mu.Unlock()
		for _, ev := range recv.events {
			if ev.Type == alerts.BalanceLow {
				return true, ""
			}
		}
		return false, fmt.Sprint(len(recv.events), " events")
	})
	for i := range 10 {
		if status, rb := message(pairs[i%2], other.Key, alphaModel); status != 200 {
			t.Fatalf("with the receiver hung: %d %s", status, rb)
		}
	}
}

// metricValue reads one sample of a sidecar's /metrics by its name and
// labels as written there.
func metricValue(t *testing.T, s *launch.Stack, series string) float64 {
	t.Helper()
	resp, err := http.Get(s.ControlURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no %s in /metrics", series)
	return 0
}
