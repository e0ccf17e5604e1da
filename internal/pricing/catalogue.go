package pricing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
// kind it prices. cache_creation_input_token_cost_above_1hr is the 1-hour
// cache write; its "above_1hr" is part of the name, not a tier.
// input_cost_per_second prices input audio by duration; the catalogue's
// output_cost_per_second is not read: no reply reports an output duration,
// and the vendors bill a transcription by its input audio alone.
var priceFields = map[string]string{
	"input_cost_per_token":                      "input",
	"output_cost_per_token":                     "output",
	"cache_read_input_token_cost":               "cache_read",
	"cache_creation_input_token_cost":           "cache_write_5m",
	"cache_creation_input_token_cost_above_1hr": "cache_write_1h",
	"input_cost_per_audio_token":                "audio_input",
	"output_cost_per_audio_token":               "audio_output",
	"input_cost_per_second":                     "audio_seconds",
}

// longSuffix matches a long-context suffix such as _above_200k_tokens.
var longSuffix = regexp.MustCompile(`_above_([0-9]+)k_tokens$`)

// searchSize is the search context size whose per-query price is used: the
// vendors' default.
const searchSize = "search_context_size_medium"

// containerEntry is the catalogue's entry for the code interpreter's
// containers, priced per session for every model of its provider.
const containerEntry = "/container"

// errNotPriced marks an entry without the prices of a model: neither token
// prices nor a price per second of input.
var errNotPriced = errors.New("no token or per-second prices")

// LoadCatalogue reads the catalogue file and returns the models of the
// given providers in the given modes (those some operation serves), by name.
func LoadCatalogue(path string, providers, modes []string) (map[string]CatalogueEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("catalogue: %w", err)
	}
	m, err := ParseCatalogue(data, providers, modes)
	if err != nil {
		return nil, fmt.Errorf("catalogue %s: %w", path, err)
	}
	return m, nil
}

// ParseCatalogue decodes catalogue JSON; see LoadCatalogue.
func ParseCatalogue(data []byte, providers, modes []string) (map[string]CatalogueEntry, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("not a catalogue: %w", err)
	}
	out := map[string]CatalogueEntry{}
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
		if name == head.Provider+containerEntry && head.Container != nil {
			continue // read below, once every model is known
		}
		e, err := parseEntry(name, head.Provider, msg)
		if errors.Is(err, errNotPriced) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", name, err)
		}
		e.Mode, e.Endpoints = head.Mode, head.Endpoints
		out[name] = e
	}
	if err := addContainerPrices(raw, providers, out); err != nil {
		return nil, err
	}
	return out, nil
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
			return fmt.Errorf("model %q: code_interpreter_cost_per_session: %w", p+containerEntry, err)
		}
		for name, e := range out {
			if e.Provider == p {
				e.Prices[PriceKey{Kind: "code_interpreter_sessions"}] = rate
				out[name] = e
			}
		}
	}
	return nil
}

func parseEntry(name, provider string, msg json.RawMessage) (CatalogueEntry, error) {
	dec := json.NewDecoder(bytes.NewReader(msg))
	dec.UseNumber()
	var fields map[string]any
	if err := dec.Decode(&fields); err != nil {
		return CatalogueEntry{}, err
	}
	e := CatalogueEntry{Name: name, Provider: provider, Prices: map[PriceKey]int64{}, Uplift: map[string]int64{}}
	if !priced(fields) {
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
		e.Prices[PriceKey{kind, above, tier}] = rate
	}
	if v, ok := fields["search_context_cost_per_query"]; ok {
		sizes, ok := v.(map[string]any)
		if !ok {
			return e, fmt.Errorf("search_context_cost_per_query: not an object")
		}
		if q, ok := sizes[searchSize]; ok {
			rate, err := perMillion(q)
			if err != nil {
				return e, fmt.Errorf("search_context_cost_per_query.%s: %w", searchSize, err)
			}
			e.Prices[PriceKey{Kind: "web_searches"}] = rate
		}
	}
	return e, nil
}

// priced reports whether a catalogue entry has the prices of a model: an
// input and an output price per token (an embedding model produces no
// tokens, so its output price may be absent), or a price per second of
// input audio (a model billed by duration). An entry with neither (a
// per-session tool) is not a model the gateway can price.
func priced(fields map[string]any) bool {
	perToken := fields["input_cost_per_token"] != nil && (fields["output_cost_per_token"] != nil || fields["mode"] == "embedding")
	return perToken || fields["input_cost_per_second"] != nil
}

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
