package responses

import (
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// A request continuing a stored response is held for the model's input
// window besides its body; paid built-in tools for max_tool_calls calls
// at the dearest per-call price, or defaultHoldCalls without it.
func TestBounds(t *testing.T) {
	cat := map[string]pricing.CatalogueEntry{"r": {Name: "r", Provider: "openai", MaxOutput: 1000, MaxInput: 50_000, Prices: map[pricing.PriceKey]int64{
		{Kind: "input"}:                     1_000_000,
		{Kind: "output"}:                    2_000_000,
		{Kind: "web_searches"}:              10_000_000 * 1_000_000, // 0.01 USD per search
		{Kind: "code_interpreter_sessions"}: 30_000_000 * 1_000_000, // 0.03 USD per session
	}}}
	tbl, err := pricing.NewTable(cat, config.Models{Providers: []string{"openai"}})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := tbl.Lookup("r")
	base := holdFor(m, format.Request{HasMaxTokens: true, MaxTokens: 100}, 500)
	if want := int64(500*1 + 100*2); base != want {
		t.Fatalf("base hold %d, want %d", base, want)
	}
	if got, want := holdFor(m, format.Request{HasMaxTokens: true, MaxTokens: 100, Own: Fields{PreviousResponseID: "resp_1"}}, 500), base+50_000; got != want {
		t.Errorf("continuing hold %d, want %d (the 50,000-token window at 1 USD/M)", got, want)
	}
	if got, want := holdFor(m, format.Request{HasMaxTokens: true, MaxTokens: 100, Own: Fields{PaidTools: true, HasMaxToolCalls: true, MaxToolCalls: 2}}, 500), base+2*30_000_000; got != want {
		t.Errorf("two tool calls: hold %d, want %d", got, want)
	}
	if got, want := holdFor(m, format.Request{HasMaxTokens: true, MaxTokens: 100, Own: Fields{PaidTools: true}}, 500), base+defaultHoldCalls*30_000_000; got != want {
		t.Errorf("tools without max_tool_calls: hold %d, want %d", got, want)
	}
	// Two searches and a session within max_tool_calls 3 cost no more
	// than the hold.
	req := format.Request{HasMaxTokens: true, MaxTokens: 100, Own: Fields{PaidTools: true, HasMaxToolCalls: true, MaxToolCalls: 3}}
	if c := m.Price(usage.Usage{Input: 500, Output: 100, WebSearches: 2, CodeInterpreter: 1}, "", "").Cost; c > holdFor(m, req, 500) {
		t.Errorf("cost %d above the hold %d", c, holdFor(m, req, 500))
	}
}

// holdFor is the hold of req with a body of bodyBytes under the
// operation's hold rule, as admission takes it.
func holdFor(m *pricing.Model, req format.Request, bodyBytes int64) int64 {
	return Operation.RequestBounds(m, req, make([]byte, bodyBytes)).Hold(m)
}
