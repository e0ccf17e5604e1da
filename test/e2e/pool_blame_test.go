package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// servedSessions sends one request per session for the account and returns
// the key (its secret) each session was served by, from the fake's log.
func servedSessions(t *testing.T, s *launch.Stack, key string, sessions []string) map[string]string {
	t.Helper()
	for _, ss := range sessions {
		if st := sessionRequest(t, s, key, ss); st != 200 {
			t.Fatalf("session %s: %d", ss, st)
		}
	}
	out := map[string]string{}
	for _, rec := range s.Primary.RequestsTo(config.FormatMessages, "/v1/messages") {
		if ss := header(rec.Headers, "x-claude-code-session-id"); ss != "" {
			out[ss] = header(rec.Headers, "x-api-key") // the last one wins
		}
	}
	return out
}

// retriedOnSameKey names the requests (Envoy's x-request-id) the fake saw
// twice with the same key.
func retriedOnSameKey(s *launch.Stack) []string {
	seen := map[string]bool{}
	var twice []string
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, rec := range f.RequestsTo(config.FormatMessages, "/v1/messages") {
			id := header(rec.Headers, "x-request-id") + " " + header(rec.Headers, "x-api-key")
			if seen[id] {
				twice = append(twice, id)
			}
			seen[id] = true
		}
	}
	return twice
}

// attempts counts the fake's requests by Envoy's request id.
func attempts(s *launch.Stack) map[string]int {
	n := map[string]int{}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, rec := range f.RequestsTo(config.FormatMessages, "/v1/messages") {
			n[header(rec.Headers, "x-request-id")]++
		}
	}
	return n
}

// One account's requests that the vendor refuses for what they ask (a 429
// with room left on the key, a 401 that names no bad key) reach one key
// each and go back to it; no key cools or is taken out, the other tenants'
// sessions stay on their keys, and after account_refusals of them the
// account is refused by the gateway itself. A key's own 429 (its remaining
// requests at 0) still cools exactly that key, and is retried on another
// key, never on itself.
func TestPoolRequestRefusalsKnockOutNoKey(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3})
	attacker := s.NewAccount(100, noLimits)
	other := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	var sessions []string
	for i := range 12 {
		sessions = append(sessions, fmt.Sprintf("tenant-%d", i))
	}
	before := servedSessions(t, s, other.Key, sessions)
	perKey := map[string]int{}
	for _, k := range before {
		perKey[k]++
	}
	if len(perKey) < 2 {
		t.Fatalf("the other tenant's sessions are on %v: too few keys to show a move", perKey)
	}

	// Four refusals (account_refusals is 5): each answered to the attacker
	// as the vendor wrote it, tried on one key.
	refuse := func(status int) {
		h := messagesHeaders(attacker.Key)
		h["x-fake-controls"] = fmt.Sprintf(`{"refuse":%d}`, status)
		resp, body := s.Do("POST", alphaPath, h, messagesBody(false, ""))
		if resp.StatusCode != status {
			t.Fatalf("refused request: %d %s; want the vendor's %d", resp.StatusCode, body, status)
		}
		for _, h := range []string{keypool.RetryHeader, keypool.ErrorHeader} {
			if v := resp.Header.Get(h); v != "" {
				t.Errorf("the client got the gateway's internal %s: %q", h, v)
			}
		}
	}
	for _, st := range []int{429, 401, 429, 401} {
		refuse(st)
	}
	for id, n := range attempts(s) {
		if n != 1 {
			t.Errorf("request %s reached the vendor %d times; want once (no retry of a request's refusal)", id, n)
		}
	}
	eventually.That(t, 5*time.Second, "the sidecar judged the four refusals", func() (bool, string) {
		n := sidecarMetric(t, s, "gateway_vendor_refusals_total", `upstream="alpha"`, `blame="unsure"`)
		return n >= 4, fmt.Sprintf("%v unsure refusals", n)
	})
	for name, k := range poolHealth(t, s, "alpha") {
		if k.State != keypool.Active {
			t.Errorf("key %s is %s after one account's refusals; want active", name, k.State)
		}
	}
	after := servedSessions(t, s, other.Key, sessions)
	for _, ss := range sessions {
		if after[ss] != before[ss] {
			t.Errorf("session %s moved from %s to %s", ss, before[ss], after[ss])
		}
	}

	// The fifth: the attacker is refused by the gateway from then on, in
	// the vendor's format, without reaching it.
	refuse(429)
	var last string
	eventually.That(t, 5*time.Second, "the attacker refused by the gateway", func() (bool, string) {
		resp, body := s.Do("POST", alphaPath, messagesHeaders(attacker.Key), messagesBody(false, ""))
		last = string(body)
		return resp.StatusCode == 429 && resp.Header.Get("x-should-retry") == "false" && resp.Header.Get("retry-after") != "" &&
			strings.Contains(last, `"rate_limit_error"`) && strings.Contains(last, "keep being refused"), fmt.Sprintf("%d %v %s", resp.StatusCode, resp.Header, body)
	})
	sent := len(s.Primary.RequestsTo(config.FormatMessages, "/v1/messages"))
	resp, _ := s.Do("POST", alphaPath, messagesHeaders(attacker.Key), messagesBody(false, ""))
	if resp.StatusCode != 429 || len(s.Primary.RequestsTo(config.FormatMessages, "/v1/messages")) != sent {
		t.Errorf("a barred account's request: %d, reached the vendor %v", resp.StatusCode, len(s.Primary.RequestsTo(config.FormatMessages, "/v1/messages")) != sent)
	}
	if st := sessionRequest(t, s, other.Key, "tenant-0"); st != 200 {
		t.Errorf("the other tenant, while the attacker is barred: %d", st)
	}

	// A key's own limit: k2 answers 429 with its remaining requests at 0.
	limited := launch.PoolSecret("alpha", "k2")
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(limited, 429, "30")
	}
	for _, ss := range sessions {
		if st := sessionRequest(t, s, other.Key, ss+"-b"); st != 200 {
			t.Errorf("session %s with k2 limited: %d; want another key to serve", ss, st)
		}
	}
	if s.Primary.Keys(limited)[limited].Forced == 0 {
		t.Fatal("no request reached k2: the test shows nothing")
	}
	eventually.That(t, 5*time.Second, "k2 cooling", func() (bool, string) {
		h := poolHealth(t, s, "alpha")
		return h["k2"].State == keypool.Cooling, fmt.Sprintf("%+v", h)
	})
	for name, k := range poolHealth(t, s, "alpha") {
		if name != "k2" && k.State != keypool.Active {
			t.Errorf("key %s is %s; want only k2 cooling", name, k.State)
		}
	}
	if twice := retriedOnSameKey(s); len(twice) > 0 {
		t.Errorf("requests retried on the key that refused them: %v", twice)
	}
	t.Logf("sessions per key %v; 5 refusals drew no cool-down; k2's own 429 cooled k2 alone", perKey)
}
