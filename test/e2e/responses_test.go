package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

const responsesPath = "/beta/v1/responses"

// responsesBilled reads the usage a Responses API reply reported to the
// client: the JSON response, or the terminal event of a stream.
func responsesBilled(t *testing.T, body []byte, stream bool) (billed, string, string) {
	t.Helper()
	doc := body
	if stream {
		doc = nil
		for _, d := range sseData(body) {
			var ev struct {
				Type     string          `json:"type"`
				Response json.RawMessage `json:"response"`
			}
			mustJSON(t, d, &ev)
			if ev.Type == "response.completed" || ev.Type == "response.incomplete" || ev.Type == "response.failed" {
				doc = ev.Response
			}
		}
		if doc == nil {
			t.Fatalf("no terminal event in %s", body)
		}
	}
	var r struct {
		ID          string `json:"id"`
		Model       string `json:"model"`
		ServiceTier string `json:"service_tier"`
		Output      []struct {
			Type string `json:"type"`
		} `json:"output"`
		Usage struct {
			InputTokens        int64 `json:"input_tokens"`
			OutputTokens       int64 `json:"output_tokens"`
			InputTokensDetails struct {
				CachedTokens int64 `json:"cached_tokens"`
			} `json:"input_tokens_details"`
		} `json:"usage"`
	}
	mustJSON(t, doc, &r)
	b := billed{input: r.Usage.InputTokens - r.Usage.InputTokensDetails.CachedTokens, cacheRead: r.Usage.InputTokensDetails.CachedTokens,
		output: r.Usage.OutputTokens, tier: r.ServiceTier}
	for _, it := range r.Output {
		if it.Type == "web_search_call" {
			b.searches++
		}
	}
	return b, r.Model, r.ID
}

// A response, JSON and streamed, is billed from the vendor's own usage: the
// cached and reasoning tokens, the service tier the reply reports (not the
// one asked for), the two web searches it made, and an incomplete reply's
// figures; the stored response then belongs to its account alone.
func TestResponsesBilledAndBoundToTheirAccount(t *testing.T) {
	s := sharedStack(t, "responses")
	owner := s.NewAccount(100, noLimits)
	other := s.NewAccount(100, noLimits)
	served := servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses")
	ctx := context.Background()
	var ids []string
	var wantCosts []int64
	// gpt-6-sol has priority prices and a web search fee; gpt-5.1-codex is
	// served on responses only.
	const model = "gpt-6-sol"
	for _, tc := range []struct {
		name, model, controls, extra string
	}{
		{"priority, cached, reasoning, two searches", model, `{"service_tier":"priority","cache_read_tokens":40,"reasoning_tokens":30,"web_search_requests":2}`, `,"service_tier":"auto","tools":[{"type":"web_search"}]`},
		{"incomplete", "gpt-5.1-codex", `{"reply_words":50}`, `,"max_output_tokens":16`},
	} {
		entry := served[tc.model]
		if entry == nil || entry["mode"] == "chat" && tc.model == "gpt-5.1-codex" {
			t.Fatalf("%s is not a model of the catalogue served on responses", tc.model)
		}
		for _, streamed := range []bool{false, true} {
			body := []byte(fmt.Sprintf(`{"model":%q,"stream":%t,"instructions":"Be brief.","input":"What does it cost?"%s}`, tc.model, streamed, tc.extra))
			h := chatCompletionsHeaders(owner.Key)
			h["x-fake-controls"] = tc.controls
			resp, reply := s.Do("POST", responsesPath, h, body)
			if resp.StatusCode != 200 {
				t.Fatalf("%s stream=%v: %d %s", tc.name, streamed, resp.StatusCode, reply)
			}
			u, _, id := responsesBilled(t, reply, streamed)
			if id == "" {
				t.Fatalf("%s: no response id", tc.name)
			}
			ids = append(ids, id)
			wantCosts = append(wantCosts, expectedNano(t, entry, u))
		}
	}
	entries, _, err := s.Store.Ledger(ctx, owner.ID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(wantCosts) {
		t.Fatalf("%d ledger entries, want %d", len(entries), len(wantCosts))
	}
	for i, e := range entries {
		if e.Cost != wantCosts[i] || e.Estimated || e.Status != 200 {
			t.Errorf("request %d: cost %d estimated %v status %d, want cost %d (entry %+v)", i, e.Cost, e.Estimated, e.Status, wantCosts[i], e.Settlement)
		}
	}
	if e := entries[0]; e.Usage.WebSearches != 2 || e.Usage.CacheRead != 40 || e.Usage.Reasoning != 30 || e.ServiceTier != "priority" || e.Rates.WebSearches == 0 {
		t.Errorf("first request: %+v", e.Settlement)
	}
	if e := entries[2]; e.Usage.Output != 16 || e.Requested != "gpt-5.1-codex" {
		t.Errorf("incomplete request: %+v", e.Settlement)
	}

	// Another account cannot reach the owner's responses, and the vendor
	// never hears of its attempts.
	before := clientRequests(s)
	id := ids[0]
	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/beta/v1/responses/" + id, ""},
		{"GET", "/beta/v1/responses/" + id + "?stream=true", ""},
		{"DELETE", "/beta/v1/responses/" + id, ""},
		{"POST", "/beta/v1/responses/" + id + "/cancel", ""},
		{"GET", "/beta/v1/responses/" + id + "/input_items", ""},
		{"POST", responsesPath, fmt.Sprintf(`{"model":%q,"input":"more","previous_response_id":%q}`, model, id)},
		{"POST", "/beta/v1/responses/input_tokens", fmt.Sprintf(`{"model":%q,"input":"more","previous_response_id":%q}`, model, id)},
		{"GET", "/beta/v1/responses/resp_unknown", ""},
	} {
		resp, out := s.Do(rq.method, rq.path, chatCompletionsHeaders(other.Key), []byte(rq.body))
		var e struct {
			Error struct{ Message, Type string }
		}
		if resp.StatusCode != 404 || json.Unmarshal(out, &e) != nil || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "not found") {
			t.Errorf("other account %s %s: %d %s", rq.method, rq.path, resp.StatusCode, out)
		}
	}
	if after := clientRequests(s); after != before {
		t.Errorf("the vendor received %d requests of the other account", after-before)
	}

	// The owner reads it back, lists its input, continues it and counts
	// tokens against it; none of that is billed again except the new turn.
	for _, rq := range []struct{ method, path, body string }{
		{"GET", "/beta/v1/responses/" + id, ""},
		{"GET", "/beta/v1/responses/" + id + "/input_items", ""},
		{"POST", "/beta/v1/responses/input_tokens", fmt.Sprintf(`{"model":%q,"input":"more","previous_response_id":%q}`, model, id)},
		{"POST", responsesPath, fmt.Sprintf(`{"model":%q,"input":"more","previous_response_id":%q}`, model, id)},
		{"DELETE", "/beta/v1/responses/" + id, ""},
	} {
		if resp, out := s.Do(rq.method, rq.path, chatCompletionsHeaders(owner.Key), []byte(rq.body)); resp.StatusCode != 200 {
			t.Errorf("owner %s %s: %d %s", rq.method, rq.path, resp.StatusCode, out)
		}
	}
	entries, _, err = s.Store.Ledger(ctx, owner.ID, "", 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(wantCosts)+1 {
		t.Errorf("%d ledger entries after reads and one new turn, want %d", len(entries), len(wantCosts)+1)
	}
	if o, _, _ := s.Store.Ledger(ctx, other.ID, "", 10); len(o) != 0 {
		t.Errorf("the other account was billed: %+v", o)
	}
}

// The Responses API's other built-in tools are billed per call from the
// calls the vendor reports having made, JSON and stream alike: file
// searches and image generations at the prices the operator configured
// (the pinned catalogue prices neither), code interpreter sessions per
// distinct container at the catalogue's openai/container price.
func TestResponsesBuiltinToolCallsBilled(t *testing.T) {
	const (
		model            = "gpt-6-sol"
		fileSearchUSD    = 0.0025
		imageUSD         = 0.04
		fileSearches     = 2
		interpreterCalls = 3
		containers       = 2
		imageGenerations = 1
		toolsOffered     = `,"tools":[{"type":"file_search","vector_store_ids":[]},{"type":"code_interpreter","container":{"type":"auto"}},{"type":"image_generation"}]`
	)
	controls := fmt.Sprintf(`{"file_search_calls":%d,"code_interpreter_calls":%d,"code_interpreter_containers":%d,"image_generation_calls":%d}`,
		fileSearches, interpreterCalls, containers, imageGenerations)
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		fs, img := fileSearchUSD, imageUSD
		beta, ok := c.Upstream("beta")
		if !ok {
			t.Fatal("no upstream beta")
		}
		if beta.Models.Overrides == nil {
			beta.Models.Overrides = map[string]config.Price{}
		}
		beta.Models.Overrides[model] = config.Price{FileSearch: &fs, ImageGeneration: &img}
	}})
	acct := s.NewAccount(100, noLimits)
	entry := servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses")[model]
	if entry == nil {
		t.Fatalf("%s is not served on responses", model)
	}
	// The code interpreter is priced per session for all of a provider's
	// models, in the catalogue's PROVIDER/container entry.
	session, ok := catalogueEntries(t, s.Config.Catalogue)["openai/container"]["code_interpreter_cost_per_session"].(json.Number)
	if !ok {
		t.Fatal("the catalogue has no openai/container session price")
	}
	usd := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

	var want []int64
	for _, streamed := range []bool{false, true} {
		body := []byte(fmt.Sprintf(`{"model":%q,"stream":%t,"input":"Search, compute and draw."%s}`, model, streamed, toolsOffered))
		h := chatCompletionsHeaders(acct.Key)
		h["x-fake-controls"] = controls
		resp, reply := s.Do("POST", responsesPath, h, body)
		if resp.StatusCode != 200 {
			t.Fatalf("stream=%v: %d %s", streamed, resp.StatusCode, reply)
		}
		u, _, _ := responsesBilled(t, reply, streamed)
		u.fees = []fee{{fileSearches, usd(fileSearchUSD)}, {containers, string(session)}, {imageGenerations, usd(imageUSD)}}
		want = append(want, expectedNano(t, entry, u))
	}
	entries, _, err := s.Store.Ledger(context.Background(), acct.ID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Fatalf("%d ledger entries, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		u, r := e.Usage, e.Rates
		if u.FileSearches != fileSearches || u.CodeInterpreter != containers || u.ImageGenerations != imageGenerations ||
			r.FileSearches == 0 || r.CodeInterpreter == 0 || r.ImageGenerations == 0 {
			t.Errorf("request %d: usage %+v, rates %+v; want %d file searches, %d sessions (of %d calls), %d images, each priced",
				i, u, r, fileSearches, containers, interpreterCalls, imageGenerations)
		}
		if e.Cost != want[i] || e.Estimated || e.Capped {
			t.Errorf("request %d: cost %d (estimated %v, capped %v), want %d", i, e.Cost, e.Estimated, e.Capped, want[i])
		}
	}
}

// Embeddings are billed as input, from usage.prompt_tokens; a chat model is
// not served there, nor an embedding model on chat completions.
func TestEmbeddingsBilledAsInput(t *testing.T) {
	s := sharedStack(t, "responses")
	acct := s.NewAccount(10, noLimits)
	const model = "text-embedding-3-small"
	entry := servedModels(t, s.Config.Catalogue, "openai", []string{"embedding"}, "/v1/embeddings")[model]
	resp, out := s.Do("POST", "/beta/v1/embeddings", chatCompletionsHeaders(acct.Key), []byte(`{"model":"text-embedding-3-small","input":["one","two"]}`))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, out)
	}
	var r struct {
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	mustJSON(t, out, &r)
	entries, _, err := s.Store.Ledger(context.Background(), acct.ID, "", 10)
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledger %v %v", entries, err)
	}
	if e := entries[0]; e.Usage.Input != r.Usage.PromptTokens || e.Cost != expectedNano(t, entry, billed{input: r.Usage.PromptTokens}) || e.Estimated {
		t.Errorf("entry %+v, want input %d", e.Settlement, r.Usage.PromptTokens)
	}
	for _, rq := range []struct{ path, body string }{
		{"/beta/v1/embeddings", `{"model":"gpt-4o-mini","input":"x"}`},
		{betaPath, `{"model":"text-embedding-3-small","messages":[{"role":"user","content":"x"}]}`},
		{betaPath, `{"model":"gpt-5.1-codex","messages":[{"role":"user","content":"x"}]}`},
	} {
		if resp, out := s.Do("POST", rq.path, chatCompletionsHeaders(acct.Key), []byte(rq.body)); resp.StatusCode != 400 || !strings.Contains(string(out), "model_not_found") {
			t.Errorf("%s %s: %d %s", rq.path, rq.body, resp.StatusCode, out)
		}
	}
}

// GET /v1/models on each upstream lists exactly the models the gateway
// serves and prices there (those a key's allow-list admits), in the
// vendor's format, without asking the vendor; a model not served is 404.
func TestModelListsAreTheServedModels(t *testing.T) {
	s := sharedStack(t, "responses")
	acct := s.NewAccount(1, noLimits)
	asked := func() int { return clientRequests(s) }
	before := asked()
	for _, up := range []struct {
		name, path string
		headers    map[string]string
		listed     map[string]map[string]any
	}{
		{"beta", "/beta/v1/models", chatCompletionsHeaders(acct.Key), mergeModels(
			servedModels(t, s.Config.Catalogue, "openai", []string{"chat"}, "/v1/chat/completions"),
			servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses"),
			servedModels(t, s.Config.Catalogue, "openai", []string{"embedding"}, "/v1/embeddings"),
			servedModels(t, s.Config.Catalogue, "openai", []string{"audio_transcription"}, "/v1/audio/transcriptions"),
			servedModels(t, s.Config.Catalogue, "openai", []string{"image_generation"}, "/v1/images/generations"))},
		{"alpha", "/alpha/v1/models?limit=1000", messagesHeaders(acct.Key), catalogueModels(t, s.Config.Catalogue, "anthropic")},
	} {
		resp, out := s.Do("GET", up.path, up.headers, nil)
		var list struct {
			Object string
			Data   []struct{ ID, Object, Type string }
		}
		if resp.StatusCode != 200 || json.Unmarshal(out, &list) != nil {
			t.Fatalf("%s: %d %s", up.path, resp.StatusCode, out)
		}
		got := map[string]bool{}
		for _, m := range list.Data {
			got[m.ID] = true
		}
		// Dated snapshots priced like their undated name are listed once,
		// under that name.
		for name := range up.listed {
			if !got[name] && !got[undatedName(name)] {
				t.Errorf("%s: %s is served but not listed", up.name, name)
			}
		}
		for name := range got {
			if up.listed[name] == nil {
				t.Errorf("%s: %s is listed but not served", up.name, name)
			}
		}
	}
	if resp, out := s.Do("GET", "/beta/v1/models/gpt-5.1-codex", chatCompletionsHeaders(acct.Key), nil); resp.StatusCode != 200 || !strings.Contains(string(out), `"object":"model"`) {
		t.Errorf("retrieve: %d %s", resp.StatusCode, out)
	}
	if resp, out := s.Do("GET", "/beta/v1/models/claude-sonnet-4-5", chatCompletionsHeaders(acct.Key), nil); resp.StatusCode != 404 {
		t.Errorf("retrieve of a model not served here: %d %s", resp.StatusCode, out)
	}
	if after := asked(); after != before {
		t.Errorf("the vendor was asked %d times", after-before)
	}
}

func mergeModels(ms ...map[string]map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// undatedName strips a -YYYY-MM-DD or -YYYYMMDD suffix.
func undatedName(name string) string {
	if i := strings.LastIndexByte(name, '-'); i > 0 && len(name)-i-1 == 8 {
		return name[:i]
	}
	if len(name) > 11 && name[len(name)-11] == '-' && name[len(name)-6] == '-' && name[len(name)-3] == '-' {
		return name[:len(name)-11]
	}
	return name
}

// An upgrade to WebSocket where no route allows one (chat completions) is
// refused by Envoy with a clear error in the vendor's format; nothing
// reaches the vendor. (The Responses API's transport: socket_test.go.)
func TestWebSocketRefusedElsewhere(t *testing.T) {
	s := sharedStack(t, "responses")
	acct := s.NewAccount(1, noLimits)
	before := clientRequests(s)
	h := chatCompletionsHeaders(acct.Key)
	h["Connection"], h["Upgrade"] = "Upgrade", "websocket"
	h["Sec-WebSocket-Version"], h["Sec-WebSocket-Key"] = "13", "dGhlIHNhbXBsZSBub25jZQ=="
	resp, out := s.Do("GET", "/beta/v1/chat/completions", h, nil)
	if resp.StatusCode == 101 || resp.StatusCode < 400 || !strings.Contains(string(out), "WebSocket") {
		t.Fatalf("websocket: %d %s", resp.StatusCode, out)
	}
	if after := clientRequests(s); after != before {
		t.Errorf("the vendor received %d requests", after-before)
	}
}

// Every catalogue model served on responses, JSON and streamed, and every
// embedding model, is billed at the catalogue's price of the usage the
// vendor reported, to the nano-USD: replies reporting service_tier
// priority with cached and reasoning tokens and two web searches, then a
// reply ending incomplete.
func TestEveryCatalogueModelOnResponsesAndEmbeddings(t *testing.T) {
	s := sharedStack(t, "responses")
	resp := servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses")
	emb := servedModels(t, s.Config.Catalogue, "openai", []string{"embedding"}, "/v1/embeddings")
	if resp["gpt-5.1-codex"] == nil || resp["gpt-4o"] == nil || len(emb) < 3 {
		t.Fatalf("catalogue: %d responses models, %d embedding models", len(resp), len(emb))
	}
	type want struct {
		model string
		cost  int64
	}
	ctx := context.Background()
	check := func(acct launch.Account, wants []want) {
		t.Helper()
		entries, _, err := s.Store.Ledger(ctx, acct.ID, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(wants) {
			t.Errorf("%s: %d ledger entries, want %d", wants[0].model, len(entries), len(wants))
			return
		}
		for i, e := range entries {
			if e.Cost != wants[i].cost || e.Estimated || string(e.Requested) != wants[i].model {
				t.Errorf("%s request %d: cost %d estimated %v, want %d (%+v)", wants[i].model, i, e.Cost, e.Estimated, wants[i].cost, e.Settlement)
			}
		}
	}
	const tools = `,"tools":[{"type":"web_search"}]`
	for name, entry := range resp {
		acct := s.NewAccount(1_000, noLimits)
		var wants []want
		for _, c := range []struct{ controls, extra string }{
			{`{"service_tier":"priority","cache_read_tokens":300,"reasoning_tokens":120,"web_search_requests":2}`, tools},
			{`{"reply_words":40}`, `,"max_output_tokens":16`},
		} {
			for _, streamed := range []bool{false, true} {
				h := chatCompletionsHeaders(acct.Key)
				h["x-fake-controls"] = c.controls
				body := []byte(fmt.Sprintf(`{"model":%q,"stream":%t,"input":"What does it cost?"%s}`, name, streamed, c.extra))
				r, out := s.Do("POST", responsesPath, h, body)
				if r.StatusCode != 200 {
					t.Fatalf("%s stream=%v: %d %s", name, streamed, r.StatusCode, out)
				}
				u, _, _ := responsesBilled(t, out, streamed)
				wants = append(wants, want{name, expectedNano(t, entry, u)})
			}
		}
		check(acct, wants)
	}
	for name, entry := range emb {
		acct := s.NewAccount(10, noLimits)
		r, out := s.Do("POST", "/beta/v1/embeddings", chatCompletionsHeaders(acct.Key), []byte(fmt.Sprintf(`{"model":%q,"input":["a","b c"]}`, name)))
		var e struct {
			Usage struct {
				PromptTokens int64 `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if r.StatusCode != 200 || json.Unmarshal(out, &e) != nil {
			t.Fatalf("%s: %d %s", name, r.StatusCode, out)
		}
		check(acct, []want{{name, expectedNano(t, entry, billed{input: e.Usage.PromptTokens})}})
	}
	t.Logf("%d responses models × 4 requests, %d embedding models, each billed at the catalogue price", len(resp), len(emb))
}

// clientRequests counts the requests both fake vendors received, Envoy's
// health checks (which probe GET /v1/models) left out.
func clientRequests(s *launch.Stack) int {
	n := 0
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, r := range f.Requests() {
			if !strings.Contains(strings.Join(r.Headers["User-Agent"], ""), "Envoy/HC") {
				n++
			}
		}
	}
	return n
}
