package e2e

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The fake vendor limits each of three keys to 8 requests a second (the
// pool's capacity is 24/s) and one tenant sends about four times that.
// Once the sidecar has heard of a key's spent limit, the heavy tenant is
// held to its share and the two light tenants, each sending well within
// theirs, get no 429; no request is ever retried on the key that refused
// it.
func TestPoolFairShare(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3, Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			c.Upstreams[i].Pool.ShareBelow = 0.5
		}
	}})
	heavy := s.NewAccount(100, noLimits)
	light := []launch.Account{s.NewAccount(100, noLimits), s.NewAccount(100, noLimits)}
	waitHealthRoute(t, s, "primary")
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"key_rps": 8})
	}
	// The sharing engaged, and the keys the heavy tenant spent before it
	// did are back: a second (the fake's window, its retry-after) later.
	var since atomic.Pointer[time.Time]
	engaged := func() bool {
		if at := since.Load(); at != nil {
			return time.Since(*at) > time.Second
		}
		if sidecarMetric(t, s, "gateway_pool_share_refusals_total", `upstream="alpha"`) > 0 {
			now := time.Now()
			since.CompareAndSwap(nil, &now)
		}
		return false
	}

	stop := make(chan struct{})
	var heavyWG sync.WaitGroup
	var heavySent, heavyRefused atomic.Int64
	for g := range 4 {
		heavyWG.Go(func() {
			tick := time.NewTicker(40 * time.Millisecond) // 4 × 25/s: about 4× the pool
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				h := messagesHeaders(heavy.Key)
				h["x-claude-code-session-id"] = fmt.Sprintf("heavy-%d-%d", g, i)
				resp, _ := s.Do("POST", alphaPath, h, messagesBody(false, ""))
				heavySent.Add(1)
				if resp.StatusCode == 429 {
					heavyRefused.Add(1)
				}
			}
		})
	}
	defer func() { close(stop); heavyWG.Wait() }()

	// The light tenants are active from the start (a share is of the
	// accounts sending); what is asserted is what they send once the
	// sharing has engaged and the keys spent before are back.
	var lightWG sync.WaitGroup
	var mu sync.Mutex
	asserted, refused := 0, []string{}
	for j, a := range light {
		lightWG.Go(func() {
			tick := time.NewTicker(500 * time.Millisecond) // 2/s each: within a third of 24/s
			defer tick.Stop()
			for i := range 24 {
				<-tick.C
				on := engaged()
				h := messagesHeaders(a.Key)
				h["x-claude-code-session-id"] = fmt.Sprintf("light-%d-%d", j, i)
				resp, body := s.Do("POST", alphaPath, h, messagesBody(false, ""))
				if !on {
					continue
				}
				mu.Lock()
				asserted++
				if resp.StatusCode != 200 {
					refused = append(refused, fmt.Sprintf("%d %s", resp.StatusCode, body))
				}
				mu.Unlock()
			}
		})
	}
	eventually.That(t, 15*time.Second, "the share engaged", func() (bool, string) {
		return engaged(), "no share refusal yet"
	})
	lightWG.Wait()
	if asserted < 10 {
		t.Fatalf("only %d light requests after the share engaged: the test shows nothing", asserted)
	}
	if len(refused) > 0 {
		t.Errorf("%d of %d light requests within their share refused: %v", len(refused), asserted, refused)
	}
	if heavyRefused.Load() == 0 {
		t.Errorf("the heavy tenant's %d requests were all served", heavySent.Load())
	}
	if twice := retriedOnSameKey(s); len(twice) > 0 {
		t.Errorf("%d requests retried on the key that refused them: %v", len(twice), twice[:min(len(twice), 5)])
	}
	limited := int64(0)
	for _, st := range s.Primary.Keys(alphaSecrets()...) {
		limited += st.Limited
	}
	t.Logf("heavy: %d sent, %d refused; light: %d asserted, all 200; the vendor's 429s: %d", heavySent.Load(), heavyRefused.Load(), asserted, limited)
}
