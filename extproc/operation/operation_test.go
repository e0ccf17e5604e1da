package operation

import (
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// holdModel has every kind of price a request can trigger: cache writes of
// both lifetimes, a long-context tier above 200k prompt tokens and a
// priority service tier dearer still.
func holdModel(t *testing.T) *pricing.Model {
	t.Helper()
	cat := map[string]pricing.CatalogueEntry{"m": {Name: "m", Provider: "openai", MaxOutput: 4000, Prices: map[pricing.PriceKey]int64{
		{Kind: "input"}:                    1_000_000,
		{Kind: "output"}:                   2_000_000,
		{Kind: "cache_read"}:               100_000,
		{Kind: "cache_write_5m"}:           1_250_000,
		{Kind: "cache_write_1h"}:           2_000_000,
		{Kind: "input", Above: 200_000}:    3_000_000,
		{Kind: "output", Above: 200_000}:   4_500_000,
		{Kind: "input", Tier: "priority"}:  3_500_000,
		{Kind: "output", Tier: "priority"}: 8_000_000,
	}}}
	tbl, err := pricing.NewTable(cat, config.Models{Providers: []string{"openai"}})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := tbl.Lookup("m")
	if !ok {
		t.Fatal("model m not in the table")
	}
	return m
}

func TestHoldOf(t *testing.T) {
	m := holdModel(t)
	const body = 2000
	req := format.Request{Model: "m", HasMaxTokens: true, MaxTokens: 300, Choices: 3, HasTools: true}
	got := holdFor(m, req, body)
	// (2000 bytes + 1000 tool tokens) at the dearest input-side price (the
	// priority input, 3.5 USD/M) + 3 × 300 output tokens at the dearest
	// output price (priority, 8 USD/M).
	want := int64((body+ToolPromptAllowance)*3_500_000/1_000_000 + 3*300*8_000_000/1_000_000)
	if got != want {
		t.Fatalf("hold %d, want %d", got, want)
	}
	// Without max_tokens: the model's maximum output, once per choice.
	if got, want := holdFor(m, format.Request{Model: "m"}, 10), int64(10*3_500_000/1_000_000+4000*8_000_000/1_000_000); got != want {
		t.Fatalf("hold without max_tokens %d, want %d", got, want)
	}
	// A huge n × max_tokens saturates instead of wrapping.
	if h := holdFor(m, format.Request{HasMaxTokens: true, MaxTokens: 1 << 62, Choices: 128}, 1); h <= 0 {
		t.Fatalf("hold %d wrapped", h)
	}

	// Whatever the vendor reports within the request's bounds (prompt tokens
	// up to one per body byte plus the tool prompt, output up to n ×
	// max_tokens, any split between input kinds, any tier), settlement
	// charges at most the hold.
	prompt := int64(body + ToolPromptAllowance)
	splits := []usage.Usage{
		{Input: prompt},
		{CacheWrite1h: prompt},
		{CacheWrite5m: prompt / 2, CacheRead: prompt / 2},
		{Input: prompt / 3, CacheWrite1h: prompt / 3, CacheRead: prompt / 3},
	}
	for _, tier := range []string{"", "priority", "flex", "unknown"} {
		for _, u := range splits {
			u.Output = 3 * 300
			if c := m.Price(u, tier, "").Cost; c > got {
				t.Errorf("tier %q usage %+v costs %d, above the hold %d", tier, u, c, got)
			}
		}
	}
}

// A prompt long enough for the long-context tier is priced there, and the
// hold still covers it.
func TestHoldOfLongContext(t *testing.T) {
	m := holdModel(t)
	const body = 300_000
	req := format.Request{Model: "m", HasMaxTokens: true, MaxTokens: 1000}
	hold := holdFor(m, req, body)
	c := m.Price(usage.Usage{Input: body, Output: 1000}, "", "")
	if c.Above != 200_000 {
		t.Fatalf("priced above %d, want the 200k tier", c.Above)
	}
	if c.Cost > hold {
		t.Fatalf("long-context cost %d above the hold %d", c.Cost, hold)
	}
}

// holdFor is the hold of req with a body of bodyBytes under TextBounds,
// as admission takes it.
func holdFor(m *pricing.Model, req format.Request, bodyBytes int64) int64 {
	return TextBounds(m, req, make([]byte, bodyBytes)).Hold(m)
}

// Seconds of audio are held at the dearest per-second price, beside the
// tokens; a model without one holds nothing for them, and seconds never
// count as tokens.
func TestHoldOfSeconds(t *testing.T) {
	cat := map[string]pricing.CatalogueEntry{"w": {Name: "w", Provider: "openai", Prices: map[pricing.PriceKey]int64{
		{Kind: "audio_seconds"}:                   100_000_000_000, // 1e-4 USD per second
		{Kind: "audio_seconds", Tier: "priority"}: 200_000_000_000,
	}}}
	tbl, err := pricing.NewTable(cat, config.Models{Providers: []string{"openai"}})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := tbl.Lookup("w")
	b := Bounds{Seconds: 90}
	if got, want := b.Hold(w), int64(90*200_000); got != want {
		t.Errorf("hold of 90 s = %d; want %d", got, want)
	}
	if b.Tokens() != 0 {
		t.Errorf("90 s count %d tokens", b.Tokens())
	}
	for _, tier := range []string{"", "priority"} {
		if c := w.Price(usage.Usage{AudioSeconds: 90}, tier, "").Cost; c > b.Hold(w) {
			t.Errorf("tier %q: 90 s cost %d above the hold %d", tier, c, b.Hold(w))
		}
	}
	m := holdModel(t)
	if got, want := (Bounds{Input: 10, Output: 10, Seconds: 1000}).Hold(m), (Bounds{Input: 10, Output: 10}).Hold(m); got != want {
		t.Errorf("a model without a per-second price holds %d for seconds", got-want)
	}
}
