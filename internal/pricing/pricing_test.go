package pricing

import (
	"math"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
)

func table() *Table {
	return NewTable([]config.Model{
		{Name: "gpt-4o", Input: 2.5, Output: 10, CacheRead: 1.25, MaxOutput: 16384},
		{Name: "gpt-4o-mini", Input: 0.15, Output: 0.6, CacheRead: 0.075, MaxOutput: 16384},
		{Name: "claude-sonnet-4-5", Aliases: []string{"sonnet"}, Input: 3, Output: 15, CacheWrite: 3.75, CacheRead: 0.3, MaxOutput: 64000},
	})
}

func TestLookup(t *testing.T) {
	tab := table()
	for model, want := range map[string]string{
		"gpt-4o":                     "gpt-4o",
		"gpt-4o-2024-08-06":          "gpt-4o",
		"gpt-4o-mini":                "gpt-4o-mini",
		"gpt-4o-mini-2024-07-18":     "gpt-4o-mini",
		"claude-sonnet-4-5-20250929": "claude-sonnet-4-5",
		"sonnet":                     "claude-sonnet-4-5",
	} {
		p, ok := tab.Lookup(model)
		if !ok || p.Model != want {
			t.Errorf("Lookup(%q) = %q, %v; want %q", model, p.Model, ok, want)
		}
	}
	for _, model := range []string{"", "gpt-4", "gpt-4ox", "claude", "unknown"} {
		if p, ok := tab.Lookup(model); ok {
			t.Errorf("Lookup(%q) = %q; want no price", model, p.Model)
		}
	}
}

func TestCostIsExact(t *testing.T) {
	p, _ := table().Lookup("claude-sonnet-4-5")
	// 1000 input at $3/M = $0.003; 500 output at $15/M = $0.0075;
	// 2000 cache write at $3.75/M = $0.0075; 10000 cache read at $0.30/M = $0.003.
	got := p.Cost(Tokens{Input: 1000, Output: 500, CacheWrite: 2000, CacheRead: 10000})
	if want := int64(21_000_000); got != want {
		t.Fatalf("Cost = %d nano-USD, want %d", got, want)
	}
	// A fraction of a nano-USD rounds up.
	// 1 token at $0.0755/M is 75.5 nano-USD.
	if got := (Price{CacheRead: 75_500_000}).Cost(Tokens{CacheRead: 1}); got != 76 {
		t.Fatalf("Cost of one token = %d, want 76 (rounded up)", got)
	}
	if got := p.Cost(Tokens{}); got != 0 {
		t.Fatalf("Cost of nothing = %d", got)
	}
}

func TestHoldCoversAnyRealCost(t *testing.T) {
	p, _ := table().Lookup("claude-sonnet-4-5")
	body, maxOut := int64(4000), int64(1000)
	hold := p.Hold(body, maxOut)
	// Any split of at most body tokens of input (incl. cache) and at most
	// maxOut output costs no more than the hold.
	for _, tk := range []Tokens{
		{Input: body, Output: maxOut},
		{CacheWrite: body, Output: maxOut},
		{Input: body / 2, CacheWrite: body / 2, Output: maxOut},
		{CacheRead: body, Output: maxOut},
	} {
		if c := p.Cost(tk); c > hold {
			t.Errorf("Cost(%+v) = %d exceeds hold %d", tk, c, hold)
		}
	}
}

func TestCostSaturates(t *testing.T) {
	p, _ := table().Lookup("gpt-4o")
	if c := p.Cost(Tokens{Input: math.MaxInt64, Output: math.MaxInt64}); c <= 0 {
		t.Fatalf("overflowing cost = %d, want a large positive number", c)
	}
}

func TestNanoUSDRounds(t *testing.T) {
	// 0.29 is not exact in binary: 0.29 × 1e9 = 289999999.99999994.
	if got := NanoUSD(0.29); got != 290_000_000 {
		t.Fatalf("NanoUSD(0.29) = %d, want 290000000", got)
	}
	// A nano-USD amount turned into dollars and back comes back whole.
	for _, n := range []int64{1, 999, 123_456_789, 7_000_000_001} {
		if got := NanoUSD(float64(n) / NanoPerUSD); got != n {
			t.Fatalf("round trip of %d = %d", n, got)
		}
	}
}
