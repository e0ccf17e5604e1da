package pricing

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/usage"
)

// The fixture's prices are made up; only their shape is the catalogue's.
const fixture = "testdata/catalogue.json"

func f(v float64) *float64 { return &v }

func tables(t *testing.T, alpha, beta config.Models) (*Table, *Table) {
	t.Helper()
	cat, err := LoadCatalogue(fixture, []string{"anthropic", "openai"}, testModes)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewTable(cat, alpha)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTable(cat, beta)
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}

func defaultTables(t *testing.T) (*Table, *Table) {
	return tables(t,
		config.Models{Providers: []string{"anthropic"}, Aliases: map[string]string{"claude": "fake-claude-1"}, UnknownModel: config.UnknownReject},
		config.Models{Providers: []string{"openai"}, UnknownModel: config.UnknownReject})
}

func TestCatalogueReadsServedModelsOfTheProviders(t *testing.T) {
	cat, err := LoadCatalogue(fixture, []string{"openai"}, testModes)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"fake-gpt-1", "fake-gpt-1-2025-02-03", "fake-gpt-nolimit", "fake-gpt-responses", "fake-embedding"} {
		if _, ok := cat[n]; !ok {
			t.Errorf("%s missing", n)
		}
	}
	if cat["fake-gpt-responses"].Mode != "responses" || cat["fake-embedding"].Mode != "embedding" || cat["fake-gpt-1"].Mode != "chat" {
		t.Errorf("modes: %q %q %q", cat["fake-gpt-responses"].Mode, cat["fake-embedding"].Mode, cat["fake-gpt-1"].Mode)
	}
	for _, n := range []string{"fake-claude-1", "openai/fake-container", "other/fake-model", "sample_spec"} {
		if _, ok := cat[n]; ok {
			t.Errorf("%s read; want it left out", n)
		}
	}
	// Exact conversion: 2.5e-09 USD per token is 2,500,000 nano-USD per million.
	if got := cat["fake-gpt-nolimit"].Prices[PriceKey{Kind: "input"}]; got != 2_500_000 {
		t.Errorf("fake-gpt-nolimit input = %d nano-USD/M; want 2500000", got)
	}
	if cat["fake-gpt-nolimit"].MaxOutput != 0 || cat["fake-gpt-1"].MaxOutput != 100000 {
		t.Errorf("max output: %d, %d", cat["fake-gpt-nolimit"].MaxOutput, cat["fake-gpt-1"].MaxOutput)
	}
}

func TestCatalogueIsStrict(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"string price", `{"m1": {"litellm_provider": "openai", "mode": "chat", "max_output_tokens": 10, "input_cost_per_token": "1", "output_cost_per_token": 1e-6}}`, `model "m1": input_cost_per_token`},
		{"negative price", `{"m2": {"litellm_provider": "openai", "mode": "chat", "max_output_tokens": 10, "input_cost_per_token": 1e-6, "output_cost_per_token": -1e-6}}`, `model "m2": output_cost_per_token`},
		{"sub-nano price", `{"m3": {"litellm_provider": "openai", "mode": "chat", "max_output_tokens": 10, "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6, "cache_read_input_token_cost": 1e-16}}`, `model "m3": cache_read_input_token_cost`},
		{"bad max output", `{"m4": {"litellm_provider": "openai", "mode": "chat", "max_output_tokens": 1.5, "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6}}`, `model "m4": max_output_tokens`},
		{"bad search fee", `{"m5": {"litellm_provider": "openai", "mode": "chat", "max_output_tokens": 1, "input_cost_per_token": 1e-6, "output_cost_per_token": 1e-6, "search_context_cost_per_query": 0.01}}`, `model "m5": search_context_cost_per_query`},
		{"not json", `[1, 2]`, "not a catalogue"},
	} {
		_, err := ParseCatalogue([]byte(tc.json), []string{"openai"}, testModes)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want it to contain %q", tc.name, err, tc.want)
		}
	}
}

func TestLookupNeverByPrefix(t *testing.T) {
	a, b := defaultTables(t)
	for name, want := range map[string]usage.PricedModel{
		"fake-claude-1":            "fake-claude-1",
		"fake-claude-1-20250101":   "fake-claude-1", // same prices: folded into its undated name
		"fake-claude-1-20991231":   "fake-claude-1", // a snapshot the catalogue does not list yet
		"fake-claude-1-2099-12-31": "fake-claude-1",
		"claude":                   "fake-claude-1", // alias
		"fake-claude-1-mini":       "fake-claude-1-mini",
	} {
		m, ok := a.Lookup(name)
		if !ok || m.Name != want {
			t.Errorf("alpha Lookup(%q) = %v, %v; want %q", name, m, ok, want)
		}
	}
	for _, name := range []string{"", "fake-claude", "fake-claude-1-max", "fake-claude-1x", "fake-claude-1-20251301", "fake-claude-1-2025010", "fake-gpt-1", "claude-x"} {
		if m, ok := a.Lookup(name); ok {
			t.Errorf("alpha Lookup(%q) = %s; want unknown", name, m.Name)
		}
	}
	// A dated entry with prices of its own stays its own model.
	m, ok := b.Lookup("fake-gpt-1-2025-02-03")
	if !ok || m.Name != "fake-gpt-1-2025-02-03" {
		t.Errorf("beta dated entry = %v, %v", m, ok)
	}
	if m, ok := b.Lookup("fake-gpt-1-mini"); ok {
		t.Errorf("beta Lookup(fake-gpt-1-mini) = %s; want unknown", m.Name)
	}
}

func TestEveryDimensionIsPriced(t *testing.T) {
	a, b := defaultTables(t)
	claude, _ := a.Lookup("fake-claude-1")
	gpt, _ := b.Lookup("fake-gpt-1")
	for _, tc := range []struct {
		name  string
		m     *Model
		u     usage.Usage
		tier  string
		want  int64 // nano-USD
		above int64
	}{
		// 1000×1000 + 100×10000 + 2000×100 + 300×2000 + 400×3000 + 2 searches × 2e6, in nano-USD.
		{"claude short", claude, usage.Usage{Input: 1000, Output: 100, CacheRead: 2000, CacheWrite5m: 300, CacheWrite1h: 400, WebSearches: 2, Reasoning: 50},
			"", 1_000_000 + 1_000_000 + 200_000 + 600_000 + 1_200_000 + 4_000_000, 0},
		// Prompt 200,001 tokens: every kind at the long-context price where it has one.
		{"claude long context", claude, usage.Usage{Input: 100_001, CacheRead: 100_000, Output: 10},
			"", 100_001*2000 + 100_000*200 + 10*20_000, 200_000},
		// Exactly at the threshold is not above it.
		{"claude at threshold", claude, usage.Usage{Input: 200_000}, "", 200_000 * 1000, 0},
		{"gpt standard", gpt, usage.Usage{Input: 1000, Output: 100, CacheRead: 10, AudioInput: 7, AudioOutput: 3}, "default",
			1000*2000 + 100*8000 + 10*500 + 7*40_000 + 3*80_000, 0},
		{"gpt priority", gpt, usage.Usage{Input: 1000, Output: 100, CacheRead: 10}, "priority", 1000*4000 + 100*16_000 + 10*500, 0},
		{"gpt flex", gpt, usage.Usage{Input: 1000, Output: 100}, "flex", 1000*1000 + 100*4000, 0},
		{"gpt priority long", gpt, usage.Usage{Input: 300_000, Output: 1}, "priority", 300_000*6000 + 16_000, 272_000},
		{"gpt standard long", gpt, usage.Usage{Input: 300_000, Output: 1}, "", 300_000*3000 + 8000, 272_000},
		// Every "_<tier>" suffix is a tier; batch prices are not.
		{"gpt ultrafast", gpt, usage.Usage{Input: 1000, Output: 100}, "ultrafast", 1000*12_000 + 100*10_000, 0},
		{"gpt batches is unknown", gpt, usage.Usage{Input: 1000, Output: 100}, "batches", 1000*12_000 + 100*16_000, 0},
		// A tier without prices: the dearest of every tier, kind by kind
		// (ultrafast input, priority output), flagged.
		{"gpt unknown tier", gpt, usage.Usage{Input: 1000, Output: 100}, "scale", 1000*12_000 + 100*16_000, 0},
		{"gpt standard eu", gpt, usage.Usage{Input: 1000, Output: 100}, "", (1000*2000 + 100*8000) * 11 / 10, 0},
		{"gpt priority us", gpt, usage.Usage{Input: 1000, Output: 1}, "priority", (1000*4000 + 16_000) * 105 / 100, 0},
	} {
		region := ""
		switch {
		case strings.HasSuffix(tc.name, " eu"):
			region = "eu"
		case strings.HasSuffix(tc.name, " us"):
			region = "us"
		}
		c := tc.m.Price(tc.u, tc.tier, region)
		// Rates are per million; costs above are in nano-USD per token × tokens.
		if c.Cost != tc.want || c.Above != tc.above {
			t.Errorf("%s: cost %d above %d; want %d above %d", tc.name, c.Cost, c.Above, tc.want, tc.above)
		}
		unknown := tc.tier == "scale" || tc.tier == "batches"
		if c.UnknownTier != unknown || (c.Uplift != 0) != (region != "") {
			t.Errorf("%s: unknown tier %v, uplift %d", tc.name, c.UnknownTier, c.Uplift)
		}
	}
	// The hold covers the dearest tier and the largest uplift (here audio
	// prices are dearer still).
	h := gpt.Hold(1000, 100)
	if want := int64((1000*40_000 + 100*80_000) * 11 / 10); h != want {
		t.Errorf("hold %d, want %d", h, want)
	}
	// A regional endpoint for a model without an uplift costs the same.
	if c := claude.Price(usage.Usage{Input: 1000}, "", "eu"); c.Cost != 1_000_000 || c.Uplift != 0 {
		t.Errorf("claude eu: %+v", c)
	}
}

// A kind the catalogue gives no price for is charged as the kind it is a
// variant of, never free.
func TestMissingPricesAreNeverFree(t *testing.T) {
	a, b := defaultTables(t)
	mini, _ := a.Lookup("fake-claude-1-mini") // input and output prices only
	r, _ := mini.RatesFor(0, "")
	if r.CacheRead != 100_000_000 || r.CacheWrite5m != 100_000_000 || r.CacheWrite1h != 100_000_000 ||
		r.AudioInput != 100_000_000 || r.AudioOutput != 500_000_000 || r.WebSearches != 0 {
		t.Errorf("fake-claude-1-mini rates %+v", r)
	}
	// fake-gpt-1 lists no cache-write prices: they are the input price, at
	// the tier served.
	gpt, _ := b.Lookup("fake-gpt-1")
	if r, _ := gpt.RatesFor(0, "priority"); r.CacheWrite5m != 4_000_000_000 || r.CacheRead != 500_000_000 {
		t.Errorf("fake-gpt-1 priority rates %+v", r)
	}
}

func TestCostRoundsUpOnce(t *testing.T) {
	// 3 tokens at 2.5e-09 USD is 7.5 nano-USD: charged 8.
	if got := Cost(usage.Usage{Input: 3}, Rates{Input: 2_500_000}); got != 8 {
		t.Errorf("cost = %d; want 8", got)
	}
	// Two kinds of half a nano each sum to one, not two.
	if got := Cost(usage.Usage{Input: 1, Output: 1}, Rates{Input: 500_000, Output: 500_000}); got != 1 {
		t.Errorf("cost = %d; want 1", got)
	}
	if got := Cost(usage.Usage{Input: 1 << 62}, Rates{Input: 1 << 62}); got <= 0 {
		t.Errorf("overflowing cost = %d; want a large positive figure", got)
	}
}

// The 128-bit sum agrees with arbitrary-precision arithmetic, from single
// tokens to sums that do not fit in 64 bits, and allocates nothing.
func TestCostExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		var u usage.Usage
		var r Rates
		for _, k := range usage.Kinds {
			bitsQ, bitsR := rng.IntN(40), rng.IntN(40)
			if i%10 == 0 {
				bitsQ, bitsR = rng.IntN(63), rng.IntN(63)
			}
			k.Set(&u, rng.Int64N(1<<bitsQ+1))
			k.Set((*usage.Usage)(&r), rng.Int64N(1<<bitsR+1))
		}
		if got, want := Cost(u, r), exactCost(u, r); got != want {
			t.Fatalf("Cost(%+v, %+v) = %d; exact %d", u, r, got, want)
		}
	}
	if got := Cost(usage.Usage{Input: -5, Output: 10}, Rates{Input: 1_000_000, Output: 1_000_000}); got != 10 {
		t.Fatalf("a negative quantity added to the cost: %d, want 10", got)
	}
	u, r := usage.Usage{Input: 1234, Output: 567, CacheRead: 89}, Rates{Input: 3_000_000, Output: 15_000_000, CacheRead: 300_000}
	if n := testing.AllocsPerRun(100, func() { Cost(u, r) }); n != 0 {
		t.Fatalf("Cost allocates %v times", n)
	}
}

// exactCost is Cost in arbitrary precision, the reference for TestCostExact.
func exactCost(u usage.Usage, r Rates) int64 {
	var sum, prod big.Int
	for _, k := range usage.Kinds {
		if k.Priced() {
			prod.Mul(big.NewInt(k.Of(u)), big.NewInt(r.Of(k)))
			sum.Add(&sum, &prod)
		}
	}
	sum.Add(&sum, big.NewInt(999_999))
	sum.Quo(&sum, big.NewInt(1_000_000))
	if !sum.IsInt64() || sum.Int64() > math.MaxInt64/4 {
		return math.MaxInt64 / 4
	}
	return sum.Int64()
}

func TestOverridesAliasesAndFallback(t *testing.T) {
	a, b := tables(t,
		config.Models{
			Providers: []string{"anthropic"},
			Overrides: map[string]config.Price{
				"fake-claude-1": {Input: f(0.5), MaxOutput: 128000},
				"house-model": {Input: f(1), Output: f(2), WebSearch: f(0.01), MaxOutput: 1000,
					FileSearch: f(0.0025), CodeInterpreterSession: f(0.03), ImageGeneration: f(0.04)},
			},
			UnknownModel: config.UnknownFallback,
			Fallback:     &config.Price{Input: f(10), Output: f(20), MaxOutput: 4096},
		},
		config.Models{Providers: []string{"openai"}, UnknownModel: config.UnknownReject})
	m, _ := a.Lookup("fake-claude-1")
	if m.Source != "override" || m.MaxOutput != 128000 {
		t.Errorf("override: %+v", m)
	}
	// The contract input price is flat: it replaces the long-context one too.
	if c := m.Price(usage.Usage{Input: 300_000, Output: 1}, "", ""); c.Cost != 300_000*500+20_000 {
		t.Errorf("overridden long-context cost = %d", c.Cost)
	}
	h, ok := a.Lookup("house-model")
	if !ok || h.Price(usage.Usage{Input: 1, Output: 1, WebSearches: 1}, "", "").Cost != 1000+2000+10_000_000 {
		t.Errorf("house model: %v %v", h, ok)
	}
	// The built-in tools are priced per call or session.
	if c := h.Price(usage.Usage{FileSearches: 2, CodeInterpreter: 1, ImageGenerations: 3}, "", "").Cost; c != 2*2_500_000+30_000_000+3*40_000_000 {
		t.Errorf("house model's tool calls cost %d", c)
	}
	fb, ok := a.Lookup("someone-elses-model")
	if !ok || !fb.Fallback() || fb.Name != FallbackModel || fb.MaxOutput != 4096 || fb.Price(usage.Usage{Input: 1}, "", "").Cost != 10_000 {
		t.Errorf("fallback: %+v %v", fb, ok)
	}
	if _, ok := b.Lookup("someone-elses-model"); ok {
		t.Error("beta rejects unknown models")
	}
	// The price list ends with the fallback under the name asked for; the
	// table's own models and fallback are left as they were.
	list := a.PriceList("*")
	if n := len(a.Models()); len(list) != n+1 || list[n].Name != "*" || !list[n].Fallback() || list[n].MaxOutput != 4096 {
		t.Errorf("price list of %d models ends with %+v", len(list), list[len(list)-1])
	}
	if again := a.PriceList("other"); again[len(again)-1].Name != "other" || list[len(list)-1].Name != "*" {
		t.Error("a price list shares its fallback entry with another")
	}
	if fb, _ := a.Lookup("someone-elses-model"); fb.Name != FallbackModel {
		t.Errorf("the table's fallback was renamed %q", fb.Name)
	}
	if l := b.PriceList("*"); len(l) != len(b.Models()) {
		t.Errorf("a table without a fallback lists %d of %d models", len(l), len(b.Models()))
	}
	cat, _ := LoadCatalogue(fixture, []string{"anthropic"}, testModes)
	if _, err := NewTable(cat, config.Models{Providers: []string{"anthropic"}, Aliases: map[string]string{"x": "nope"}}); err == nil || !strings.Contains(err.Error(), "aliases[x]") {
		t.Errorf("alias to nothing: %v", err)
	}
	if _, err := NewTable(cat, config.Models{Providers: []string{"anthropic"}, Overrides: map[string]config.Price{"new": {Input: f(1)}}}); err == nil || !strings.Contains(err.Error(), "overrides[new]") {
		t.Errorf("incomplete new model: %v", err)
	}
}

func TestHoldCoversTheDearestPrice(t *testing.T) {
	_, b := defaultTables(t)
	m, _ := b.Lookup("fake-gpt-1")
	// Dearest input-side price: audio input 4e-05; output side: audio output
	// 8e-05; the largest regional uplift, 1.1.
	if got, want := m.Hold(1000, 10), int64(1000*40_000+10*80_000)*11/10; got != want {
		t.Errorf("hold = %d; want %d", got, want)
	}
}

func TestReplaceKeepsLookupsMade(t *testing.T) {
	a, _ := defaultTables(t)
	before, _ := a.Lookup("fake-claude-1")
	cheaper, _ := tables(t, config.Models{Providers: []string{"anthropic"}, Overrides: map[string]config.Price{"fake-claude-1": {Input: f(0.1)}}}, config.Models{Providers: []string{"openai"}})
	a.Replace(cheaper)
	after, _ := a.Lookup("fake-claude-1")
	if before.Price(usage.Usage{Input: 10}, "", "").Cost != 10_000 || after.Price(usage.Usage{Input: 10}, "", "").Cost != 1000 {
		t.Errorf("before %d after %d", before.Price(usage.Usage{Input: 10}, "", "").Cost, after.Price(usage.Usage{Input: 10}, "", "").Cost)
	}
}

// Which operations serve a model follows the catalogue's mode and, when
// listed, its supported_endpoints.
func TestServes(t *testing.T) {
	chat, responses, embeddings := []string{"chat"}, []string{"chat", "responses"}, []string{"embedding"}
	for _, tc := range []struct {
		m                     Model
		chat, resp, embedding bool
	}{
		{Model{Mode: "chat"}, true, true, false},
		{Model{Mode: "chat", Endpoints: []string{"/v1/chat/completions", "/v1/batch", "/v1/responses"}}, true, true, false},
		{Model{Mode: "chat", Endpoints: []string{"/v1/responses"}}, false, true, false},
		{Model{Mode: "chat", Endpoints: []string{"/v1/chat/completions"}}, true, false, false},
		{Model{Mode: "responses", Endpoints: []string{"/v1/responses", "/v1/batch"}}, false, true, false},
		{Model{Mode: "responses"}, false, true, false},
		{Model{Mode: "embedding"}, false, false, true},
		{Model{}, true, true, true}, // an operator's own model
	} {
		got := [3]bool{tc.m.Serves(chat, "/v1/chat/completions"), tc.m.Serves(responses, "/v1/responses"), tc.m.Serves(embeddings, "/v1/embeddings")}
		if want := [3]bool{tc.chat, tc.resp, tc.embedding}; got != want {
			t.Errorf("%s %v: serves chat, responses, embeddings = %v, want %v", tc.m.Mode, tc.m.Endpoints, got, want)
		}
	}
}

// The provider's code interpreter container price applies to each of its
// models, per session.
func TestContainerPrice(t *testing.T) {
	cat, err := ParseCatalogue([]byte(`{
		"m": {"litellm_provider": "openai", "mode": "chat", "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6},
		"openai/container": {"litellm_provider": "openai", "mode": "chat", "code_interpreter_cost_per_session": 0.03}
	}`), []string{"openai"}, []string{"chat"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cat) != 1 || cat["m"].Prices[PriceKey{Kind: "code_interpreter_sessions"}] != 30_000_000*1_000_000 {
		t.Fatalf("catalogue %+v", cat)
	}
}

// testModes are the catalogue modes the gateway's operations serve today
// (operations.All.Modes; this package cannot import the registry).
var testModes = []string{"chat", "responses", "embedding"}

// A model billed by the duration of its input audio loads with a price per
// second alone; one with token prices keeps its per-second price beside
// them; an entry with neither is still no model.
func TestPerSecondPrices(t *testing.T) {
	const cat = `{
	"fake-whisper": {"litellm_provider": "openai", "mode": "audio_transcription", "input_cost_per_second": 0.0001, "output_cost_per_second": 0.0001},
	"fake-transcribe": {"litellm_provider": "openai", "mode": "audio_transcription", "max_input_tokens": 16000, "max_output_tokens": 2000,
		"input_cost_per_token": 2.5e-06, "input_cost_per_audio_token": 2.5e-06, "output_cost_per_token": 1e-05, "input_cost_per_second": 0.0001},
	"fake-live": {"litellm_provider": "openai", "mode": "audio_transcription", "input_cost_per_second": 0.000283333333333},
	"fake-tool": {"litellm_provider": "openai", "mode": "audio_transcription", "output_cost_per_second": 0.0001}
}`
	entries, err := ParseCatalogue([]byte(cat), []string{"openai"}, []string{"audio_transcription"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := entries["fake-tool"]; ok {
		t.Error("an entry without an input price read as a model")
	}
	w := entries["fake-whisper"]
	// 1e-4 USD per second is 100,000,000,000 nano-USD per million seconds;
	// output_cost_per_second is not a price the gateway charges.
	if len(w.Prices) != 1 || w.Prices[PriceKey{Kind: "audio_seconds"}] != 100_000_000_000 || w.MaxInput != 0 || w.MaxOutput != 0 {
		t.Errorf("fake-whisper: %+v", w)
	}
	if got := entries["fake-live"].Prices[PriceKey{Kind: "audio_seconds"}]; got != 283_333_333_333 {
		t.Errorf("fake-live per second = %d", got)
	}
	tab, err := NewTable(entries, config.Models{Providers: []string{"openai"}})
	if err != nil {
		t.Fatal(err)
	}
	whisper, _ := tab.Lookup("fake-whisper")
	tr, _ := tab.Lookup("fake-transcribe")
	if !whisper.HasPrice("audio_seconds") || whisper.HasPrice("input") || !tr.HasPrice("audio_seconds") || !tr.HasPrice("audio_input") {
		t.Error("HasPrice")
	}
	// 61 seconds at 1e-4 USD: 6,100,000 nano-USD.
	if c := whisper.Price(usage.Usage{AudioSeconds: 61}, "", ""); c.Cost != 6_100_000 || c.Rates.AudioSeconds != 100_000_000_000 {
		t.Errorf("61 s cost %d at %d", c.Cost, c.Rates.AudioSeconds)
	}
	// Seconds are never priced as tokens, nor tokens as seconds.
	if c := whisper.Price(usage.Usage{Input: 1000, Output: 1000}, "", ""); c.Cost != 0 {
		t.Errorf("tokens on a per-second model cost %d", c.Cost)
	}
	if got := whisper.UnitHold(usage.Second, 61); got != 6_100_000 {
		t.Errorf("hold of 61 s = %d", got)
	}
	if got := tr.UnitHold(usage.Second, 0); got != 0 {
		t.Errorf("hold of 0 s = %d", got)
	}
	if got := tr.Hold(16000, 2000); got != 16000*2500+2000*10000 {
		t.Errorf("token hold = %d", got)
	}

	// A per-second price is read as strictly as any other.
	bad := `{"m": {"litellm_provider": "openai", "mode": "audio_transcription", "input_cost_per_second": -1}}`
	if _, err := ParseCatalogue([]byte(bad), []string{"openai"}, []string{"audio_transcription"}); err == nil || !strings.Contains(err.Error(), `model "m": input_cost_per_second`) {
		t.Errorf("negative per-second price: %v", err)
	}
}

func TestFormatUSD(t *testing.T) {
	for nano, want := range map[int64]string{0: "0.00", 1: "0.000000001", 1_500_000_000: "1.50", -2_000_000_123: "-2.000000123", 10_000_000: "0.01"} {
		if got := FormatUSD(nano); got != want {
			t.Errorf("FormatUSD(%d) = %s, want %s", nano, got, want)
		}
	}
}

// A contract price is for the model: an override of a name applies to the
// catalogue's dated snapshots of it too (NAME-YYYYMMDD, NAME-YYYY-MM-DD),
// each keeping the catalogue's prices of the kinds the override leaves
// unset; an override of a snapshot itself wins; other names that start with
// the overridden one keep their catalogue prices.
func TestOverrideAppliesToDatedSnapshots(t *testing.T) {
	entry := func(in, out string) string {
		return `{"litellm_provider": "anthropic", "mode": "chat", "max_output_tokens": 8000, "input_cost_per_token": ` + in + `, "output_cost_per_token": ` + out + `}`
	}
	cat, err := ParseCatalogue([]byte(`{
		"model-a": `+entry("1e-06", "5e-06")+`,
		"model-a-20250101": `+entry("1e-06", "5e-06")+`,
		"model-a-2025-06-01": `+entry("2e-06", "7e-06")+`,
		"model-a-20250301": `+entry("1e-06", "5e-06")+`,
		"model-a-20251399": `+entry("1e-06", "5e-06")+`,
		"model-a-mini": `+entry("1e-06", "5e-06")+`,
		"model-b-20250101": `+entry("3e-06", "9e-06")+`
	}`), []string{"anthropic"}, testModes)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := NewTable(cat, config.Models{Providers: []string{"anthropic"}, UnknownModel: config.UnknownReject, Overrides: map[string]config.Price{
		"model-a":          {Input: f(0.5), MaxOutput: 4000},
		"model-a-20250301": {Input: f(0.25)},
		"model-b":          {Input: f(0.1), Output: f(0.2), MaxOutput: 1000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, priced  string
		input, output int64 // nano-USD per million
		maxOut        int64
		source        string
	}{
		{"model-a", "model-a", 500_000_000, 5_000_000_000, 4000, "override"},
		// Same catalogue prices as model-a: overridden alike, so one model.
		{"model-a-20250101", "model-a", 500_000_000, 5_000_000_000, 4000, "override"},
		// Its own catalogue output price stays; the contract input applies.
		{"model-a-2025-06-01", "model-a-2025-06-01", 500_000_000, 7_000_000_000, 4000, "override"},
		{"model-a-20250301", "model-a-20250301", 250_000_000, 5_000_000_000, 8000, "override"},
		{"model-a-20251399", "model-a-20251399", 1_000_000_000, 5_000_000_000, 8000, "catalogue"},
		{"model-a-mini", "model-a-mini", 1_000_000_000, 5_000_000_000, 8000, "catalogue"},
		{"model-b", "model-b", 100_000_000, 200_000_000, 1000, "override"},
		{"model-b-20250101", "model-b-20250101", 100_000_000, 200_000_000, 1000, "override"},
	} {
		m, ok := tbl.Lookup(c.name)
		if !ok {
			t.Errorf("%s: not served", c.name)
			continue
		}
		r, _ := m.RatesFor(0, "")
		if string(m.Name) != c.priced || r.Input != c.input || r.Output != c.output || m.MaxOutput != c.maxOut || m.Source != c.source {
			t.Errorf("%s: priced as %s at %d/%d, max output %d, %s; want %s at %d/%d, %d, %s",
				c.name, m.Name, r.Input, r.Output, m.MaxOutput, m.Source, c.priced, c.input, c.output, c.maxOut, c.source)
		}
	}
}

// A table's least hold is the least a one-byte request, a second of audio
// or an image holds on any of its models, and follows Replace: it is the
// version's, not a copy kept beside it.
func TestLeastHold(t *testing.T) {
	a, b := defaultTables(t)
	least := func(tab *Table) int64 {
		l := int64(-1)
		for _, m := range tab.Models() {
			h := max(m.Hold(1, 0), m.UnitHold(usage.Second, 1), m.UnitHold(usage.Image, 1))
			if l < 0 || h < l {
				l = h
			}
		}
		return l
	}
	la, lb := least(a), least(b)
	if la <= 0 || lb <= 0 || la == lb {
		t.Fatalf("least holds %d and %d: the test needs two priced tables that differ", la, lb)
	}
	if got := a.LeastHold(); got != la {
		t.Fatalf("least hold %d, want %d", got, la)
	}
	a.Replace(b)
	if got := a.LeastHold(); got != lb {
		t.Fatalf("after Replace: least hold %d, want %d", got, lb)
	}
	if got := (&Table{}).LeastHold(); got != 0 {
		t.Fatalf("an empty table's least hold %d", got)
	}
	// A fallback price below every model's: a request naming an unknown
	// model holds that little, so the pre-check must not ask for more.
	cheap, _ := tables(t, config.Models{Providers: []string{"anthropic"}, UnknownModel: config.UnknownFallback,
		Fallback: &config.Price{Input: f(0.000001), Output: f(0.000001), MaxOutput: 1}},
		config.Models{Providers: []string{"openai"}, UnknownModel: config.UnknownReject})
	fb, ok := cheap.Lookup("someone-elses-model")
	if !ok || !fb.Fallback() {
		t.Fatal("no fallback price")
	}
	want := max(fb.Hold(1, 0), fb.UnitHold(usage.Second, 1), fb.UnitHold(usage.Image, 1))
	if want >= least(cheap) {
		t.Fatalf("the fallback's hold %d is not below every model's (%d): the test shows nothing", want, least(cheap))
	}
	if got := cheap.LeastHold(); got != want {
		t.Fatalf("least hold %d with a cheaper fallback, want the fallback's %d", got, want)
	}
}
