package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The fair share engages on the vendor's remaining requests of a served
// reply, before the vendor refuses anything: the fake vendor allows each
// key 10 requests a second and says on every reply how many are left; the
// heavy tenant, sending one request after another, gets the share's 429
// once a key's remaining fall under share_below, while no vendor 429 has
// been answered yet, and the two light tenants get none.
func TestPoolShareEngagesBeforeTheVendorRefuses(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3, Configure: func(c *config.Config) {
		alphaPool(t, c).Pool.ShareBelow = 0.5
	}})
	heavy := s.NewAccount(100, noLimits)
	light := []launch.Account{s.NewAccount(100, noLimits), s.NewAccount(100, noLimits)}
	waitHealthRoute(t, s, "primary")
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"key_rps": 10})
	}
	lightOnce := func(round int) {
		for j, a := range light {
			h := messagesHeaders(a.Key)
			h["x-claude-code-session-id"] = fmt.Sprintf("light-%d-%d", j, round)
			if resp, body := s.Do("POST", alphaPath, h, messagesBody(false, "")); resp.StatusCode != 200 {
				t.Errorf("light tenant %d, round %d: %d %s", j, round, resp.StatusCode, body)
			}
		}
	}
	vendor429s := func() (n int64) {
		for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
			for _, st := range f.Keys(alphaSecrets()...) {
				n += st.Limited
			}
		}
		return n
	}
	// The light tenants are among the accounts sending: a share is of
	// them.
	lightOnce(0)
	served := 0
	for served < 200 {
		resp, body := s.Do("POST", alphaPath, messagesHeaders(heavy.Key), messagesBody(false, ""))
		if resp.StatusCode == 200 {
			served++
			continue
		}
		if resp.StatusCode != 429 || !strings.Contains(string(body), "shared fairly") {
			t.Fatalf("the heavy tenant's first refusal, after %d served: %d %s; want the share's 429", served, resp.StatusCode, body)
		}
		break
	}
	if served == 200 {
		t.Fatal("the heavy tenant was never held to its share")
	}
	if n := vendor429s(); n != 0 {
		t.Errorf("the vendor answered %d 429s before the share engaged; want none", n)
	}
	t.Logf("the heavy tenant held to its share after %d served, no vendor 429", served)
	// While the heavy tenant keeps sending, the light tenants, each at
	// 4 requests a second (within a third of the pool's 30), are served.
	stop := make(chan struct{})
	var heavyWG sync.WaitGroup
	heavyWG.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			s.Do("POST", alphaPath, messagesHeaders(heavy.Key), messagesBody(false, ""))
		}
	})
	tick := time.NewTicker(250 * time.Millisecond)
	for round := 1; round <= 8; round++ {
		<-tick.C
		lightOnce(round)
	}
	tick.Stop()
	close(stop)
	heavyWG.Wait()
	if got := sidecarMetric(t, s, "gateway_pool_share_refusals_total", `upstream="alpha"`); got < 2 {
		t.Errorf("%v share refusals; want the heavy tenant held while it kept sending", got)
	}
}
