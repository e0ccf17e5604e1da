package pricing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/modelgateway/gateway/internal/usage"
)

// The catalogue is LiteLLM's model_prices_and_context_window.json: one object
// per model name, prices in USD per token (per query for searches). Only the
// entries of the providers an upstream takes, in a mode some operation
// serves (the modes given), are read, and those strictly: a price that is not a non-negative number, or that is not a
// whole number of nano-USD per million tokens, is an error naming the model
// and the field.

// CatalogueEntry is one model's prices as the catalogue gives them.
type CatalogueEntry struct {
	Name      string
	Provider  string
	MaxOutput int64
	// MaxInput is the catalogue's max_input_tokens, the context window; 0
	// when it gives none (or none that is a positive whole number).
	MaxInput int64
	// Mode is the catalogue's mode ("chat", "responses", "embedding",
	// "audio_transcription") and Endpoints its supported_endpoints (often
	// absent): together they say which operations serve the model
	// (Model.Serves).
	Mode      string
	Endpoints []string
	// Prices holds every price the catalogue gives, in nano-USD per million
	// units.
	Prices map[PriceKey]int64
	// Uplift is the catalogue's regional processing uplift by region ("eu",
	// "us"): a multiplier of the whole cost, in parts per million.
	Uplift map[string]int64
}

// PriceKey names one price: a usage kind, at a long-context threshold (0 for
// none: the price of prompts up to the lowest threshold) and a service tier
// ("" for the standard tier).
type PriceKey struct {
	Kind  string
	Above int64
	Tier  string
}

// batchTier is the catalogue's price suffix for the batch API, which does
// not apply to synchronous requests. Every other "_<tier>" suffix of a price
// field (priority, flex, ultrafast, ...) is a service tier.
const batchTier = "batches"

// upliftField prefixes the catalogue's regional processing uplift, a
// multiplier of the whole cost when a regional endpoint serves the reply.
const upliftField = "regional_processing_uplift_multiplier_"

// priceFields maps a catalogue price field, without suffixes, to the usage
// kind it prices: the fields the kinds declare (usage.Kinds' Catalogue),
// except those read apart (searchField, containerField).
var priceFields = func() map[string]string {
	m := map[string]string{}
	for _, k := range usage.Kinds {
		for _, f := range k.Catalogue {
			if f != searchField && f != containerField {
				m[f] = k.Name
			}
		}
	}
	return m
}()

// notRead are the catalogue's price fields (without suffixes) of the
// entries the gateway reads that price nothing it bills, and why: a field
// of those entries that is neither a kind's nor listed here fails
// TestCatalogueFieldsAreKnown, so that a new price is never dropped
// unseen.
var notRead = map[string]string{
	"output_cost_per_second":                     "no reply reports an output duration; the vendors bill a transcription by its input audio",
	"cache_creation_input_token_cost_above_12hr": "a cache write kept beyond 12 hours, which no reply the meters read reports",
	"cache_read_input_image_token_cost":          "cached image input, which an image generation reply does not report",
	"input_cost_per_pixel":                       "the entry's per-image price, restated per pixel",
	"output_cost_per_pixel":                      "the entry's per-image price, restated per pixel",
}

// The fields read apart from priceFields: the per-query price of web
// searches (an object by search context size) and the per-session price
// of a provider's code interpreter containers (an entry of its own).
const (
	searchField    = "search_context_cost_per_query"
	containerField = "code_interpreter_cost_per_session"
)

// kindOf names the kind whose Catalogue lists field.
func kindOf(field string) string {
	for _, k := range usage.Kinds {
		if slices.Contains(k.Catalogue, field) {
			return k.Name
		}
	}
	panic("pricing: no usage kind prices " + field)
}

// longSuffix matches a long-context suffix such as _above_200k_tokens.
var longSuffix = regexp.MustCompile(`_above_([0-9]+)k_tokens$`)

// searchSize is the search context size whose per-query price is used: the
// vendors' default.
const searchSize = "search_context_size_medium"

// containerEntry is the catalogue's entry for the code interpreter's
// containers, priced per session for every model of its provider.
const containerEntry = "/container"

// errNotPriced marks an entry without the prices of a model (see priced).
var errNotPriced = errors.New("no price of each side, nor one of a kind priced alone (per second, per image)")

// sizedEntry matches the catalogue's per-image estimates of an image
// model at one size (and quality): "high/1024-x-1536/gpt-image-1".
var sizedEntry = regexp.MustCompile(`^(?:[a-z]+/)?[0-9]+-x-[0-9]+/(.+)$`)

// Skipped is a catalogue entry of a provider and mode the gateway reads
// that it loads no model from, and why.
type Skipped struct {
	Name, Reason string
}

// Unread is what ReadCatalogue could not use of the entries of the
// providers and modes it reads: the entries it loads no model from, and
// the price fields it does not know (neither a kind's nor in notRead),
// each sorted by name.
type Unread struct {
	Entries []Skipped
	Fields  []string
}

// LoadCatalogue reads the catalogue file and returns the models of the
// given providers in the given modes (those some operation serves), by name.
// The entries of those providers and modes it cannot price, and the price
// fields it does not know, are logged as a warning, one line each.
func LoadCatalogue(path string, providers, modes []string) (map[string]CatalogueEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("catalogue: %w", err)
	}
	m, unread, err := ReadCatalogue(data, providers, modes)
	if err != nil {
		return nil, fmt.Errorf("catalogue %s: %w", path, err)
	}
	// The per-image estimates of a token-priced model are left out by
	// design (a debug line); an entry without the prices of a model is
	// one the operator may have expected served.
	var unpriced, estimates []string
	for _, s := range unread.Entries {
		if s.Reason == errNotPriced.Error() {
			unpriced = append(unpriced, s.Name)
		} else {
			estimates = append(estimates, s.Name)
		}
	}
	if len(unpriced) > 0 {
		slog.Warn("catalogue entries without the prices of a model, not served", "catalogue", path, "entries", len(unpriced), "names", unpriced)
	}
	if len(estimates) > 0 {
		slog.Debug("catalogue per-image estimates of models billed by their tokens, not served", "catalogue", path, "entries", len(estimates), "names", estimates)
	}
	if len(unread.Fields) > 0 {
		slog.Warn("catalogue price fields the gateway does not know, not read", "catalogue", path, "fields", unread.Fields)
	}
	return m, nil
}

// ParseCatalogue decodes catalogue JSON; see LoadCatalogue.
func ParseCatalogue(data []byte, providers, modes []string) (map[string]CatalogueEntry, error) {
	m, _, err := ReadCatalogue(data, providers, modes)
	return m, err
}

// ReadCatalogue is ParseCatalogue that also returns what it could not use.
func ReadCatalogue(data []byte, providers, modes []string) (map[string]CatalogueEntry, Unread, error) {
	var raw map[string]json.RawMessage
	var unread Unread
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, unread, fmt.Errorf("not a catalogue: %w", err)
	}
	out := map[string]CatalogueEntry{}
	var skipped []Skipped
	for name, msg := range raw {
		var head struct {
			Provider  string   `json:"litellm_provider"`
			Mode      string   `json:"mode"`
			Endpoints []string `json:"supported_endpoints"`
			Container any      `json:"code_interpreter_cost_per_session"`
		}
		if json.Unmarshal(msg, &head) != nil || !slices.Contains(modes, head.Mode) || !slices.Contains(providers, head.Provider) {
			continue
		}
		unread.Fields = append(unread.Fields, unknownFields(msg)...)
		if name == head.Provider+containerEntry && head.Container != nil {
			continue // read below, once every model is known
		}
		e, err := parseEntry(name, head.Provider, head.Mode, msg)
		if errors.Is(err, errNotPriced) {
			skipped = append(skipped, Skipped{name, err.Error()})
			continue
		}
		if err != nil {
			return nil, unread, fmt.Errorf("model %q: %w", name, err)
		}
		e.Mode, e.Endpoints = head.Mode, head.Endpoints
		out[name] = e
	}
	// A per-image estimate of a model priced by its tokens is not a model
	// of its own: its reply's tokens are billed.
	for name := range out {
		if m := sizedEntry.FindStringSubmatch(name); m != nil {
			if _, ok := out[m[1]]; ok {
				delete(out, name)
				skipped = append(skipped, Skipped{name, "a per-image estimate of " + m[1] + ", which is billed by its tokens"})
			}
		}
	}
	slices.SortFunc(skipped, func(a, b Skipped) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(unread.Fields)
	unread.Entries, unread.Fields = skipped, slices.Compact(unread.Fields)
	if err := addContainerPrices(raw, providers, out); err != nil {
		return nil, unread, err
	}
	return out, unread, nil
}

// unknownFields returns the price fields of an entry (a name with "cost")
// the gateway neither reads nor lists in notRead.
func unknownFields(msg json.RawMessage) []string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(msg, &fields) != nil {
		return nil
	}
	var out []string
	for f := range fields {
		if strings.Contains(f, "cost") && !fieldKnown(f) {
			out = append(out, f)
		}
	}
	return out
}

// fieldKnown reports whether a price field, with its suffixes, is one the
// gateway reads or one notRead explains.
func fieldKnown(field string) bool {
	if _, _, _, ok := splitField(field); ok || field == searchField || field == containerField {
		return true
	}
	candidates := []string{field}
	if i := strings.LastIndexByte(field, '_'); i > 0 {
		candidates = append(candidates, field[:i]) // a tier, the batch API's among them
	}
	for _, f := range candidates {
		f = longSuffix.ReplaceAllString(f, "")
		_, read := priceFields[f]
		_, explained := notRead[f]
		if read || explained {
			return true
		}
	}
	return false
}

// addContainerPrices gives every model of a provider the per-session price
// of the provider's code interpreter containers, where the catalogue lists
// one (PROVIDER/container, code_interpreter_cost_per_session).
func addContainerPrices(raw map[string]json.RawMessage, providers []string, out map[string]CatalogueEntry) error {
	for _, p := range providers {
		msg, ok := raw[p+containerEntry]
		if !ok {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(msg))
		dec.UseNumber()
		var f struct {
			Session any `json:"code_interpreter_cost_per_session"`
		}
		if err := dec.Decode(&f); err != nil || f.Session == nil {
			continue
		}
		rate, err := perMillion(f.Session)
		if err != nil {
			return fmt.Errorf("model %q: %s: %w", p+containerEntry, containerField, err)
		}
		for name, e := range out {
			if e.Provider == p {
				e.Prices[PriceKey{Kind: kindOf(containerField)}] = rate
				out[name] = e
			}
		}
	}
	return nil
}

func parseEntry(name, provider, mode string, msg json.RawMessage) (CatalogueEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return CatalogueEntry{}, err
	}
	e := CatalogueEntry{Name: name, Provider: provider, Prices: map[PriceKey]int64{}, Uplift: map[string]int64{}}
	if !priced(fields, mode) {
		return e, errNotPriced
	}
	// Without max_output_tokens the catalogue does not say how much the
	// model can produce: MaxOutput stays 0 and no max_tokens is refused.
	if v, ok := fields["max_output_tokens"]; ok {
		mo, ok := v.(json.Number)
		n, err := strconv.ParseInt(string(mo), 10, 64)
		if !ok || err != nil || n <= 0 {
			return e, fmt.Errorf("max_output_tokens: %v is not a positive whole number", v)
		}
		e.MaxOutput = n
	}
	// Only bounds what a reply may claim (never refuses a request): read
	// leniently.
	if mi, ok := fields["max_input_tokens"].(json.Number); ok {
		if n, err := strconv.ParseInt(string(mi), 10, 64); err == nil && n > 0 {
			e.MaxInput = n
		}
	}
	// rank: by price, the place in its kind's Catalogue of the field that
	// set it, so that of two fields of one kind the first listed wins
	// whatever the order the entry's fields are read in.
	rank := map[PriceKey]int{}
	for field, v := range fields {
		if region, ok := strings.CutPrefix(field, upliftField); ok && region != "" {
			ppm, err := partsPerMillion(v)
			if err != nil {
				return e, fmt.Errorf("%s: %w", field, err)
			}
			e.Uplift[region] = ppm
			continue
		}
		kind, above, tier, ok := splitField(field)
		if !ok {
			continue
		}
		rate, err := perMillion(v)
		if err != nil {
			return e, fmt.Errorf("%s: %w", field, err)
		}
		key := PriceKey{kind, above, tier}
		if r, ok := rank[key]; ok && r < fieldRank(kind, field) {
			continue // a field listed before it prices the kind
		}
		rank[key] = fieldRank(kind, field)
		e.Prices[key] = rate
	}
	if v, ok := fields[searchField]; ok {
		sizes, ok := v.(map[string]any)
		if !ok {
			return e, fmt.Errorf("%s: not an object", searchField)
		}
		if q, ok := sizes[searchSize]; ok {
			rate, err := perMillion(q)
			if err != nil {
				return e, fmt.Errorf("%s.%s: %w", searchField, searchSize, err)
			}
			e.Prices[PriceKey{Kind: kindOf(searchField)}] = rate
		}
	}
	return e, nil
}

// fieldRank is the place, in the Catalogue of the kind named kind, of the
// field a price field (with its suffixes) is.
func fieldRank(kind, field string) int {
	k, _ := usage.KindNamed(kind)
	return slices.IndexFunc(k.Catalogue, func(f string) bool { return strings.HasPrefix(field, f) })
}

// priced reports whether a catalogue entry has the prices of a model: a
// price of a kind priced alone (per second of input audio, per image), or
// a token price of each side (an embedding model produces no tokens, so it
// needs only an input price). An entry with neither (a per-session tool,
// an output price alone) is not a model the gateway can price.
func priced(fields map[string]any, mode string) bool {
	in, out := false, mode == noOutputMode
	for field := range fields {
		kind, _, tier, ok := splitField(field)
		if !ok || tier == batchTier {
			continue
		}
		k, _ := usage.KindNamed(kind)
		switch {
		case k.Alone:
			return true
		case k.Unit == usage.Token && k.Side == usage.SideInput:
			in = true
		case k.Unit == usage.Token && k.Side == usage.SideOutput:
			out = true
		}
	}
	return in && out
}

// noOutputMode is the catalogue mode whose models produce no output tokens.
const noOutputMode = "embedding"

// splitField parses a price field name into the usage kind it prices, the
// long-context threshold (0 for none) and the service tier ("" for the
// standard tier). ok is false for fields the gateway does not price.
func splitField(field string) (kind string, above int64, tier string, ok bool) {
	if kind, above, ok := splitLong(field); ok {
		return kind, above, "", true
	}
	i := strings.LastIndexByte(field, '_')
	if i < 0 || field[i+1:] == batchTier {
		return "", 0, "", false
	}
	kind, above, ok = splitLong(field[:i])
	return kind, above, field[i+1:], ok
}

// splitLong parses a price field name without a tier suffix.
func splitLong(field string) (kind string, above int64, ok bool) {
	rest := field
	if m := longSuffix.FindStringSubmatch(rest); m != nil {
		k, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil || k <= 0 {
			return "", 0, false
		}
		rest, above = strings.TrimSuffix(rest, m[0]), k*1000
	}
	kind, ok = priceFields[rest]
	return kind, above, ok
}

var (
	million = big.NewRat(1_000_000, 1)
	nanoUSD = big.NewRat(NanoPerUSD, 1)
)

// exact reads a catalogue number as the exact decimal it is written as.
func exact(v any) (json.Number, *big.Rat, error) {
	num, ok := v.(json.Number)
	if !ok {
		return "", nil, fmt.Errorf("%v is not a number", v)
	}
	r, ok := new(big.Rat).SetString(num.String())
	if !ok {
		return "", nil, fmt.Errorf("%s is not a number", num)
	}
	return num, r, nil
}

// partsPerMillion converts a multiplier, as the catalogue writes it, into
// parts per million, exactly; it must be at least 1.
func partsPerMillion(v any) (int64, error) {
	num, r, err := exact(v)
	if err != nil {
		return 0, err
	}
	r.Mul(r, million)
	if !r.IsInt() || !r.Num().IsInt64() || r.Num().Int64() < 1_000_000 || r.Num().Int64() > maxUpliftPPM {
		return 0, fmt.Errorf("%s is not a multiplier from 1 to 16 in millionths", num)
	}
	return r.Num().Int64(), nil
}

// perMillion converts a price in USD per unit, as the catalogue writes it,
// into nano-USD per million units, exactly. A price finer than that is
// refused rather than rounded.
func perMillion(v any) (int64, error) {
	num, r, err := exact(v)
	if err != nil {
		return 0, err
	}
	if r.Sign() < 0 {
		return 0, fmt.Errorf("%s is negative", num)
	}
	r.Mul(r, million)
	r.Mul(r, nanoUSD)
	if !r.IsInt() || !r.Num().IsInt64() {
		return 0, fmt.Errorf("%s USD is not a whole number of nano-USD per million", num)
	}
	return r.Num().Int64(), nil
}
