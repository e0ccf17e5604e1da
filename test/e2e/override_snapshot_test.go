package e2e

import (
	"fmt"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// A contract price for claude-haiku-4-5 bills its dated snapshot
// claude-haiku-4-5-20251001 at the contract, streamed or not: the
// catalogue's price (twice the contract's here) never applies.
func TestOverrideBillsDatedSnapshot(t *testing.T) {
	const (
		named    = "claude-haiku-4-5"
		snapshot = "claude-haiku-4-5-20251001"
		// USD per million tokens; the nano-USD per token are these × 1,000.
		input, output, cacheRead, cacheWrite = 0.5, 2.5, 0.05, 0.625
	)
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		alpha, ok := c.Upstream("alpha")
		if !ok {
			t.Fatal("no upstream alpha")
		}
		in, out, cr, cw := input, output, cacheRead, cacheWrite
		if alpha.Models.Overrides == nil {
			alpha.Models.Overrides = map[string]config.Price{}
		}
		alpha.Models.Overrides[named] = config.Price{Input: &in, Output: &out, CacheRead: &cr, CacheWrite5m: &cw, CacheWrite1h: &cw}
	}})
	acct := s.NewAccount(10, noLimits)
	seen := map[string]bool{}
	for _, streamed := range []bool{false, true} {
		body := []byte(fmt.Sprintf(`{"model":%q,"max_tokens":64,"stream":%t,"messages":[{"role":"user","content":"Price me by contract."}]}`, snapshot, streamed))
		var u tokens
		if streamed {
			resp, evs := stream(t, s, alphaPath, messagesHeaders(acct.Key), body)
			if resp.StatusCode != 200 {
				t.Fatalf("stream: %d", resp.StatusCode)
			}
			u = messagesUsage(t, nil, evs)
		} else {
			resp, out := s.Do("POST", alphaPath, messagesHeaders(acct.Key), body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			u = messagesUsage(t, out, nil)
		}
		if u.Input == 0 || u.Output == 0 {
			t.Fatalf("stream=%v: the vendor reported %+v", streamed, u)
		}
		want := int64(u.Input*500 + u.Output*2500 + u.CacheRead*50 + u.CacheWrite*625)
		var e ledger.Entry
		for _, x := range allLedgerEntries(t, s, acct.ID) {
			if !seen[x.ID] {
				e, seen[x.ID] = x, true
			}
		}
		if string(e.Requested) != snapshot || e.Fallback {
			t.Errorf("stream=%v: ledger entry for %q (fallback %v), want %q", streamed, e.Requested, e.Fallback, snapshot)
		}
		if e.Cost != want || e.Estimated {
			t.Errorf("stream=%v: cost %d nano-USD (estimated %v) for %+v, want the contract's %d", streamed, e.Cost, e.Estimated, u, want)
		}
	}
	if n := len(allLedgerEntries(t, s, acct.ID)); n != 2 {
		t.Fatalf("%d ledger entries, want 2", n)
	}
}
