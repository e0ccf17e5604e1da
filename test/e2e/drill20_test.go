package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The failover drill at 20 requests/s with the shipped gateway.yaml: non-
// streaming requests alternate both routes while the primary hangs (accepts,
// never answers) or dies (SIGKILL while it holds requests). No request
// fails, and none waits longer than its first-byte bound plus the reserve's
// reply: an attempt that received no byte of a reply is retried on the
// reserve when its endpoint hangs past the bound, resets or refuses
// (docs/failover.md).
func TestFailoverDrill20HungPrimary(t *testing.T) {
	drill20(t, func(s *launch.Stack) { s.Primary.Control(map[string]any{"hang": true}) })
}

func TestFailoverDrill20KilledPrimary(t *testing.T) {
	drill20(t, func(s *launch.Stack) { s.Primary.Process.Signal(syscall.SIGKILL) })
}

// drillMaxTokens keeps the drill's bound near first_byte_timeout: 10 s plus
// 16 tokens at 20 tokens/s, plus the input at 5,000 tokens/s.
const drillMaxTokens = 16

func drill20(t *testing.T, fault func(*launch.Stack)) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(1000, noLimits)
	waitHealthRoute(t, s, "primary")
	// The primary takes 200 ms per reply (well within its health checks'
	// 1 s timeout), so it holds a few requests when the fault comes.
	s.Primary.Control(map[string]any{"latency_ms": 200})
	u, _ := s.Config.Upstream("alpha")
	bound := u.Failover.FirstByteTimeout.D() + drillMaxTokens*time.Second/time.Duration(u.Failover.GenerationTokensPerSecond) + time.Second

	type result struct {
		status   int
		endpoint string
		took     time.Duration
		err      error
	}
	const (
		rate     = 20
		duration = 12 * time.Second
		faultAt  = 2 * time.Second
	)
	var (
		mu      sync.Mutex
		results []result
		wg      sync.WaitGroup
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 2 * bound}
	start := time.Now()
	faulted := false
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for n := 0; time.Since(start) < duration; n++ {
		if !faulted && time.Since(start) >= faultAt {
			fault(s)
			faulted = true
		}
		wg.Go(func() {
			var path string
			var h map[string]string
			var body []byte
			if n%2 == 0 {
				path, h = alphaPath, messagesHeaders(acct.Key)
				body = fmt.Appendf(nil, `{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"drill %d"}]}`, alphaModel, drillMaxTokens, n)
			} else {
				path, h = betaPath, chatCompletionsHeaders(acct.Key)
				body = fmt.Appendf(nil, `{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"drill %d"}]}`, betaModel, drillMaxTokens, n)
			}
			t0 := time.Now()
			r := postAndRead(client, s.URL+path, h, body, 0, nil)
			mu.Lock()
			results = append(results, result{r.status, r.header.Get("x-gateway-endpoint"), time.Since(t0), r.err})
			mu.Unlock()
		})
		<-tick.C // the request rate, not synchronisation
	}
	wg.Wait()
	failed, slow := 0, 0
	var took []time.Duration
	served := map[string]int{}
	for _, r := range results {
		took = append(took, r.took)
		if r.err != nil || r.status != 200 {
			failed++
			if failed <= 5 {
				t.Errorf("failed: %d %v after %v (endpoint %q)", r.status, r.err, r.took, r.endpoint)
			}
			continue
		}
		served[r.endpoint]++
		if r.took > bound {
			slow++
			t.Errorf("took %v; the bound is %v (first byte) plus the reserve's reply", r.took, bound)
		}
	}
	slices.Sort(took)
	t.Logf("%d requests at %d/s: %d failed, %d slower than %v; served %v; slowest %.2fs, p99 %.2fs",
		len(results), rate, failed, slow, bound, served, took[len(took)-1].Seconds(), took[len(took)*99/100].Seconds())
	if failed > 0 {
		t.Errorf("%d of %d requests failed", failed, len(results))
	}
	if served["reserve"] == 0 {
		t.Errorf("no request was served by the reserve: %v", served)
	}
}
