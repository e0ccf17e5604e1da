package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Two of three pooled keys answer every request with a key-scoped 429
// (retry-after 1 s), so they cool down, come back and cool down again:
// vendor_key.limited is published exactly once for each of them in the
// pool's corroborate window, and never for the key that serves. (Across
// sidecars the alert's claim is the one TestKeyPoolRefusedKeyAlertsOnce
// shows.)
func TestKeyPoolLimitedKeyAlertsOncePerWindow(t *testing.T) {
	const secret = "whsec-pool-limited-7e2a"
	recv := newWebhookReceiver(t, secret)
	recv.failing = "none" // answer every delivery
	conf := func(c *config.Config) {
		c.Alerts.Interval = config.Duration(200 * time.Millisecond)
		c.Alerts.Webhooks = []config.Webhook{{URL: recv.srv.URL, SecretEnv: "GATEWAY_WEBHOOK_SECRET"}}
		// Longer than the test: every cool-down below is in one window.
		alphaPool(t, c).Pool.CorroborateWindow = config.Duration(10 * time.Minute)
		// A request meeting both limited keys still reaches the third.
		alphaPool(t, c).Pool.MaxKeys = 3
	}
	env := []string{"GATEWAY_WEBHOOK_SECRET=" + secret}
	s := launchtest.Start(t, launch.Options{Pool: 3, Configure: conf, SidecarEnv: env})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	limited := []string{"k1", "k2"}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, k := range limited {
			f.ForceKey(launch.PoolSecret("alpha", k), 429, "1")
		}
	}
	// Each limited key cools down three times (a cool-down ends after its
	// retry-after, and the key's next request draws the next 429).
	const cooldowns = 3
	sent := 0
	eventually.That(t, 60*time.Second, "each limited key cooled down repeatedly", func() (bool, string) {
		for range 4 {
			if st := sessionRequest(t, s, acct.Key, fmt.Sprintf("lim-%d", sent)); st != 200 {
				t.Errorf("request %d: %d; want 200 from the key with room", sent, st)
			}
			sent++
		}
		counts := map[string]float64{}
		for _, k := range limited {
			counts[k] = sidecarMetric(t, s, "gateway_vendor_key_cooldowns_total", `upstream="alpha"`, `key="`+k+`"`)
		}
		return counts["k1"] >= cooldowns && counts["k2"] >= cooldowns, fmt.Sprintf("cool-downs %v after %d requests", counts, sent)
	})
	// Every alert the cool-downs fire is delivered within a few of the
	// watchers' intervals; then count them, by event (a retried delivery
	// is the same event).
	byID := map[string]alerts.Event{}
	deadline := time.After(2 * time.Second)
collect:
	for {
		select {
		case ev := <-recv.got:
			if ev.Type == alerts.VendorKeyLimited {
				byID[ev.ID] = ev
			}
		case <-deadline:
			break collect
		}
	}
	perKey := map[string]int{}
	for _, ev := range byID {
		if ev.Data["upstream"] != "alpha" || ev.Data["status"] != float64(429) {
			t.Errorf("vendor_key.limited %+v; want alpha's, status 429", ev.Data)
		}
		perKey[fmt.Sprint(ev.Data["vendor_key"])]++
	}
	if len(perKey) != len(limited) || perKey["k1"] != 1 || perKey["k2"] != 1 {
		t.Fatalf("vendor_key.limited per key %v over %d requests; want exactly one for k1 and one for k2", perKey, sent)
	}
	t.Logf("%d requests, k1 and k2 cooling down again and again: alerts per key %v", sent, perKey)
}
