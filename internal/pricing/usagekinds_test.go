package pricing

import (
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/usage"
)

// The hold prices each priced usage kind on exactly one side: the input
// side (Hold's body bytes) or the output side (Hold's maxOutput) for a
// token kind, by its declared side, or by its unit's count (UnitHold) for
// the others; the input side is what Usage.Prompt measures for
// long-context tiers. A kind declared in internal/usage is held by what
// its declaration says, or fails here: a kind on no side would be held for
// nothing.
func TestHoldCoversEveryPricedKind(t *testing.T) {
	for _, k := range usage.Kinds {
		m := &Model{Name: "m", prices: map[PriceKey]int64{{Kind: k.Name}: 1_000_000}}
		in := m.Hold(1_000_000, 0) > 0
		out := m.Hold(0, 1_000_000) > 0
		var units []usage.Unit
		for _, u := range []usage.Unit{usage.Call, usage.Second, usage.Image} {
			if m.UnitHold(u, 1_000_000) > 0 {
				units = append(units, u)
			}
		}
		if k.Priced() && k.Unit != usage.Token && (len(units) != 1 || units[0] != k.Unit) {
			t.Errorf("%s: held per unit %v, want %v", k.Name, units, k.Unit)
		}
		sides := len(units)
		for _, b := range []bool{in, out} {
			if b {
				sides++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[k.Priced()]; sides != want {
			t.Errorf("%s (priced %v): held on %d sides (input %v, output %v, units %v), want %d", k.Name, k.Priced(), sides, in, out, units, want)
		}
		if k.Unit == usage.Token && k.Priced() && (in != (k.Side == usage.SideInput) || out != (k.Side == usage.SideOutput)) {
			t.Errorf("%s: held as input %v, output %v; declared side %v", k.Name, in, out, k.Side)
		}
		var u usage.Usage
		k.Set(&u, 1)
		if prompt := u.Prompt() == 1; prompt != in {
			t.Errorf("%s: in the prompt %v, held as input %v", k.Name, prompt, in)
		}
	}
}

// Every kind the declarations say is priced from the catalogue is read
// from it, and a kind without a price of its own takes the one its
// declaration names.
func TestCatalogueFieldsAreTheKinds(t *testing.T) {
	for _, k := range usage.Kinds {
		for _, f := range k.Catalogue {
			if f == searchField || f == containerField {
				continue
			}
			kind, above, tier, ok := splitField(f)
			if !ok || kind != k.Name || above != 0 || tier != "" {
				t.Errorf("%s: catalogue field %s reads as %q %d %q %v", k.Name, f, kind, above, tier, ok)
			}
			if _, ok := notRead[f]; ok {
				t.Errorf("%s: %s both read and not read", k.Name, f)
			}
		}
		if k.Else == "" {
			continue
		}
		m := &Model{Name: "m", prices: map[PriceKey]int64{{Kind: k.Else}: 7}}
		if r, _ := m.RatesFor(0, ""); r.Of(k) != 7 {
			t.Errorf("%s without a price: %d, want %s's 7", k.Name, r.Of(k), k.Else)
		}
	}
}

// Pricing a reply reads the model's rows, never a map, and allocates
// nothing; nor does the hold, nor resolving a dated name.
func TestPricingDoesNotAllocate(t *testing.T) {
	_, b := defaultTables(t)
	gpt, _ := b.Lookup("fake-gpt-1")
	u := usage.Usage{Input: 300_000, Output: 100, CacheRead: 10, AudioInput: 7, ImageOutput: 5}
	var sink int64
	if n := testing.AllocsPerRun(100, func() {
		for _, tier := range []string{"", "priority", "no-such-tier"} {
			sink += gpt.Price(u, tier, "eu").Cost
		}
		sink += gpt.Hold(1000, 2000) + gpt.UnitHold(usage.Call, 2)
		if gpt.HasPrice("audio_seconds") {
			sink++
		}
		if m, ok := b.Lookup("fake-gpt-1-2099-12-31"); ok {
			sink += m.MaxOutput
		}
	}); n != 0 {
		t.Fatalf("%v allocations per priced reply", n)
	}
	_ = sink
}

func BenchmarkPrice(b *testing.B) {
	cat, err := LoadCatalogue(fixture, []string{"openai"}, testModes)
	if err != nil {
		b.Fatal(err)
	}
	tab, err := NewTable(cat, config.Models{Providers: []string{"openai"}})
	if err != nil {
		b.Fatal(err)
	}
	gpt, _ := tab.Lookup("fake-gpt-1")
	u := usage.Usage{Input: 1000, Output: 100, CacheRead: 10}
	b.ReportAllocs()
	for b.Loop() {
		gpt.Price(u, "default", "")
	}
}

// An operator's own model priced per image (or per second) alone needs no
// token prices: it is billed by that kind, held per unit.
func TestOwnModelPricedAlone(t *testing.T) {
	per := 0.04
	tab, err := NewTable(nil, config.Models{Overrides: map[string]config.Price{"dall-e-3": {Images: &per}}})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := tab.Lookup("dall-e-3")
	if !ok || !m.HasPrice("images") || m.HasPrice("input") {
		t.Fatalf("dall-e-3: %v %v", m, ok)
	}
	if c := m.Price(usage.Usage{Images: 2, Input: 100}, "", ""); c.Cost != 80_000_000 {
		t.Errorf("two images cost %d", c.Cost)
	}
	if h := m.UnitHold(usage.Image, 3); h != 120_000_000 {
		t.Errorf("hold of three images %d", h)
	}
}

// Of a kind's several catalogue fields the first its declaration lists
// prices it, whatever the order the entry's fields are read in: an image
// generated is the entry's output_cost_per_image where it gives one beside
// input_cost_per_image (a prompt image's price), else its
// input_cost_per_image.
func TestCatalogueImagePriceOfTwoFields(t *testing.T) {
	data := []byte(`{
		"both": {"litellm_provider": "p", "mode": "image_generation", "input_cost_per_image": 0.0011, "output_cost_per_image": 0.134},
		"both-zero": {"litellm_provider": "p", "mode": "image_generation", "output_cost_per_image": 0.008, "input_cost_per_image": 0.0},
		"input-only": {"litellm_provider": "p", "mode": "image_generation", "input_cost_per_image": 0.04}
	}`)
	want := map[string]int64{"both": 134_000_000_000_000, "both-zero": 8_000_000_000_000, "input-only": 40_000_000_000_000}
	for range 50 { // map order varies from run to run
		cat, err := ParseCatalogue(data, []string{"p"}, []string{"image_generation"})
		if err != nil {
			t.Fatal(err)
		}
		for name, w := range want {
			if got := cat[name].Prices[PriceKey{Kind: "images"}]; got != w {
				t.Fatalf("%s: %d per million images, want %d", name, got, w)
			}
		}
	}
	// Three images cost three times the entry's price, to the nano-USD.
	cat, err := ParseCatalogue(data, []string{"p"}, []string{"image_generation"})
	if err != nil {
		t.Fatal(err)
	}
	tab, err := NewTable(cat, config.Models{Providers: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := tab.Lookup("both")
	if c := m.Price(usage.Usage{Images: 3}, "", ""); c.Cost != 3*134_000_000 {
		t.Errorf("three images of both: %d nano-USD, want %d", c.Cost, 3*134_000_000)
	}
}
