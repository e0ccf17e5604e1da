package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

func priceOf(t *testing.T, s *launch.Stack, upstream, model string) *pricing.Model {
	t.Helper()
	book, err := pricing.NewBook(s.Config, operations.All.Modes())
	if err != nil {
		t.Fatal(err)
	}
	if book[upstream] == nil {
		t.Fatalf("no upstream %s", upstream)
	}
	p, ok := book[upstream].Lookup(model)
	if !ok {
		t.Fatalf("no price for %s", model)
	}
	return p
}

func cost(p *pricing.Model, u tokens) int64 {
	return p.Price(usage.Usage{Input: u.Input, Output: u.Output, CacheWrite5m: u.CacheWrite, CacheRead: u.CacheRead}, "", "").Cost
}

// After a mix of streaming and non-streaming requests on both routes, the
// balance, daily spend and per-model counters equal exactly what the vendor
// replies reported, priced by the table.
func TestMeteringMatchesVendorUsage(t *testing.T) { meteringMatchesVendorUsage(t, launch.Options{}) }

func meteringMatchesVendorUsage(t *testing.T, o launch.Options) {
	s := launchtest.Start(t, o)
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"format": config.FormatMessages, "cache_read_tokens": 40, "cache_write_tokens": 7})
	s.Primary.Control(map[string]any{"format": config.FormatChatCompletions, "cache_read_tokens": 5})
	ap, bp := priceOf(t, s, "alpha", alphaModel), priceOf(t, s, "beta", betaModel)

	var want struct {
		cost          int64
		alpha, beta   tokens
		alphaN, betaN int64
	}
	add := func(dst *tokens, u tokens) {
		dst.Input += u.Input
		dst.Output += u.Output
		dst.CacheWrite += u.CacheWrite
		dst.CacheRead += u.CacheRead
	}
	for i := 0; i < 3; i++ {
		resp, body := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		u := messagesUsage(t, body, nil)
		add(&want.alpha, u)
		want.cost += cost(ap, u)

		_, evs := stream(t, s, alphaPath, messagesHeaders(acct.Key), messagesBody(true, ""))
		u = messagesUsage(t, nil, evs)
		add(&want.alpha, u)
		want.cost += cost(ap, u)

		resp, body = s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		u = chatCompletionsUsage(t, body, nil)
		add(&want.beta, u)
		want.cost += cost(bp, u)

		_, evs = stream(t, s, betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(true, true, ""))
		u = chatCompletionsUsage(t, nil, evs)
		add(&want.beta, u)
		want.cost += cost(bp, u)
		want.alphaN += 2
		want.betaN += 2
	}
	if want.alpha.CacheRead == 0 || want.beta.CacheRead == 0 || want.alpha.CacheWrite == 0 {
		t.Fatalf("fake vendor reported no cache tokens: %+v", want)
	}

	ctx := context.Background()
	rep, err := s.Store.Usage(ctx, acct.ID, ledger.Day)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Balance != 10*pricing.NanoPerUSD-want.cost {
		t.Errorf("balance = %d, want %d", rep.Balance, 10*pricing.NanoPerUSD-want.cost)
	}
	if rep.DailyUsed != want.cost || rep.Totals.Cost != want.cost {
		t.Errorf("daily used %d, period cost %d; want %d", rep.DailyUsed, rep.Totals.Cost, want.cost)
	}
	byModel := map[string]ledger.ModelCounters{}
	for _, m := range rep.ByModel {
		byModel[string(m.Model)] = m
	}
	check := func(model string, n int64, u tokens, p *pricing.Model) {
		m := byModel[model]
		got := tokens{m.Usage.Input, m.Usage.Output, m.Usage.CacheWrite5m, m.Usage.CacheRead}
		if m.Requests != n || got != u || m.Cost != cost(p, u) {
			t.Errorf("%s: requests %d tokens %+v cost %d; want %d %+v %d", model, m.Requests, got, m.Cost, n, u, cost(p, u))
		}
	}
	check(alphaModel, want.alphaN, want.alpha, ap)
	check(betaModel, want.betaN, want.beta, bp)

	// The same through GET /v1/usage.
	u := s.Usage(acct.ReadOnly, "day")
	if got := num(t, u, "usage.cost_usd"); got != pricing.USD(want.cost) {
		t.Errorf("usage.cost_usd = %v, want %v", got, pricing.USD(want.cost))
	}
	if got := num(t, u, "usage.requests"); got != float64(want.alphaN+want.betaN) {
		t.Errorf("usage.requests = %v", got)
	}
}

func onlyLedgerEntry(t *testing.T, s *launch.Stack, acct string) ledger.Entry {
	t.Helper()
	entries, _, err := s.Store.Ledger(context.Background(), acct, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("ledger has %d entries, want 1: %+v", len(entries), entries)
	}
	return entries[0]
}

// 200 concurrent requests against a balance that covers about 50: every
// admitted request settles, the rest get 402, the balance stays ≥ 0 and the
// ledger, the balance change and the counters agree.
func TestConcurrentRequestsAgainstSmallBalance(t *testing.T) {
	concurrentRequestsAgainstSmallBalance(t, launch.Options{})
}

func concurrentRequestsAgainstSmallBalance(t *testing.T, o launch.Options) {
	s := launchtest.Start(t, o)
	ap := priceOf(t, s, "alpha", alphaModel)
	body := messagesBody(false, "")
	hold := ap.Hold(int64(len(body)), 256)
	balance := 50 * hold
	acct := s.NewAccount(float64(balance)/pricing.NanoPerUSD, noLimits)

	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", s.URL+alphaPath, bytes.NewReader(body))
			for k, v := range messagesHeaders(acct.Key) {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			// The whole reply is read before it is counted: the 200 arrives
			// with the headers, and the request settles only once its last
			// chunk has passed (closing the body early would cut it, and the
			// ledger read below could come before its settlement).
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[200]+codes[402] != 200 || codes[200] < 50 || codes[402] == 0 {
		t.Fatalf("status counts %v; want only 200 and 402, at least 50 admitted", codes)
	}
	ctx := context.Background()
	entries, _, err := s.Store.Ledger(ctx, acct.ID, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	seen := map[string]bool{}
	for _, e := range entries {
		if seen[e.RequestID] {
			t.Fatalf("request %s settled twice", e.RequestID)
		}
		seen[e.RequestID] = true
		sum += e.Cost
	}
	if len(entries) != codes[200] {
		t.Fatalf("%d ledger entries for %d admitted requests", len(entries), codes[200])
	}
	rep, _ := s.Store.Usage(ctx, acct.ID, ledger.Total)
	if rep.Balance < 0 {
		t.Fatalf("balance went negative: %d", rep.Balance)
	}
	if balance-rep.Balance != sum || rep.Totals.Cost != sum || rep.Totals.Requests != int64(codes[200]) {
		t.Fatalf("balance change %d, counters %d/%d requests, ledger %d", balance-rep.Balance, rep.Totals.Cost, rep.Totals.Requests, sum)
	}
	if _, amount, _ := s.Store.OpenHolds(ctx, acct.ID); amount != 0 {
		t.Fatalf("holds left open: %d", amount)
	}
}

func TestRateLimit(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, account.Limits{RPM: 2, WindowMinutes: 1})
	for i := 0; i < 2; i++ {
		if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, "")); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b := s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))
	if resp.StatusCode != 429 {
		t.Fatalf("third request: %d %s; want 429", resp.StatusCode, b)
	}
	ra, err := strconv.Atoi(resp.Header.Get("retry-after"))
	if err != nil || ra < 1 || ra > 60 {
		t.Fatalf("retry-after %q; want 1..60 seconds", resp.Header.Get("retry-after"))
	}
	var e betaError
	mustJSON(t, b, &e)
	if e.Error.Code != "rate_limit_exceeded" {
		t.Fatalf("error %+v", e)
	}
}

func TestDailyLimit(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	ap := priceOf(t, s, "alpha", alphaModel)
	body := messagesBody(false, "")
	hold := ap.Hold(int64(len(body)), 256)
	// The daily limit admits one request's hold, not two at once.
	acct := s.NewAccount(10, account.Limits{DailyNanoUSD: hold + hold/2})
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), body); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// Spend is now far below the hold; a second request still fits only if
	// spend + hold ≤ limit.
	spent := s.Usage(acct.ReadOnly, "day")
	for i := 0; i < 20; i++ {
		resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), body)
		if resp.StatusCode == 200 {
			continue
		}
		if resp.StatusCode != 429 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
		var e alphaError
		mustJSON(t, b, &e)
		if e.Error.Type != "rate_limit_error" || !strings.Contains(e.Error.Message, "daily") {
			t.Fatalf("error %+v; want a rate_limit_error naming the daily limit", e)
		}
		// Waiting seconds will not cure it: no retry-after, and the SDKs
		// are told not to retry; the reset is UTC midnight.
		if ra, retry := resp.Header.Get("retry-after"), resp.Header.Get("x-should-retry"); ra != "" || retry != "false" {
			t.Fatalf("retry-after %q, x-should-retry %q; want none and false", ra, retry)
		}
		reset, err := time.Parse(time.RFC3339, resp.Header.Get("x-gateway-limit-reset"))
		now := time.Now().UTC()
		midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
		if err != nil || reset.Sub(midnight).Abs() > time.Minute {
			t.Fatalf("x-gateway-limit-reset %q (%v); want UTC midnight %v", resp.Header.Get("x-gateway-limit-reset"), err, midnight)
		}
		return
	}
	t.Fatalf("daily limit never reached; usage %v", spent)
}

// ro_ tokens are refused on both model routes and spend nothing.
func TestReadOnlyTokenCannotSpend(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.ReadOnly), messagesBody(false, ""))
	var ae alphaError
	mustJSON(t, b, &ae)
	if resp.StatusCode != 403 || ae.Error.Type != "permission_error" {
		t.Fatalf("alpha: %d %s", resp.StatusCode, b)
	}
	resp, b = s.Do("POST", betaPath, chatCompletionsHeaders(acct.ReadOnly), chatCompletionsBody(false, false, ""))
	if resp.StatusCode != 403 {
		t.Fatalf("beta: %d %s", resp.StatusCode, b)
	}
	u := s.Usage(acct.ReadOnly, "total")
	if num(t, u, "balance_usd") != 10 || num(t, u, "usage.requests") != 0 {
		t.Fatalf("usage moved: %v", u)
	}
	for _, r := range s.Primary.Requests() {
		if r.Method == "POST" {
			t.Fatalf("vendor received %s %s", r.Method, r.Path)
		}
	}
}

// A client that disconnects mid-stream is charged the observed usage,
// marked estimated; a vendor 500 is charged nothing.
func TestDisconnectAndVendorError(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 50, "reply_words": 40})

	ctx, cancel := context.WithCancel(context.Background())
	resp := open(t, ctx, s, alphaPath, messagesHeaders(acct.Key), messagesBody(true, ""))
	buf := make([]byte, 2048)
	read := 0
	for read < 600 { // message_start and a few deltas
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		read += n
	}
	cancel()
	resp.Body.Close()
	e := waitLedgerEntry(t, s, acct.ID)
	if !e.Estimated || e.Usage.Input == 0 || e.Cost == 0 || e.Usage.Output >= 40 {
		t.Fatalf("entry = %+v; want estimated, charged for what was observed", e)
	}

	acct2 := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"status": 500, "event_delay_ms": 0})
	s.Reserve.Control(map[string]any{"status": 500})
	resp2, b := s.Do("POST", alphaPath, messagesHeaders(acct2.Key), messagesBody(false, ""))
	if resp2.StatusCode != 500 {
		t.Fatalf("%d %s; want the vendor's 500", resp2.StatusCode, b)
	}
	e = onlyLedgerEntry(t, s, acct2.ID)
	if e.Cost != 0 || e.Status != 500 {
		t.Fatalf("entry = %+v; want status 500 at no charge", e)
	}
	if u := s.Usage(acct2.ReadOnly, "total"); num(t, u, "balance_usd") != 10 {
		t.Fatalf("balance moved: %v", u)
	}
}

// waitLedgerEntry polls for the settlement of a request whose client went
// away (it settles when Envoy resets the processor stream).
func waitLedgerEntry(t *testing.T, s *launch.Stack, acct string) ledger.Entry {
	t.Helper()
	var e ledger.Entry
	eventually.That(t, 20*time.Second, "a ledger entry", func() (bool, string) {
		entries, _, err := s.Store.Ledger(context.Background(), acct, "", 10)
		if err != nil || len(entries) == 0 {
			return false, fmt.Sprintf("%d entries, %v", len(entries), err)
		}
		e = entries[0]
		return true, ""
	})
	return e
}
