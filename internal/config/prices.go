package config

import (
	"fmt"
	"math"
	"reflect"

	"github.com/modelgateway/gateway/internal/usage"
)

// Models says which models an upstream serves and at what price: the
// catalogue's chat models of the given providers, with the operator's
// aliases and overrides.
type Models struct {
	// Providers are catalogue litellm_provider values ("anthropic", "openai");
	// their entries of mode "chat" are served.
	Providers []string `yaml:"providers"`
	// Aliases map an extra name to a served model.
	Aliases map[string]string `yaml:"aliases"`
	// Overrides replace catalogue prices (contract prices) or add a model the
	// catalogue lacks, by model name.
	Overrides map[string]Price `yaml:"overrides"`
	// UnknownModel is "reject" (the default: 400 naming the model) or
	// "fallback" (price it with Fallback and mark the ledger entry).
	UnknownModel string `yaml:"unknown_model"`
	Fallback     *Price `yaml:"fallback"`
}

// Unknown-model policies.
const (
	UnknownReject   = "reject"
	UnknownFallback = "fallback"
)

// Price is an operator's price. Token prices are USD per million tokens;
// the built-in tools' are USD per call (per session for the code
// interpreter). A price that is set replaces the catalogue's
// figure for that kind at every service tier and prompt length (a contract
// price is flat); an unset one keeps the catalogue's.
type Price struct {
	Input        *float64 `yaml:"input"`
	Output       *float64 `yaml:"output"`
	CacheRead    *float64 `yaml:"cache_read"`
	CacheWrite5m *float64 `yaml:"cache_write_5m"`
	CacheWrite1h *float64 `yaml:"cache_write_1h"`
	AudioInput   *float64 `yaml:"audio_input"`
	AudioOutput  *float64 `yaml:"audio_output"`
	WebSearch    *float64 `yaml:"web_search"`
	// The Responses API's other built-in tools.
	FileSearch             *float64 `yaml:"file_search"`
	CodeInterpreterSession *float64 `yaml:"code_interpreter_session"`
	ImageGeneration        *float64 `yaml:"image_generation"`
	// AudioSeconds prices input audio billed by its duration, in USD per
	// second (transcription models priced so, whisper-1).
	AudioSeconds *float64 `yaml:"audio_seconds"`
	// Image generation's image tokens (USD per million), and images for
	// models priced per image (USD per image).
	ImageInput  *float64 `yaml:"image_input"`
	ImageOutput *float64 `yaml:"image_output"`
	Images      *float64 `yaml:"images"`
	// MaxOutput replaces the catalogue's max_output_tokens.
	MaxOutput int64 `yaml:"max_output"`
}

// Fields lists the price's set figures by the usage kind they price
// ("web_searches" for WebSearch, in USD per search, and so on): each price
// field is the kind whose Config names its yaml key.
func (p Price) Fields() map[string]float64 {
	out := map[string]float64{}
	v := reflect.ValueOf(p)
	for i, kind := range priceKinds {
		if f := v.Field(i); kind != "" && !f.IsNil() {
			out[kind] = f.Elem().Float()
		}
	}
	return out
}

// priceKinds names, by field of Price, the usage kind the field prices
// ("" for a field that is no price).
var priceKinds = func() []string {
	t := reflect.TypeFor[Price]()
	out := make([]string, t.NumField())
	for i := range t.NumField() {
		key := t.Field(i).Tag.Get("yaml")
		for _, k := range usage.Kinds {
			if k.Config != "" && k.Config == key {
				out[i] = k.Name
			}
		}
	}
	return out
}()

func (p Price) validate(at string, complete bool) error {
	for name, v := range p.Fields() {
		if v < 0 || math.IsNaN(v) || v > 1e6 {
			return fmt.Errorf("%s: %s: %v is not a price in USD", at, name, v)
		}
	}
	if p.MaxOutput < 0 {
		return fmt.Errorf("%s.max_output: must be a positive number of tokens", at)
	}
	if complete && (p.Input == nil || p.Output == nil || p.MaxOutput == 0) {
		return fmt.Errorf("%s: input, output and max_output are required", at)
	}
	return nil
}

func (m *Models) validate(p string) error {
	if len(m.Providers) == 0 && len(m.Overrides) == 0 {
		return fmt.Errorf("%s.providers: at least one catalogue provider (or an override) is required", p)
	}
	for name, target := range m.Aliases {
		if name == "" || target == "" {
			return fmt.Errorf("%s.aliases: empty model name", p)
		}
	}
	for name, o := range m.Overrides {
		if name == "" {
			return fmt.Errorf("%s.overrides: empty model name", p)
		}
		if err := o.validate(fmt.Sprintf("%s.overrides[%s]", p, name), false); err != nil {
			return err
		}
	}
	switch m.UnknownModel {
	case UnknownReject, UnknownFallback:
	default:
		return fmt.Errorf("%s.unknown_model: %q is not %q or %q", p, m.UnknownModel, UnknownReject, UnknownFallback)
	}
	if m.UnknownModel == UnknownFallback && m.Fallback == nil {
		return fmt.Errorf("%s.fallback: required when unknown_model is fallback", p)
	}
	if m.Fallback != nil {
		if err := m.Fallback.validate(p+".fallback", true); err != nil {
			return err
		}
	}
	return nil
}
