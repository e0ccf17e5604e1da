// Package pricing turns usage into money. Prices come from the catalogue (see
// LoadCatalogue) with the operator's overrides, and are kept as integer
// nano-USD per million units, so that every cost is exact integer arithmetic
// and sums of costs never drift.
//
// Rounding: a request's cost is the sum over its usage kinds of quantity ×
// unit price, computed exactly, then rounded up once to a whole nano-USD.
package pricing

import (
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/usage"
)

// NanoPerUSD is the number of nano-USD in one USD.
const NanoPerUSD = 1_000_000_000

// Rates are unit prices, one per usage kind, in nano-USD per million units
// (tokens, calls, seconds or images: usage.Kind.Unit). They have the shape of a Usage so
// that a price and the quantity it prices share one field name.
type Rates usage.Usage

// Of returns the rate of kind k.
func (r Rates) Of(k usage.Kind) int64 { return k.Of(usage.Usage(r)) }

// Model is one served model with all of its prices.
type Model struct {
	Name usage.PricedModel
	// MaxOutput is the most output tokens the model can produce; 0 when the
	// catalogue does not say.
	MaxOutput int64
	// MaxInput is the model's context window in tokens; 0 when the
	// catalogue does not say.
	MaxInput int64
	// Source is "catalogue", "override" (an operator price replaced at least
	// one catalogue figure, or the model is the operator's own) or
	// "fallback" (the upstream's price for unknown models).
	Source string
	// Aliases are the other names that resolve to this model.
	Aliases []string
	// Mode and Endpoints are the catalogue's mode and supported_endpoints;
	// empty for a model the catalogue does not list.
	Mode      string
	Endpoints []string
	prices    map[PriceKey]int64
	// uplift is the regional processing uplift by region, in parts per
	// million (catalogue.go).
	uplift map[string]int64
	// rows are what a request is priced from, built from prices and
	// uplift once (index), so that pricing a reply reads no map and
	// allocates nothing.
	rows *priceRows
}

// priceRows are a model's prices as the requests use them: the rates of
// every long-context threshold and tier, each a row indexed by kind, and
// the hold's dearest prices.
type priceRows struct {
	thresholds []int64  // ascending
	tiers      []string // the tiers with prices of their own, sorted
	// rates[a][t]: prompts above thresholds[a-1] (a = 0: below every
	// threshold), at tiers[t-1] (t = 0: the standard tier; t =
	// len(tiers)+1: a tier without prices, the dearest of all).
	rates [][]Rates
	// The hold's prices: the dearest of each token side and of each unit
	// (indexed by usage.Unit), at any tier and threshold.
	in, out int64
	unit    [4]int64
	has     uint64 // bit i: a price of usage.Kinds[i] of the model's own
	uplifts []regionUplift
	upMax   int64 // the largest uplift, in parts per million
}

type regionUplift struct {
	region string
	ppm    int64
}

// Serves reports whether an operation whose catalogue modes are modes and
// whose vendor path is path serves the model: its mode is one of modes and
// its supported_endpoints, when the catalogue gives them, include path. A
// model the catalogue does not list (an operator's own, the fallback
// price) is served by every operation of its upstream.
func (m *Model) Serves(modes []string, path string) bool {
	if m.Mode == "" {
		return true
	}
	return slices.Contains(modes, m.Mode) && (len(m.Endpoints) == 0 || slices.Contains(m.Endpoints, path))
}

// maxUpliftPPM bounds a regional uplift: 16 times.
const maxUpliftPPM = 16_000_000

// Uplift returns the model's regional processing uplift for region, in
// parts per million; 0 when the catalogue gives none (the cost is not
// scaled).
func (m *Model) Uplift(region string) int64 {
	if region == "" {
		return 0
	}
	for _, u := range m.index().uplifts {
		if u.region == region {
			return u.ppm
		}
	}
	return 0
}

// StandardTier reports whether a reported service tier name is the standard
// tier: none, or the vendors' names for it.
func StandardTier(tier string) bool {
	switch tier {
	case "", "default", "standard", "auto":
		return true
	}
	return false
}

// Fallback reports whether the model is the upstream's fallback price.
func (m *Model) Fallback() bool { return m.Source == "fallback" }

// Thresholds returns the model's long-context thresholds, ascending. The
// slice is the model's: callers must not change it.
func (m *Model) Thresholds() []int64 { return m.index().thresholds }

// Tiers returns the service tiers that have prices of their own, sorted.
// The slice is the model's: callers must not change it.
func (m *Model) Tiers() []string { return m.index().tiers }

// RatesFor returns the unit prices that apply to a request whose prompt is
// prompt tokens, served at the given service tier: the prices of the highest
// long-context threshold the prompt is above (the whole request at that
// tier's prices, as the vendors bill), and of the tier when the catalogue
// gives it. A kind without a price at that threshold and tier takes, in
// order, the tier's price below any threshold, the threshold's standard price,
// then the standard price. The standard tier's names (StandardTier) are the
// standard tier; a tier the model has no prices for is priced at the dearest
// of its tiers, kind by kind, since it may be dearer than any.
//
// A kind the model has no price for at all is charged as the kind it is a
// variant of (usage.Kind.Else), so that usage is never free by omission;
// web searches without a listed fee cost nothing.
func (m *Model) RatesFor(prompt int64, tier string) (r Rates, above int64) {
	x := m.index()
	a, t, _ := x.find(prompt, tier)
	if a > 0 {
		above = x.thresholds[a-1]
	}
	return x.rates[a][t], above
}

// find returns the row of a prompt and a tier: the threshold's index, the
// tier's, and whether the tier has prices of its own (or is standard).
func (x *priceRows) find(prompt int64, tier string) (a, t int, known bool) {
	for i, th := range x.thresholds {
		if prompt > th {
			a = i + 1
		}
	}
	if StandardTier(tier) {
		return a, 0, true
	}
	for i, name := range x.tiers {
		if name == tier {
			return a, i + 1, true
		}
	}
	return a, len(x.tiers) + 1, false
}

// index returns the model's rows, building them on first use for a model
// made without NewTable (NewTable builds them before the model is shared).
func (m *Model) index() *priceRows {
	if m.rows == nil {
		m.rows = buildRows(m.prices, m.uplift)
	}
	return m.rows
}

// buildRows computes every row a request can be priced from.
func buildRows(prices map[PriceKey]int64, uplift map[string]int64) *priceRows {
	x := &priceRows{}
	for k, p := range prices {
		if k.Above > 0 && !slices.Contains(x.thresholds, k.Above) {
			x.thresholds = append(x.thresholds, k.Above)
		}
		if k.Tier != "" && !slices.Contains(x.tiers, k.Tier) {
			x.tiers = append(x.tiers, k.Tier)
		}
		kind, ok := usage.KindNamed(k.Kind)
		if !ok {
			continue
		}
		x.has |= 1 << kind.Index()
		switch {
		case !kind.Priced():
		case kind.Unit != usage.Token:
			x.unit[kind.Unit] = max(x.unit[kind.Unit], p)
		case kind.Side == usage.SideInput:
			x.in = max(x.in, p)
		case kind.Side == usage.SideOutput:
			x.out = max(x.out, p)
		}
	}
	slices.Sort(x.thresholds)
	slices.Sort(x.tiers)
	for region, ppm := range uplift {
		x.uplifts = append(x.uplifts, regionUplift{region, ppm})
		x.upMax = max(x.upMax, ppm)
	}
	aboves := append([]int64{0}, x.thresholds...)
	for _, above := range aboves {
		row := make([]Rates, len(x.tiers)+2)
		row[0] = ratesAt(prices, above, []string{""})
		for i, t := range x.tiers {
			row[i+1] = ratesAt(prices, above, []string{t})
		}
		row[len(x.tiers)+1] = ratesAt(prices, above, append(slices.Clone(x.tiers), ""))
		x.rates = append(x.rates, row)
	}
	return x
}

// ratesAt returns, kind by kind, the dearest of the tiers' prices at
// threshold above (RatesFor says which price applies).
func ratesAt(prices map[PriceKey]int64, above int64, tiers []string) Rates {
	var r Rates
	for _, k := range usage.Kinds {
		if !k.Priced() {
			continue
		}
		var best int64
		for _, t := range tiers {
			for name := k.Name; name != ""; name = elsePrice(name) {
				if p, ok := price(prices, name, above, t); ok {
					best = max(best, p)
					break
				}
			}
		}
		k.Set((*usage.Usage)(&r), best)
	}
	return r
}

// elsePrice names the kind whose price a kind without one takes.
func elsePrice(kind string) string {
	k, _ := usage.KindNamed(kind)
	return k.Else
}

func price(prices map[PriceKey]int64, kind string, above int64, tier string) (int64, bool) {
	for _, key := range []PriceKey{{kind, above, tier}, {kind, 0, tier}, {kind, above, ""}, {kind, 0, ""}} {
		if p, ok := prices[key]; ok {
			return p, true
		}
	}
	return 0, false
}

// Charge is the price of one reply: its cost and the unit prices used, so an
// invoice line can be rebuilt from the ledger.
type Charge struct {
	Cost  int64 // nano-USD
	Rates Rates
	Above int64  // long-context threshold applied; 0 for none
	Tier  string // service tier priced; "" for the standard tier
	// UnknownTier: the reply reported a tier the model has no prices for;
	// Tier names it, and Rates are the dearest of the model's tiers.
	UnknownTier bool
	// Uplift is the regional processing uplift applied, in parts per
	// million of the cost; 0 for none.
	Uplift int64
}

// Price returns the charge for u, served at the given service tier by an
// endpoint processing in region ("" for one that is not regional).
//
// It reads no map and allocates nothing: the rows were built when the
// model was loaded.
func (m *Model) Price(u usage.Usage, tier, region string) Charge {
	x := m.index()
	a, t, known := x.find(u.Prompt(), tier)
	c := Charge{Rates: x.rates[a][t], Uplift: m.Uplift(region)}
	if a > 0 {
		c.Above = x.thresholds[a-1]
	}
	switch {
	case t > 0 && known:
		c.Tier = tier
	case !known:
		c.Tier, c.UnknownTier = tier, true
	}
	c.Cost = CostUplifted(u, c.Rates, c.Uplift)
	return c
}

// Cost returns Σ quantity × rate over the priced kinds, rounded up to a whole
// nano-USD. The sum is kept exact in 128 bits (rates are nano-USD per
// million units, so a product can exceed 64); it runs once per request and
// per checkpoint, so it allocates nothing. A quantity or rate below zero
// adds nothing: neither a checked usage nor a loaded price has one, and a
// settlement carrying one is refused whatever its cost.
func Cost(u usage.Usage, r Rates) int64 { return CostUplifted(u, r, 0) }

// capped is the cost of a sum that does not fit: far beyond any balance,
// and never wraps when added to.
const capped = math.MaxInt64 / 4

// CostUplifted is Cost multiplied by uplift parts per million (0: not
// multiplied), rounded up once. Below the cap the exact sum is under
// 10^6 × 2^64 and uplift under 2^24, so the product fits 128 bits.
func CostUplifted(u usage.Usage, r Rates, uplift int64) int64 {
	var hi, lo uint64
	for _, k := range usage.Kinds {
		q, p := k.Of(u), r.Of(k)
		if !k.Priced() || q <= 0 || p <= 0 {
			continue
		}
		ph, pl := bits.Mul64(uint64(q), uint64(p))
		var c uint64
		lo, c = bits.Add64(lo, pl, 0)
		hi, c = bits.Add64(hi, ph, c)
		if c != 0 {
			return capped
		}
	}
	div := uint64(1_000_000)
	if uplift > 0 {
		if hi >= 1_000_000 || uplift > maxUpliftPPM {
			return capped
		}
		h, l := bits.Mul64(lo, uint64(uplift))
		hi, lo = hi*uint64(uplift)+h, l
		div = 1_000_000 * 1_000_000
	}
	// Round up: (sum + div-1) / div.
	var c uint64
	lo, c = bits.Add64(lo, div-1, 0)
	hi += c
	if hi >= div { // the quotient would not fit in 64 bits
		return capped
	}
	q, _ := bits.Div64(hi, lo, div)
	if q > capped {
		return capped
	}
	return int64(q)
}

// Hold returns the worst-case cost of a request: every byte of the body
// counted as one input token at the dearest input-side price of any tier or
// prompt length (a token is never shorter than one byte), plus maxOutput
// tokens at the dearest output-side price, with the largest regional uplift
// the model has. The sides are the kinds' (usage.Kind.Side).
func (m *Model) Hold(bodyBytes, maxOutput int64) int64 {
	x := m.index()
	return CostUplifted(usage.Usage{Input: bodyBytes, Output: maxOutput}, Rates{Input: x.in, Output: x.out}, x.upMax)
}

// unitOf is the unit of the kind named kind (Token for none).
func unitOf(kind string) usage.Unit {
	k, _ := usage.KindNamed(kind)
	return k.Unit
}

// UnitHold returns the most n units of a kind counted by unit (Call,
// Second, Image) can cost: each at the dearest price of the model's kinds
// of that unit, with the largest regional uplift the model has (no price:
// nothing). Tokens are held by Hold.
func (m *Model) UnitHold(unit usage.Unit, n int64) int64 {
	x := m.index()
	if unit == usage.Token || int(unit) >= len(x.unit) {
		return 0
	}
	return CostUplifted(usage.Usage{Input: n}, Rates{Input: x.unit[unit]}, x.upMax)
}

// HasPrice reports whether the model has a price of the usage kind named
// kind, at any tier or threshold, of its own (not one usage.Kind.Else
// borrows): whether it is billed by that kind at all.
func (m *Model) HasPrice(kind string) bool {
	k, ok := usage.KindNamed(kind)
	return ok && m.index().has&(1<<k.Index()) != 0
}

// NanoUSD converts an amount typed in USD (a config value, a flag) into
// integer nano-USD, rounded to the nearest. Prices in USD per million tokens
// become nano-USD per million tokens the same way.
func NanoUSD(usd float64) int64 { return int64(math.Round(usd * NanoPerUSD)) }

// USD converts nano-USD to USD for JSON output, rounded to 1e-9.
func USD(nano int64) float64 { return float64(nano) / NanoPerUSD }

// Table finds the price of a model on one upstream. Its contents can be
// replaced while it is in use (Replace): a request keeps the *Model it looked
// up, so it is priced from start to end by one version.
type Table struct {
	cur atomic.Pointer[tableData]
}

type tableData struct {
	names    map[string]*Model // every name and alias
	models   []*Model          // sorted by name
	fallback *Model            // nil: unknown models are rejected
	least    int64             // LeastHold, priced once per version
}

// Lookup finds a model by exact name, by alias, or as a dated snapshot of a
// listed name (NAME-YYYYMMDD or NAME-YYYY-MM-DD). It never matches by prefix.
// When none matches and the upstream has a fallback price, it returns that,
// named FallbackModel: usage of every unknown name counts under that one
// model (the ledger keeps the name requested), so that clients sending
// made-up names cannot grow an account's usage by a row per name.
func (t *Table) Lookup(name string) (*Model, bool) {
	d := t.cur.Load()
	if d == nil {
		return nil, false
	}
	if m, ok := d.names[name]; ok {
		return m, true
	}
	if base, ok := undated(name); ok {
		if m, ok := d.names[base]; ok {
			return m, true
		}
	}
	if d.fallback != nil && name != "" {
		return d.fallback, true
	}
	return nil, false
}

// FallbackModel is the priced model of every unknown model served at the
// upstream's fallback price. No catalogue name has parentheses.
const FallbackModel usage.PricedModel = "(fallback)"

// Models returns the served models, sorted by name.
func (t *Table) Models() []*Model {
	if d := t.cur.Load(); d != nil {
		return d.models
	}
	return nil
}

// LeastHold is the least a request to any served model can hold: a body
// of one byte, one second of audio or one image, on the model whose price
// makes that cheapest, the fallback price of unknown models among them;
// 0 when a model is free. A request that cannot have
// this much room is refused whatever its body (the pre-check at a
// request's headers), so it is priced once, when the table is built.
func (t *Table) LeastHold() int64 {
	if d := t.cur.Load(); d != nil {
		return d.least
	}
	return 0
}

// leastHold is LeastHold of models.
func leastHold(models []*Model) int64 {
	least := int64(-1)
	for _, m := range models {
		h := max(m.Hold(1, 0), m.UnitHold(usage.Second, 1), m.UnitHold(usage.Image, 1))
		if least < 0 || h < least {
			least = h
		}
	}
	return max(least, 0)
}

// PriceList returns the priced models and, last, a copy of the price for
// unknown models (if there is one) named fallbackName: the list operators
// are shown.
func (t *Table) PriceList(fallbackName string) []*Model {
	d := t.cur.Load()
	if d == nil {
		return nil
	}
	if d.fallback == nil {
		return d.models
	}
	fb := *d.fallback
	fb.Name = usage.PricedModel(fallbackName)
	return append(slices.Clip(d.models), &fb)
}

// Replace makes src's contents current; lookups already made are unaffected.
func (t *Table) Replace(src *Table) { t.cur.Store(src.cur.Load()) }

// undated strips a dated-snapshot suffix with a plausible date
// (NAME-YYYYMMDD or NAME-YYYY-MM-DD). Read by hand rather than by a
// regular expression: a reply's model is looked up on every request, and
// this allocates nothing.
func undated(name string) (string, bool) {
	var y, mo, d string
	var cut int
	switch n := len(name); {
	case n > 11 && name[n-11] == '-' && name[n-6] == '-' && name[n-3] == '-':
		y, mo, d, cut = name[n-10:n-6], name[n-5:n-3], name[n-2:], n-11
	case n > 9 && name[n-9] == '-':
		y, mo, d, cut = name[n-8:n-4], name[n-4:n-2], name[n-2:], n-9
	default:
		return "", false
	}
	if !digits(y) || !digits(mo) || !digits(d) || mo < "01" || mo > "12" || d < "01" || d > "31" {
		return "", false
	}
	return name[:cut], true
}

func digits(s string) bool {
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// NewTable builds one upstream's table from the catalogue entries and the
// upstream's models section. A dated catalogue entry whose prices equal those
// of its undated name becomes an alias of it, so usage of a snapshot and of
// its alias is counted as one model.
func NewTable(cat map[string]CatalogueEntry, cfg config.Models) (*Table, error) {
	d := &tableData{names: map[string]*Model{}}
	byName := map[string]*Model{}
	for name, e := range cat {
		if !slices.Contains(cfg.Providers, e.Provider) {
			continue
		}
		byName[name] = &Model{Name: usage.PricedModel(name), MaxOutput: e.MaxOutput, MaxInput: e.MaxInput, Source: "catalogue", Mode: e.Mode, Endpoints: e.Endpoints, prices: e.Prices, uplift: e.Uplift}
	}
	// An override applies to the catalogue's dated snapshots of the name it
	// gives (a contract price is for the model, not for one of its names);
	// an override of the snapshot itself takes its place.
	for name, m := range byName {
		if _, own := cfg.Overrides[name]; own {
			continue
		}
		if base, ok := undated(name); ok {
			if o, ok := cfg.Overrides[base]; ok {
				applyOverride(m, o)
			}
		}
	}
	for name, o := range cfg.Overrides {
		m := byName[name]
		if m == nil {
			if (o.Input == nil || o.Output == nil || o.MaxOutput == 0) && !pricedAlone(o) {
				return nil, fmt.Errorf("models.overrides[%s]: not in the catalogue, so input, output and max_output (or a price of a kind priced alone: audio_seconds, images) are required", name)
			}
			m = &Model{Name: usage.PricedModel(name), prices: map[PriceKey]int64{}}
			byName[name] = m
		}
		applyOverride(m, o)
	}
	// Fold dated entries into their undated name when they are the same model.
	for name, m := range byName {
		base, ok := undated(name)
		if !ok {
			continue
		}
		if b := byName[base]; b != nil && b.MaxOutput == m.MaxOutput && b.MaxInput == m.MaxInput && b.Mode == m.Mode && slices.Equal(b.Endpoints, m.Endpoints) && equalPrices(b.prices, m.prices) && maps.Equal(b.uplift, m.uplift) {
			b.Aliases = append(b.Aliases, name)
			delete(byName, name)
		}
	}
	for name, m := range byName {
		d.names[name] = m
		for _, a := range m.Aliases {
			d.names[a] = m
		}
		d.models = append(d.models, m)
	}
	for alias, target := range cfg.Aliases {
		m := d.names[target]
		if m == nil {
			return nil, fmt.Errorf("models.aliases[%s]: %q is not a served model", alias, target)
		}
		if d.names[alias] != nil && d.names[alias] != m {
			return nil, fmt.Errorf("models.aliases[%s]: already the name of %s", alias, d.names[alias].Name)
		}
		d.names[alias] = m
		m.Aliases = append(m.Aliases, alias)
	}
	for _, m := range d.models {
		sort.Strings(m.Aliases)
	}
	sort.Slice(d.models, func(i, j int) bool { return d.models[i].Name < d.models[j].Name })
	if cfg.UnknownModel == config.UnknownFallback && cfg.Fallback != nil {
		d.fallback = &Model{Name: FallbackModel, Source: "fallback", MaxOutput: cfg.Fallback.MaxOutput, prices: override(nil, *cfg.Fallback)}
		d.fallback.rows = buildRows(d.fallback.prices, nil)
	}
	for _, m := range d.models {
		m.rows = buildRows(m.prices, m.uplift)
	}
	d.least = leastHold(d.models)
	if d.fallback != nil {
		d.least = min(d.least, leastHold([]*Model{d.fallback}))
	}
	t := &Table{}
	t.cur.Store(d)
	return t, nil
}

// pricedAlone reports whether o sets a price of a kind that alone makes a
// model (usage.Kind.Alone: per second of audio, per image).
func pricedAlone(o config.Price) bool {
	for kind := range o.Fields() {
		if k, _ := usage.KindNamed(kind); k.Alone {
			return true
		}
	}
	return false
}

// applyOverride replaces m's prices of the kinds o sets, and its maximum
// output when o sets one.
func applyOverride(m *Model, o config.Price) {
	m.Source = "override"
	m.prices = override(m.prices, o)
	if o.MaxOutput > 0 {
		m.MaxOutput = o.MaxOutput
	}
}

// override returns prices with the operator's figures replacing every price
// of the kinds they set.
func override(prices map[PriceKey]int64, o config.Price) map[PriceKey]int64 {
	out := map[PriceKey]int64{}
	set := o.Fields()
	for k, v := range prices {
		if _, ok := set[k.Kind]; !ok {
			out[k] = v
		}
	}
	for kind, usd := range set {
		if unitOf(kind) != usage.Token {
			usd *= 1_000_000 // USD per call, second or image → per million
		}
		out[PriceKey{Kind: kind}] = NanoUSD(usd)
	}
	return out
}

func equalPrices(a, b map[PriceKey]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Book is the price tables of every upstream, by upstream name.
type Book map[string]*Table

// NewBook loads the catalogue named by cfg and builds every upstream's
// table, of the models in the given catalogue modes.
func NewBook(cfg *config.Config, modes []string) (Book, error) {
	var providers []string
	for _, u := range cfg.Upstreams {
		providers = append(providers, u.Models.Providers...)
	}
	cat, err := LoadCatalogue(cfg.Catalogue, providers, modes)
	if err != nil {
		return nil, err
	}
	b := Book{}
	for _, u := range cfg.Upstreams {
		t, err := NewTable(cat, u.Models)
		if err != nil {
			return nil, fmt.Errorf("upstreams %s: %w", u.Name, err)
		}
		b[u.Name] = t
	}
	return b, nil
}

// FormatUSD writes nano-USD as an exact decimal USD amount with at least two
// decimals: 1500000000 is "1.50", 123 is "0.000000123".
func FormatUSD(nano int64) string {
	sign := ""
	u := uint64(nano)
	if nano < 0 {
		sign, u = "-", -u
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", u%NanoPerUSD), "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%s", sign, u/NanoPerUSD, frac)
}
