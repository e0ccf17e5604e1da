package e2e

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Two Envoy + sidecar pairs share a three-node Redis Cluster: requests
// spread over both, and the rate limit, the daily limit and the balance hold
// globally; usage read through either pair is the same.
func TestScaleOutOnRedisCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	a := launchtest.Start(t, launch.Options{RedisCluster: nodes})
	b := launchtest.Start(t, launch.Options{RedisCluster: nodes})
	pairs := []*launch.Stack{a, b}

	// Rate limit: 10 requests per window across both pairs.
	limited := a.NewAccount(10, account.Limits{RPM: 10, WindowMinutes: 1})
	codes := map[int]int{}
	for i := 0; i < 16; i++ {
		resp, _ := pairs[i%2].Do("POST", alphaPath, messagesHeaders(limited.Key), messagesBody(false, ""))
		codes[resp.StatusCode]++
	}
	if codes[200] != 10 || codes[429] != 6 {
		t.Fatalf("rate limit across pairs: %v; want 10×200 and 6×429", codes)
	}

	// Balance: concurrent requests on both pairs against a balance for ~20.
	ap := priceOf(t, a, "alpha", alphaModel)
	hold := ap.Hold(int64(len(messagesBody(false, ""))), 256)
	poor := a.NewAccount(float64(20*hold)/pricing.NanoPerUSD, noLimits)
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func(p *launch.Stack) {
			defer wg.Done()
			resp, _ := p.Do("POST", alphaPath, messagesHeaders(poor.Key), messagesBody(false, ""))
			if resp.StatusCode == 200 {
				mu.Lock()
				admitted++
				mu.Unlock()
			} else if resp.StatusCode != 402 {
				t.Errorf("status %d", resp.StatusCode)
			}
		}(pairs[i%2])
	}
	wg.Wait()
	// A read through one pair waits only for its own sidecar's settlements;
	// the other's land just after their replies (docs/architecture.md: staleness across
	// replicas).
	a.WaitSettled()
	b.WaitSettled()
	ua, ub := a.Usage(poor.ReadOnly, "total"), b.Usage(poor.ReadOnly, "total")
	if num(t, ua, "balance_usd") < 0 || num(t, ua, "usage.requests") != float64(admitted) {
		t.Fatalf("balance %v, requests %v; admitted %d", num(t, ua, "balance_usd"), num(t, ua, "usage.requests"), admitted)
	}
	if admitted < 20 || admitted == 60 {
		t.Fatalf("admitted %d of 60 against a balance for about 20", admitted)
	}
	// The same usage through either pair.
	for _, f := range []string{"balance_usd", "usage.requests", "usage.cost_usd", "usage.input_tokens", "limits.daily_used_usd"} {
		if num(t, ua, f) != num(t, ub, f) {
			t.Fatalf("%s differs between pairs: %v vs %v", f, num(t, ua, f), num(t, ub, f))
		}
	}

	// Daily limit across pairs: one hold fits, then spend + hold exceeds it.
	daily := a.NewAccount(10, account.Limits{DailyNanoUSD: hold + hold/2})
	first, _ := a.Do("POST", alphaPath, messagesHeaders(daily.Key), messagesBody(false, ""))
	if first.StatusCode != 200 {
		t.Fatalf("first request: %d", first.StatusCode)
	}
	limitedDaily := false
	for i := 0; i < 20 && !limitedDaily; i++ {
		resp, body := pairs[i%2].Do("POST", alphaPath, messagesHeaders(daily.Key), messagesBody(false, ""))
		limitedDaily = resp.StatusCode == 429 && strings.Contains(string(body), "daily")
	}
	if !limitedDaily {
		t.Fatal("the daily limit did not hold across pairs")
	}
	// Both pairs served traffic.
	for i, p := range pairs {
		if n := scrape(t, p, "gateway_requests_total"); n == 0 {
			t.Fatalf("pair %d served nothing", i)
		}
	}
}

// /metrics parses with the Prometheus text parser, and the listed series are
// present and move with traffic.
func TestMetricsMoveWithTraffic(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	poor := s.NewAccount(0, noLimits)
	before := max(scrape(t, s, "gateway_requests_total"), 0) // absent until the first request
	s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	stream(t, s, betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(true, false, ""))
	s.Do("POST", alphaPath, messagesHeaders(poor.Key), messagesBody(false, ""))
	s.WaitSettled() // requests are counted as they settle, just after their replies
	if got := scrape(t, s, "gateway_requests_total"); got != before+2 {
		t.Fatalf("gateway_requests_total %v → %v, want +2", before, got)
	}
	for _, name := range []string{
		"gateway_tokens_total", "gateway_cost_usd_total", "gateway_rejections_total",
		"gateway_admission_seconds", "gateway_settlement_seconds",
	} {
		if scrape(t, s, name) <= 0 {
			t.Errorf("%s did not move", name)
		}
	}
	// A stream the vendor breaks off after it started is settled estimated,
	// when Envoy ends the processor's stream (the events are spaced so that
	// the reply has started: a reset before its first byte is a free 502).
	s.Primary.Control(map[string]any{"abort_after_events": 3, "event_delay_ms": 50})
	resp := open(t, t.Context(), s, betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(true, false, ""))
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	eventually.True(t, 20*time.Second, "gateway_estimated_settlements_total moves", func() bool {
		return scrape(t, s, "gateway_estimated_settlements_total") > 0
	})
	for _, name := range []string{"gateway_endpoint_in_use", "gateway_store_errors_total", "gateway_expired_holds_total", "process_resident_memory_bytes"} {
		if scrape(t, s, name) < 0 {
			t.Errorf("%s missing", name)
		}
	}
}

// scrape sums a metric family's samples (histograms: their counts), or -1
// when the family is missing. Counter vectors with no sample yet are absent
// from the output, so callers compare sums.
func scrape(t *testing.T, s *launch.Stack, name string) float64 {
	t.Helper()
	resp, err := http.Get(s.ControlURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("metrics do not parse: %v", err)
	}
	f, ok := fams[name]
	if !ok {
		return -1
	}
	sum := 0.0
	for _, m := range f.GetMetric() {
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}
