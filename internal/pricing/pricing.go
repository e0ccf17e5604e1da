// Package pricing turns token counts into money. Prices are kept as integer
// nano-USD per million tokens, so that every cost is exact integer arithmetic
// and sums of costs never drift.
package pricing

import (
	"math"
	"sort"
	"strings"

	"github.com/modelgateway/gateway/internal/config"
)

// NanoPerUSD is the number of nano-USD in one USD.
const NanoPerUSD = 1_000_000_000

// Price is one model's price, in nano-USD per million tokens.
type Price struct {
	Model      string // canonical name from the table
	Input      int64
	Output     int64
	CacheWrite int64
	CacheRead  int64
	MaxOutput  int64 // tokens
}

// Tokens are counts to be priced.
type Tokens struct {
	Input, Output, CacheWrite, CacheRead int64
}

// Cost returns the cost of t in nano-USD, rounded up to a whole nano-USD.
func (p Price) Cost(t Tokens) int64 {
	sum := mulSat(t.Input, p.Input) + mulSat(t.Output, p.Output) +
		mulSat(t.CacheWrite, p.CacheWrite) + mulSat(t.CacheRead, p.CacheRead)
	if sum < 0 { // overflow of the sum
		return math.MaxInt64 / 2
	}
	return (sum + 999_999) / 1_000_000
}

// Hold returns the worst-case cost of a request: every byte of the body
// counted as one input token at the dearer of the input and cache-write price
// (a token is never shorter than one byte), plus maxOutput tokens of output.
func (p Price) Hold(bodyBytes, maxOutput int64) int64 {
	in := max(p.Input, p.CacheWrite)
	return Price{Input: in, Output: p.Output}.Cost(Tokens{Input: bodyBytes, Output: maxOutput})
}

func mulSat(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64 / 8
	}
	return a * b
}

// Table looks up prices by model name: the exact name or an alias first, then
// the longest configured name that prefixes the model (so that dated
// snapshots such as "model-x-20250101" find "model-x").
type Table struct {
	exact    map[string]Price
	prefixes []string // longest first
}

// NewTable builds a table from an upstream's configured models.
func NewTable(models []config.Model) *Table {
	t := &Table{exact: make(map[string]Price)}
	for _, m := range models {
		p := Price{
			Model:      m.Name,
			Input:      NanoUSD(m.Input),
			Output:     NanoUSD(m.Output),
			CacheWrite: NanoUSD(m.CacheWrite),
			CacheRead:  NanoUSD(m.CacheRead),
			MaxOutput:  m.MaxOutput,
		}
		for _, n := range append([]string{m.Name}, m.Aliases...) {
			t.exact[n] = p
			t.prefixes = append(t.prefixes, n)
		}
	}
	sort.Slice(t.prefixes, func(i, j int) bool { return len(t.prefixes[i]) > len(t.prefixes[j]) })
	return t
}

// NanoUSD converts an amount typed in USD (a config value, a flag) into
// integer nano-USD, rounded to the nearest. Prices in USD per million tokens
// become nano-USD per million tokens the same way.
func NanoUSD(usd float64) int64 { return int64(math.Round(usd * NanoPerUSD)) }

// Lookup finds the price of a model.
func (t *Table) Lookup(model string) (Price, bool) {
	if p, ok := t.exact[model]; ok {
		return p, true
	}
	for _, n := range t.prefixes {
		if strings.HasPrefix(model, n) && len(model) > len(n) && isSuffixSep(model[len(n)]) {
			return t.exact[n], true
		}
	}
	return Price{}, false
}

// isSuffixSep keeps "gpt-4o" from pricing "gpt-4o-mini" by accident only when
// the longer name is not itself listed: longest-first order handles that, and
// requiring a separator stops "o3" from matching "o3x".
func isSuffixSep(b byte) bool { return b == '-' || b == '@' || b == ':' || b == '.' }

// USD converts nano-USD to USD for JSON output, rounded to 1e-9.
func USD(nano int64) float64 { return float64(nano) / NanoPerUSD }
