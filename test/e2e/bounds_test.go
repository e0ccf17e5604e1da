package e2e

import (
	"context"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/launch"
	"github.com/modelgateway/gateway/internal/launch/launchtest"
	"github.com/modelgateway/gateway/internal/store"
)

// A vendor claiming 9e18 output tokens for max_tokens 100 is charged for
// 100 at most, on both routes, streamed or not: the entry is flagged capped,
// the cap is counted in gateway_usage_capped_total, and the account pays no
// more than the request's hold.
func TestUsageBeyondTheRequestIsCapped(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, format := range []string{config.FormatMessages, config.FormatChatCompletions} {
			f.Control(map[string]any{"format": format, "output_tokens": 9_000_000_000_000_000_000})
		}
	}
	acct := s.NewAccount(10, noLimits)
	const initial = 10_000_000_000
	for _, route := range []string{"alpha", "beta"} {
		for _, streaming := range []bool{false, true} {
			path, h, body := requestFor(route, acct.Key, streaming) // max_tokens 256
			resp, b := s.Do("POST", path, h, body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s stream=%v: %d %s", route, streaming, resp.StatusCode, b)
			}
		}
	}
	s.WaitSettled()
	entries := checkBooks(t, s, acct.ID, initial, map[string]bool{})
	if len(entries) != 4 {
		t.Fatalf("%d ledger entries", len(entries))
	}
	for _, e := range entries {
		if !e.Capped || e.Usage.Output != 256 {
			t.Errorf("%s %s: output %d, capped %v; want 256, capped", e.Priced, e.RequestID, e.Usage.Output, e.Capped)
		}
	}
	rep, err := s.Store.Usage(context.Background(), acct.ID, store.Total)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Usage.Output != 4*256 {
		t.Errorf("counters: %d output tokens", rep.Totals.Usage.Output)
	}
	if n := sidecarMetric(t, s, "gateway_usage_capped_total"); n != 4 {
		t.Errorf("gateway_usage_capped_total %v, want 4", n)
	}
}
