package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
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
	rep, err := s.Store.Usage(context.Background(), acct.ID, ledger.Total)
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

// Under unknown_model: fallback, made-up model names all count under one
// usage row, however many there are (the ledger keeps each name); and ";"
// separates query parameters, so "?beta=true;stream=true" reaches the vendor
// as "beta=true".
func TestUnknownModelsAndQuerySeparators(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			if c.Upstreams[i].Name == "alpha" {
				in, out := 1.0, 2.0
				c.Upstreams[i].Models.UnknownModel = config.UnknownFallback
				c.Upstreams[i].Models.Fallback = &config.Price{Input: &in, Output: &out, MaxOutput: 4096}
			}
		}
	}})
	acct := s.NewAccount(10, noLimits)
	const names = 30
	for i := range names {
		body := fmt.Sprintf(`{"model":"made-up-%d-%s","max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`, i, strings.Repeat("x", 200))
		if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), []byte(body)); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	rep, err := s.Store.Usage(context.Background(), acct.ID, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.ByModel) != 1 || rep.ByModel[0].Model != pricing.FallbackModel || rep.ByModel[0].Requests != names {
		t.Fatalf("%d by_model rows for %d unknown names: %+v", len(rep.ByModel), names, rep.ByModel)
	}
	requested := map[string]bool{}
	for _, e := range allLedgerEntries(t, s, acct.ID) {
		if !e.Fallback || e.Priced != pricing.FallbackModel {
			t.Errorf("entry %+v", e.Settlement)
		}
		requested[string(e.Requested)] = true
	}
	if len(requested) != names {
		t.Errorf("the ledger names %d requested models, want %d", len(requested), names)
	}

	resp, b := s.Do("POST", alphaPath+"?beta=true;stream=true", messagesHeaders(acct.Key), messagesBody(false, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var last launch.Record
	for _, r := range s.Primary.Requests() {
		if r.Path == "/v1/messages" {
			last = r
		}
	}
	if last.Query != "beta=true" {
		t.Errorf("the vendor received the query %q, want beta=true", last.Query)
	}
}

// A model name with a NUL or another control character is refused at the
// door with 400 in the vendor's format, even under unknown_model: fallback
// (which prices any name): nothing reaches the vendor, nothing is held or
// stored, so no ledger row can carry it to PostgreSQL.
func TestControlCharactersInModelNamesRefused(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			in, out := 1.0, 2.0
			c.Upstreams[i].Models.UnknownModel = config.UnknownFallback
			c.Upstreams[i].Models.Fallback = &config.Price{Input: &in, Output: &out, MaxOutput: 4096}
		}
	}})
	acct := s.NewAccount(10, noLimits)
	before := s.Primary.APIRequests() // probes (health checks) aside
	for _, name := range []string{`made-up\u0000x`, `made-up\u001b[31m`, `made-up\u0085`, `tab\tmodel`} {
		body := fmt.Sprintf(`{"model":"%s","max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`, name)
		resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), []byte(body))
		var e alphaError
		if resp.StatusCode != 400 || json.Unmarshal(b, &e) != nil || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "control characters") {
			t.Errorf("model %s: %d %s; want 400 invalid_request_error naming control characters", name, resp.StatusCode, b)
		}
	}
	body := `{"model":"made-up\u0000x","messages":[{"role":"user","content":"Hi"}]}`
	if resp, b := s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), []byte(body)); resp.StatusCode != 400 {
		t.Errorf("chat completions: %d %s; want 400", resp.StatusCode, b)
	}
	if n := s.Primary.APIRequests() - before; n != 0 {
		t.Errorf("%d refused requests reached the vendor", n)
	}
	if entries := allLedgerEntries(t, s, acct.ID); len(entries) != 0 {
		t.Errorf("the ledger holds %d entries for refused requests", len(entries))
	}
	if n, held, err := s.Store.OpenHolds(context.Background(), acct.ID); err != nil || n != 0 || held != 0 {
		t.Errorf("open holds %d (%d), %v", n, held, err)
	}
}
