package launch

import (
	"time"

	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// SetPrice makes the fake bill model, in a wire format's cost report (or
// one of OpenAI's other reports: embeddings, audio_transcriptions, images), at
// the rates of m's standard tier from now on (as the catalogue prices it),
// each rate multiplied by factor: 1 is the catalogue's price, above 1 a
// price raised at the vendor.
func (f *Fake) SetPrice(format, model string, m *pricing.Model, factor int64) {
	f.T.Helper()
	r, _ := m.RatesFor(0, "")
	body := map[string]any{"format": format, "model": model}
	for name, rate := range map[string]int64{
		"input_tokens": r.Input, "output_tokens": r.Output, "cache_read_tokens": r.CacheRead,
		"cache_write_tokens": r.CacheWrite5m, "cache_write_1h_tokens": r.CacheWrite1h,
		"audio_input_tokens": r.AudioInput, "audio_output_tokens": r.AudioOutput,
		"image_input_tokens": r.ImageInput, "image_output_tokens": r.ImageOutput,
		"web_search_requests": r.WebSearches, "audio_seconds": r.AudioSeconds, "images": r.Images,
	} {
		body[name] = rate * factor
	}
	f.post("/prices", body)
}

// Billed is one entry of what the fake billed (GET /usage).
type Billed struct {
	At      time.Time `json:"at"`
	KeyID   string    `json:"vendor_key_id"`
	Model   string    `json:"model"`
	NanoUSD int64     `json:"cost_nano_usd"`
	Tokens  struct {
		Input        int64 `json:"input_tokens"`
		CacheRead    int64 `json:"cache_read_tokens"`
		CacheWrite5m int64 `json:"cache_write_tokens"`
		CacheWrite1h int64 `json:"cache_write_1h_tokens"`
		Output       int64 `json:"output_tokens"`
		AudioInput   int64 `json:"audio_input_tokens"`
		AudioOutput  int64 `json:"audio_output_tokens"`
		ImageInput   int64 `json:"image_input_tokens"`
		ImageOutput  int64 `json:"image_output_tokens"`
		WebSearches  int64 `json:"web_search_requests"`
		AudioSeconds int64 `json:"audio_seconds"`
		Images       int64 `json:"images"`
	} `json:"tokens"`
}

// Usage is b's tokens in the ledger's kinds.
func (b Billed) Usage() usage.Usage {
	t := b.Tokens
	return usage.Usage{Input: t.Input, CacheRead: t.CacheRead, CacheWrite5m: t.CacheWrite5m, CacheWrite1h: t.CacheWrite1h,
		Output: t.Output, AudioInput: t.AudioInput, AudioOutput: t.AudioOutput, ImageInput: t.ImageInput, ImageOutput: t.ImageOutput,
		WebSearches: t.WebSearches, AudioSeconds: t.AudioSeconds, Images: t.Images}
}

// Billed returns every entry the fake billed in a wire format's reports.
func (f *Fake) Billed(format string) []Billed {
	f.T.Helper()
	var out []Billed
	f.get("/usage?format="+format, &out)
	return out
}

// BillAbandoned makes the fake bill, in a wire format's usage reports, each
// hung request when its client gives up, as generated in full.
func (f *Fake) BillAbandoned(format string, bill bool) {
	f.T.Helper()
	f.post("/abandoned", map[string]any{"format": format, "bill": bill})
}

// AddUsageAt is AddUsage served at a given time.
func (f *Fake) AddUsageAt(format, secret, model string, at time.Time, tokens map[string]int64) {
	f.T.Helper()
	body := map[string]any{"format": format, "key": KeyLabel(secret), "model": model, "at": at.UTC().Format(time.RFC3339)}
	for k, v := range tokens {
		body[k] = v
	}
	f.post("/usage", body)
}
