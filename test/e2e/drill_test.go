package e2e

import (
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The failover drill with the shipped gateway.yaml: the primary hangs
// (accepts requests, never answers, probes included). Every request already
// sent to it waits its bound (failover.first_byte_timeout, 10 s, plus its
// input at 5,000 tokens/s, plus for a non-streaming request max_tokens at 20
// tokens/s) and is then retried once, by Envoy, on the reserve: no byte of a
// reply had reached the client. The client sees one 200. The hung primary
// generated nothing; the reserve generates each request once.
func TestFailoverDrillHungPrimary(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	s.Primary.Control(map[string]any{"hang": true})

	type attempt struct {
		status   int
		endpoint string
		took     time.Duration
	}
	type result struct {
		stream   bool
		attempts []attempt
	}
	cases := []struct {
		route  string
		stream bool
	}{{"alpha", true}, {"beta", true}, {"alpha", false}, {"beta", false}}
	results := make([]result, len(cases))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			results[i].stream = c.stream
			// The SDKs' policy: retry a 5xx once after a short wait.
			for try := range 2 {
				path, h, body := requestFor(c.route, acct.Key, c.stream)
				h["x-test-id"] = strconv.Itoa(i)
				start := time.Now()
				r := postAndRead(client, s.URL+path, h, body, 0, nil)
				results[i].attempts = append(results[i].attempts, attempt{r.status, r.header.Get("x-gateway-endpoint"), time.Since(start)})
				if r.status < 500 || try == 1 {
					return
				}
				time.Sleep(time.Second) // the client's backoff
			}
		})
	}
	wg.Wait()
	for i, r := range results {
		// Bound for these small requests: 10 s, plus 256 tokens at 20/s
		// when not streaming; the input adds well under a second. The
		// reserve's reply comes on top.
		bound := 11 * time.Second
		if !r.stream {
			bound += 12800 * time.Millisecond
		}
		if len(r.attempts) != 1 {
			t.Errorf("case %d: %+v; want one attempt, retried by the gateway", i, r.attempts)
			continue
		}
		first := r.attempts[0]
		if first.status != 200 || first.endpoint != "reserve" || first.took > bound+3*time.Second {
			t.Errorf("case %d: %d from %q after %v; want 200 from the reserve within %v", i, first.status, first.endpoint, first.took, bound)
		}
		t.Logf("case %d (stream %v): %d from %s after %.1fs (bound %v)", i, r.stream, first.status, first.endpoint, first.took.Seconds(), bound)
	}
	// The gateway sent each request at most once to the hung primary (which
	// generated nothing) and exactly once to the reserve.
	count := func(f *launch.Fake) map[string]int {
		n := map[string]int{}
		for _, rec := range f.Requests() {
			if ids := rec.Headers["X-Test-Id"]; len(ids) == 1 {
				n[ids[0]]++
			}
		}
		return n
	}
	onPrimary, onReserve := count(s.Primary), count(s.Reserve)
	for i := range cases {
		id := strconv.Itoa(i)
		if onPrimary[id] > 1 || onReserve[id] != 1 {
			t.Errorf("case %d: %d requests to the primary, %d to the reserve; want at most 1 and exactly 1", i, onPrimary[id], onReserve[id])
		}
	}
	s.Primary.Control(map[string]any{"hang": false})
}
