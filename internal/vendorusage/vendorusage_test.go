package vendorusage

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/usage"
)

// The example page of OpenAI's completions usage reference, grouped by key
// and model.
const openAIExample = `{
  "object": "page",
  "data": [{
    "object": "bucket",
    "start_time": 1730419200,
    "end_time": 1730505600,
    "results": [{
      "object": "organization.usage.completions.result",
      "input_tokens": 1000,
      "output_tokens": 500,
      "input_cached_tokens": 800,
      "input_audio_tokens": 0,
      "output_audio_tokens": 0,
      "num_model_requests": 5,
      "project_id": null,
      "user_id": null,
      "api_key_id": "key_abc",
      "model": "gpt-4o-mini-2024-07-18",
      "batch": null
    }]
  }],
  "has_more": true,
  "next_page": "AAAAAGdGxdEiJdKOAAAAAGcqsYA="
}`

// The example page of Anthropic's Messages usage report reference.
const anthropicExample = `{
  "data": [{
    "starting_at": "2025-08-01T00:00:00Z",
    "ending_at": "2025-08-02T00:00:00Z",
    "results": [{
      "uncached_input_tokens": 1500,
      "cache_creation": {"ephemeral_1h_input_tokens": 1000, "ephemeral_5m_input_tokens": 500},
      "cache_read_input_tokens": 200,
      "output_tokens": 500,
      "server_tool_use": {"web_search_requests": 10},
      "api_key_id": "apikey_01Rj2N8SVvo6BePZj99NhmiT",
      "workspace_id": "wrkspc_01JwQvzr7rXLA5AGx3HKfFUJ",
      "model": "claude-sonnet-4-20250514",
      "service_tier": "standard",
      "context_window": "0-200k"
    }]
  }],
  "has_more": true,
  "next_page": "page_MjAyNS0wNS0xNFQwMDowMDowMFo="
}`

func TestParseOpenAI(t *testing.T) {
	rows, next, err := ParseOpenAI([]byte(openAIExample))
	if err != nil {
		t.Fatal(err)
	}
	if next != "AAAAAGdGxdEiJdKOAAAAAGcqsYA=" {
		t.Errorf("next = %q", next)
	}
	want := Row{
		Start: time.Unix(1730419200, 0).UTC(), End: time.Unix(1730505600, 0).UTC(),
		KeyID: "key_abc", Model: "gpt-4o-mini-2024-07-18",
		Tokens:   usage.Usage{Input: 200, CacheRead: 800, Output: 500},
		Requests: 5,
	}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("rows = %+v, want %+v", rows, want)
	}
}

func TestParseAnthropic(t *testing.T) {
	rows, next, err := ParseAnthropic([]byte(anthropicExample))
	if err != nil {
		t.Fatal(err)
	}
	if next != "page_MjAyNS0wNS0xNFQwMDowMDowMFo=" {
		t.Errorf("next = %q", next)
	}
	want := Row{
		Start: time.Date(2025, 8, 1, 0, 0, 0, 0, time.UTC), End: time.Date(2025, 8, 2, 0, 0, 0, 0, time.UTC),
		KeyID: "apikey_01Rj2N8SVvo6BePZj99NhmiT", Model: "claude-sonnet-4-20250514",
		Tokens: usage.Usage{Input: 1500, CacheRead: 200, CacheWrite5m: 500, CacheWrite1h: 1000, Output: 500, WebSearches: 10},
	}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("rows = %+v, want %+v", rows, want)
	}
}

func TestParseRejects(t *testing.T) {
	for name, c := range map[string]struct {
		parse func([]byte) ([]Row, string, error)
		body  string
	}{
		"openai not json":      {ParseOpenAI, `{`},
		"openai no bucket":     {ParseOpenAI, `{"data":[{"results":[]}]}`},
		"openai cached > all":  {ParseOpenAI, `{"data":[{"start_time":1,"end_time":2,"results":[{"input_tokens":1,"input_cached_tokens":2}]}]}`},
		"anthropic not json":   {ParseAnthropic, `[]`},
		"anthropic no bucket":  {ParseAnthropic, `{"data":[{"results":[]}]}`},
		"anthropic bad time":   {ParseAnthropic, `{"data":[{"starting_at":"yesterday"}]}`},
		"openai string tokens": {ParseOpenAI, `{"data":[{"start_time":1,"end_time":2,"results":[{"input_tokens":"1"}]}]}`},
	} {
		if _, _, err := c.parse([]byte(c.body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// The last page has has_more false: no next page, whatever next_page says.
func TestParseLastPage(t *testing.T) {
	_, next, err := ParseAnthropic([]byte(`{"data":[],"has_more":false,"next_page":"x"}`))
	if err != nil || next != "" {
		t.Fatalf("next %q, err %v", next, err)
	}
}

// Fetch follows next_page to the end, with each vendor's query.
func TestFetchPages(t *testing.T) {
	for _, format := range []string{config.FormatMessages, config.FormatChatCompletions} {
		var queries []string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			queries = append(queries, r.URL.RawQuery)
			page, _ := strconv.Atoi(r.URL.Query().Get("page"))
			more := page < 2
			next := strconv.Itoa(page + 1)
			if format == config.FormatMessages {
				if r.URL.Path != AnthropicPath || r.Header.Get("anthropic-version") == "" {
					http.Error(w, "wrong request", http.StatusBadRequest)
					return
				}
				w.Write([]byte(`{"data":[{"starting_at":"2025-08-01T00:00:00Z","ending_at":"2025-08-01T01:00:00Z","results":[{"uncached_input_tokens":1,"api_key_id":"k","model":"m"}]}],"has_more":` + strconv.FormatBool(more) + `,"next_page":"` + next + `"}`))
				return
			}
			if _, other := openAIOther[r.URL.Path]; other {
				w.Write([]byte(`{"data":[],"has_more":false}`))
				return
			}
			if r.URL.Path != OpenAIPath {
				http.Error(w, "wrong path", http.StatusNotFound)
				return
			}
			w.Write([]byte(`{"data":[{"start_time":1,"end_time":2,"results":[{"input_tokens":1,"api_key_id":"k","model":"m"}]}],"has_more":` + strconv.FormatBool(more) + `,"next_page":"` + next + `"}`))
		}))
		from := time.Date(2025, 8, 1, 0, 0, 0, 0, time.UTC)
		rows, err := Fetch(context.Background(), srv.Client(), srv.URL, format, from, from.Add(time.Hour), Hour)
		srv.Close()
		if err != nil {
			t.Fatalf("%s: %v", format, err)
		}
		// OpenAI's other reports, one empty page each.
		wantPages := 3
		if format == config.FormatChatCompletions {
			wantPages += len(openAIOther)
		}
		if len(rows) != 3 || len(queries) != wantPages {
			t.Fatalf("%s: %d rows from %d pages, want 3 from %d", format, len(rows), len(queries), wantPages)
		}
	}
}

// A vendor's error status is an error, not an empty report.
func TestFetchError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":{"message":"invalid admin key"}}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	_, err := Fetch(context.Background(), srv.Client(), srv.URL, config.FormatChatCompletions, time.Unix(0, 0), time.Unix(3600, 0), Hour)
	if err == nil {
		t.Fatal("no error")
	}
}

// A rate-limited page is asked for again after the vendor's retry-after.
func TestFetchRateLimited(t *testing.T) {
	tries := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != OpenAIPath {
			w.Write([]byte(`{"data":[],"has_more":false}`))
			return
		}
		tries++
		if tries == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"type":"rate_limit_error"}}`, http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"data":[{"start_time":1,"end_time":2,"results":[{"input_tokens":1,"api_key_id":"k","model":"m"}]}],"has_more":false}`))
	}))
	defer srv.Close()
	rows, err := Fetch(context.Background(), srv.Client(), srv.URL, config.FormatChatCompletions, time.Unix(0, 0), time.Unix(3600, 0), Hour)
	if err != nil || len(rows) != 1 || tries != 2 {
		t.Fatalf("%d rows after %d tries: %v", len(rows), tries, err)
	}
}

// The embeddings, transcriptions and images reports are read beside the
// completions one, each count in its kind.
func TestFetchOtherReports(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := map[string]string{
			OpenAIPath:                                    `"input_tokens":3`,
			"/v1/organization/usage/embeddings":           `"input_tokens":40`,
			"/v1/organization/usage/audio_transcriptions": `"seconds":61`,
			"/v1/organization/usage/images":               `"images":2`,
		}[r.URL.Path]
		w.Write([]byte(`{"data":[{"start_time":3600,"end_time":7200,"results":[{` + res + `,"num_model_requests":1,"api_key_id":"k","model":"m"}]}],"has_more":false}`))
	}))
	defer srv.Close()
	rows, err := Fetch(context.Background(), srv.Client(), srv.URL, config.FormatChatCompletions, time.Unix(3600, 0), time.Unix(7200, 0), Hour)
	if err != nil {
		t.Fatal(err)
	}
	var sum usage.Usage
	for _, r := range rows {
		sum = sum.Add(r.Tokens)
	}
	if len(rows) != 4 || sum != (usage.Usage{Input: 43, AudioSeconds: 61, Images: 2}) {
		t.Fatalf("%d rows, %+v", len(rows), sum)
	}
}

// The GPT image models' tokens are in the completions report apart from
// text: the ledger's image input and output.
func TestParseOpenAIImageTokens(t *testing.T) {
	page := `{"object":"page","data":[{"object":"bucket","start_time":1730419200,"end_time":1730422800,"results":[
	  {"object":"organization.usage.completions.result","input_tokens":12,"output_tokens":0,"input_cached_tokens":0,
	   "input_image_tokens":300,"output_image_tokens":4160,"num_model_requests":1,"api_key_id":"key_k1","model":"gpt-image-1"}]}],
	  "has_more":false,"next_page":null}`
	rows, next, err := ParseOpenAI([]byte(page))
	if err != nil || next != "" || len(rows) != 1 {
		t.Fatalf("rows %+v, next %q, err %v", rows, next, err)
	}
	if want := (usage.Usage{Input: 12, ImageInput: 300, ImageOutput: 4160}); rows[0].Tokens != want {
		t.Errorf("tokens %+v; want %+v", rows[0].Tokens, want)
	}
}
