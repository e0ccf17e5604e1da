package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Sticky sessions: 20 sessions of 10 turns over a pool of three keys, at a
// fake vendor keeping a prompt cache per key. Each session stays on one
// key, so each conversation's prefix is written once and read on every
// later turn, as with one key; when a key cools down only its sessions
// move, and they come back to it (and its cache) after its retry-after.
func TestKeyPoolStickySessions(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	s.Primary.Control(map[string]any{"prompt_cache": true})
	const sessions = 20
	turn := func(i, k int) {
		// Sessions 0-14 name themselves in the header Claude Code sends;
		// 15-19 in the body (metadata.user_id), as SDK clients do.
		h := messagesHeaders(acct.Key)
		meta := ""
		if i < 15 {
			h["x-claude-code-session-id"] = fmt.Sprintf("sticky-%d", i)
		} else {
			meta = fmt.Sprintf(`"metadata":{"user_id":"sticky-%d"},`, i)
		}
		msgs := fmt.Sprintf(`{"role":"user","content":"Let us talk, session %d"}`, i)
		for j := 1; j < k; j++ {
			msgs += fmt.Sprintf(`,{"role":"assistant","content":"reply %d"},{"role":"user","content":"turn %d"}`, j, j)
		}
		body := fmt.Sprintf(`{"model":%q,"max_tokens":64,%s"system":"You are session %d.","messages":[%s]}`, alphaModel, meta, i, msgs)
		resp, out := s.Do("POST", alphaPath, h, []byte(body))
		if resp.StatusCode != 200 {
			t.Errorf("session %d turn %d: %d %s", i, k, resp.StatusCode, out)
		}
	}
	phase := func(from, to int) {
		var wg sync.WaitGroup
		for i := range sessions {
			wg.Go(func() {
				for k := from; k <= to; k++ {
					turn(i, k)
				}
			})
		}
		wg.Wait()
	}
	secrets := alphaSecrets()
	cache := func() (reads, writes int64) {
		for _, st := range s.Primary.Keys(secrets...) {
			reads += st.CacheReads
			writes += st.CacheWrites
		}
		return
	}

	// Five turns each: one write per conversation, then reads only.
	phase(1, 5)
	reads, writes := cache()
	if writes != sessions || reads != sessions*4 {
		t.Fatalf("after 5 turns of %d sessions: %d cache writes, %d reads; want %d and %d (each session on one key)", sessions, writes, reads, sessions, sessions*4)
	}
	keyOf := sessionKeys(t, s)
	onK1 := 0
	for i := range sessions {
		ks := keyOf[fmt.Sprintf("sticky-%d", i)]
		if len(ks) != 1 {
			t.Fatalf("session %d used keys %v in its first five turns", i, ks)
		}
		if ks[0] == "k1" {
			onK1++
		}
	}
	t.Logf("5 turns x %d sessions: %d cache writes, %d reads; sessions per key %v", sessions, writes, reads, perKey(keyOf))
	if onK1 == 0 || onK1 == sessions {
		t.Fatalf("%d of %d sessions on k1: the test shows nothing", onK1, sessions)
	}

	// k1 answers 429 for two turns: only its sessions move.
	k1 := launch.PoolSecret("alpha", "k1")
	s.Primary.ForceKey(k1, 429, "3")
	phase(6, 7)
	s.Primary.ForceKey(k1, 0, "")
	moved := sessionKeys(t, s)
	for i := range sessions {
		name := fmt.Sprintf("sticky-%d", i)
		if keyOf[name][0] != "k1" && len(moved[name]) != 1 {
			t.Errorf("session %d (on %s) moved to %v while only k1 cooled down", i, keyOf[name][0], moved[name])
		}
	}
	// The sidecar hears of k1's 429s from Envoy's upstream log, flushed
	// every 50 ms: its cool-down must have begun before its end is awaited.
	eventually.True(t, 10*time.Second, "k1's cool-down heard", func() bool {
		return sidecarMetric(t, s, "gateway_vendor_key_cooldowns_total", `upstream="alpha"`, `key="k1"`) >= 1
	})
	eventually.That(t, 10*time.Second, "k1 active again", func() (bool, string) {
		h := poolHealth(t, s, "alpha")
		return h["k1"].State == keypool.Active, fmt.Sprintf("%+v", h["k1"])
	})
	before, _ := cache()
	phase(8, 10)
	after, writes2 := cache()
	// Back on k1, its sessions read the prefix k1 wrote before.
	if after-before != sessions*3 {
		t.Errorf("after k1 returned: %d cache reads in 3 turns of %d sessions; want %d (every session back on its key)", after-before, sessions, sessions*3)
	}
	back := sessionKeys(t, s)
	for i := range sessions {
		name := fmt.Sprintf("sticky-%d", i)
		if ks := back[name]; ks[len(ks)-1] != keyOf[name][0] {
			t.Errorf("session %d ended on %s; it began on %s", i, ks[len(ks)-1], keyOf[name][0])
		}
	}
	t.Logf("200 turns: %d cache writes (%d sessions, %d of them moved once while k1 cooled down), %d reads", writes2, sessions, onK1, after)
}

// sessionKeys maps each session to the keys that served it, in order
// (consecutive repeats folded), from what the fake primary received: the
// session's marker and the key's secret of each request it answered.
func sessionKeys(t *testing.T, s *launch.Stack) map[string][]string {
	t.Helper()
	secretKey := map[string]string{}
	for _, k := range poolKeys {
		secretKey[launch.PoolSecret("alpha", k)] = k
	}
	out := map[string][]string{}
	for _, rec := range s.Primary.RequestsTo("messages", "/v1/messages") {
		session := header(rec.Headers, "X-Claude-Code-Session-Id")
		if session == "" {
			var b struct {
				Metadata struct {
					UserID string `json:"user_id"`
				} `json:"metadata"`
			}
			json.Unmarshal(rec.Body, &b)
			session = b.Metadata.UserID
		}
		if !strings.HasPrefix(session, "sticky-") {
			continue
		}
		k := secretKey[header(rec.Headers, "X-Api-Key")]
		if ks := out[session]; len(ks) == 0 || ks[len(ks)-1] != k {
			out[session] = append(ks, k)
		}
	}
	return out
}

func perKey(m map[string][]string) map[string]int {
	out := map[string]int{}
	for _, ks := range m {
		out[ks[0]]++
	}
	return out
}
