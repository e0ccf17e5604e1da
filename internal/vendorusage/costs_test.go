package vendorusage

import (
	"testing"
	"time"
)

// The example page of OpenAI's Costs API reference.
const openAICostsExample = `{"object":"page","data":[{"object":"bucket","start_time":1730419200,"end_time":1730505600,
"results":[{"object":"organization.costs.result","amount":{"value":0.06,"currency":"usd"},"line_item":null,"project_id":null}]}],
"has_more":false,"next_page":null}`

// A cost report page as Anthropic's reference describes it: amounts in
// cents, decimal strings, one result per description.
const anthropicCostsExample = `{"data":[{"starting_at":"2025-08-01T00:00:00Z","ending_at":"2025-08-02T00:00:00Z","results":[
{"currency":"USD","amount":"123.45","workspace_id":null,"description":"Claude Sonnet 4 Usage - Input Tokens","cost_type":"tokens","model":"claude-sonnet-4-20250514","token_type":"uncached_input_tokens"},
{"currency":"USD","amount":"0.0000001","description":"Claude Sonnet 4 Usage - Output Tokens","cost_type":"tokens"}]}],
"has_more":true,"next_page":"page_x"}`

func TestParseCosts(t *testing.T) {
	got, next, err := ParseOpenAICosts([]byte(openAICostsExample))
	if err != nil || next != "" {
		t.Fatal(err, next)
	}
	want := Cost{Start: time.Unix(1730419200, 0).UTC(), End: time.Unix(1730505600, 0).UTC(), NanoUSD: 60_000_000}
	if len(got) != 1 || got[0] != want {
		t.Errorf("openai %+v, want %+v", got, want)
	}
	got, next, err = ParseAnthropicCosts([]byte(anthropicCostsExample))
	if err != nil || next != "page_x" {
		t.Fatal(err, next)
	}
	// $1.2345 and a millionth of a cent, 1 nano-USD.
	if len(got) != 1 || got[0].NanoUSD != 1_234_500_001 || !got[0].Start.Equal(time.Date(2025, 8, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("anthropic %+v", got)
	}
	for name, c := range map[string]struct {
		parse func([]byte) ([]Cost, string, error)
		body  string
	}{
		"openai euros":      {ParseOpenAICosts, `{"data":[{"start_time":1,"end_time":2,"results":[{"amount":{"value":1,"currency":"eur"}}]}]}`},
		"openai no bucket":  {ParseOpenAICosts, `{"data":[{"results":[]}]}`},
		"anthropic not dec": {ParseAnthropicCosts, `{"data":[{"starting_at":"2025-08-01T00:00:00Z","ending_at":"2025-08-02T00:00:00Z","results":[{"amount":"1,5"}]}]}`},
	} {
		if _, _, err := c.parse([]byte(c.body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	for v, want := range map[string]time.Duration{"": time.Second, "3": 3 * time.Second, "0": time.Second, "99999": maxRetryAfter, "99999999999": maxRetryAfter, "9223372036854775807": maxRetryAfter, "-5": time.Second} {
		if got := RetryAfter(v); got != want {
			t.Errorf("RetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
