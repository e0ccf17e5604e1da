package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// This file checks the gateway's bill against the catalogue itself: the
// expected cost of every reply is computed here, from the catalogue JSON and
// the usage the vendor reported to the client, without the gateway's
// pricing code.

// catalogueModels returns the chat models of a provider in the catalogue
// the gateway prices from, with their raw fields: those the chat route
// serves (the catalogue's supported_endpoints, when listed, name it).
func catalogueModels(t *testing.T, path, provider string) map[string]map[string]any {
	return servedModels(t, path, provider, []string{"chat"}, map[string]string{"anthropic": "/v1/messages", "openai": "/v1/chat/completions"}[provider])
}

// servedModels returns the models of a provider whose catalogue mode is one
// of modes and whose supported_endpoints, when listed, include endpoint.
func servedModels(t *testing.T, path, provider string, modes []string, endpoint string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for name, e := range catalogueEntries(t, path) {
		mode, _ := e["mode"].(string)
		// A model has token prices (an embedding model no output price;
		// an image model's output may be image tokens alone) or a price
		// per second of input audio. The per-image estimates of an image
		// model at one size ("high/1024-x-1536/gpt-image-1") are not
		// models.
		output := e["output_cost_per_token"] != nil || e["output_cost_per_image_token"] != nil || mode == "embedding"
		priced := e["input_cost_per_token"] != nil && output || e["input_cost_per_second"] != nil
		if sizedEstimate.MatchString(name) {
			continue
		}
		if e["litellm_provider"] != provider || !slices.Contains(modes, mode) || !priced {
			continue
		}
		if eps, ok := e["supported_endpoints"].([]any); ok && len(eps) > 0 && !slices.Contains(eps, any(endpoint)) {
			continue
		}
		out[name] = e
	}
	return out
}

// sizedEstimate matches the catalogue's per-image estimates of an image
// model at one size and quality.
var sizedEstimate = regexp.MustCompile(`^(?:[a-z]+/)?[0-9]+-x-[0-9]+/`)

// catalogueEntries reads the catalogue at path, its numbers as json.Number.
func catalogueEntries(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("catalogue: %v (run `make catalogue`)", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var all map[string]map[string]any
	if err := dec.Decode(&all); err != nil {
		t.Fatal(err)
	}
	return all
}

// priceTerm is n units at the price a catalogue entry holds in field.
type priceTerm struct {
	n     int64
	field string
}

// entryCost computes, from the catalogue entry alone, what the terms
// cost in nano-USD, rounded up once; a term of no units needs no price.
func entryCost(t *testing.T, e map[string]any, terms ...priceTerm) int64 {
	t.Helper()
	sum := new(big.Rat)
	for _, term := range terms {
		if term.n <= 0 {
			continue
		}
		v, ok := e[term.field].(json.Number)
		if !ok {
			t.Fatalf("catalogue: no %s in %v", term.field, e)
		}
		price, _ := new(big.Rat).SetString(string(v))
		sum.Add(sum, new(big.Rat).Mul(big.NewRat(term.n, 1), price))
	}
	nano := sum.Mul(sum, big.NewRat(1_000_000_000, 1))
	q := new(big.Int).Quo(nano.Num(), nano.Denom())
	if new(big.Rat).SetInt(q).Cmp(nano) < 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// billed is usage as the vendor reported it, split into the kinds the
// vendors bill separately.
type billed struct {
	input, output, cacheRead, cache5m, cache1h, audioIn, audioOut, searches int64
	tier                                                                    string
	region                                                                  string // regional processing of the endpoint that served
	fees                                                                    []fee  // per-call fees priced outside the model's entry
}

// fee is n calls at a price in USD (a decimal string) that the model's
// catalogue entry does not hold: the code interpreter's container entry,
// a configured price.
type fee struct {
	n   int64
	usd string
}

// capBilled caps u as the gateway does: input-side kinds together at input,
// in the order input, cache read, 5m and 1h cache writes, audio input;
// output and audio output together at output. It reports whether it cut.
func capBilled(u *billed, input, output int64) bool {
	cut := false
	take := func(v *int64, left *int64) {
		if *v > *left {
			*v, cut = *left, true
		}
		*left -= *v
	}
	for _, v := range []*int64{&u.input, &u.cacheRead, &u.cache5m, &u.cache1h, &u.audioIn} {
		take(v, &input)
	}
	for _, v := range []*int64{&u.output, &u.audioOut} {
		take(v, &output)
	}
	return cut
}

// priceBases are the catalogue's token price fields without suffixes.
var priceBases = []string{"input_cost_per_token", "output_cost_per_token", "cache_read_input_token_cost",
	"cache_creation_input_token_cost", "cache_creation_input_token_cost_above_1hr",
	"input_cost_per_audio_token", "output_cost_per_audio_token"}

var tierSuffix = regexp.MustCompile(`^(?:above_[0-9]+k_tokens_)?([a-z]+)$`)

// catalogueTiers lists the service tiers entry e prices: every "_<tier>"
// suffix of a token price but the batch API's.
func catalogueTiers(e map[string]any) []string {
	var tiers []string
	for f := range e {
		for _, b := range priceBases {
			rest, ok := strings.CutPrefix(f, b+"_")
			if !ok {
				continue
			}
			if m := tierSuffix.FindStringSubmatch(rest); m != nil && m[1] != "batches" && !slices.Contains(tiers, m[1]) {
				tiers = append(tiers, m[1])
			}
		}
	}
	return tiers
}

var aboveField = regexp.MustCompile(`_above_([0-9]+)k_tokens`)

// expectedNano prices u with catalogue entry e: the whole request at the
// long-context price when the prompt is above a threshold the entry lists,
// at the reported service tier's price where the entry has one, at the
// dearest of its tiers when the entry has no price for the tier reported; a
// kind the entry does not price is charged as the kind it varies (1h cache
// write as 5m, cache and audio input as input, audio output as output). The
// sum is multiplied by the entry's regional processing uplift when a
// regional endpoint served, then rounded up once to a whole nano-USD.
func expectedNano(t *testing.T, e map[string]any, u billed) int64 {
	t.Helper()
	prompt := u.input + u.cacheRead + u.cache5m + u.cache1h + u.audioIn
	var above int64
	for f := range e {
		if m := aboveField.FindStringSubmatch(f); m != nil {
			var k int64
			fmt.Sscan(m[1], &k)
			if prompt > k*1000 && k*1000 > above {
				above = k * 1000
			}
		}
	}
	rat := func(v any) *big.Rat {
		r, ok := new(big.Rat).SetString(string(v.(json.Number)))
		if !ok {
			t.Fatalf("price %v", v)
		}
		return r
	}
	priceAt := func(base, tier string) *big.Rat {
		var cands []string
		ab := fmt.Sprintf("_above_%dk_tokens", above/1000)
		if tier != "" {
			if above > 0 {
				cands = append(cands, base+ab+"_"+tier)
			}
			cands = append(cands, base+"_"+tier)
		}
		if above > 0 {
			cands = append(cands, base+ab)
		}
		for _, f := range append(cands, base) {
			if v, ok := e[f]; ok {
				return rat(v)
			}
		}
		return nil
	}
	tiers := []string{u.tier}
	switch {
	case u.tier == "" || u.tier == "default" || u.tier == "standard" || u.tier == "auto":
		tiers = []string{""}
	case !slices.Contains(catalogueTiers(e), u.tier):
		tiers = append(catalogueTiers(e), "")
	}
	price := func(base string) *big.Rat {
		var best *big.Rat
		for _, tier := range tiers {
			if p := priceAt(base, tier); p != nil && (best == nil || p.Cmp(best) > 0) {
				best = p
			}
		}
		return best
	}
	chain := func(fields ...string) *big.Rat {
		for _, f := range fields {
			if p := price(f); p != nil {
				return p
			}
		}
		return new(big.Rat)
	}
	const (
		in  = "input_cost_per_token"
		out = "output_cost_per_token"
		c5  = "cache_creation_input_token_cost"
		c1  = "cache_creation_input_token_cost_above_1hr"
	)
	sum := new(big.Rat)
	add := func(n int64, p *big.Rat) { sum.Add(sum, new(big.Rat).Mul(big.NewRat(n, 1), p)) }
	add(u.input, chain(in))
	add(u.output, chain(out))
	add(u.cacheRead, chain("cache_read_input_token_cost", in))
	add(u.cache5m, chain(c5, in))
	add(u.cache1h, chain(c1, c5, in))
	add(u.audioIn, chain("input_cost_per_audio_token", in))
	add(u.audioOut, chain("output_cost_per_audio_token", out))
	if q, ok := e["search_context_cost_per_query"].(map[string]any); ok {
		add(u.searches, rat(q["search_context_size_medium"]))
	}
	for _, f := range u.fees {
		p, ok := new(big.Rat).SetString(f.usd)
		if !ok {
			t.Fatalf("fee price %q", f.usd)
		}
		add(f.n, p)
	}
	if up, ok := e["regional_processing_uplift_multiplier_"+u.region]; ok && u.region != "" {
		sum.Mul(sum, rat(up))
	}
	sum.Mul(sum, big.NewRat(1_000_000_000, 1))
	n := new(big.Int).Quo(sum.Num(), sum.Denom())
	if new(big.Rat).SetInt(n).Cmp(sum) != 0 {
		n.Add(n, big.NewInt(1))
	}
	return n.Int64()
}

// postBody sends one request and returns the status and the body; safe from any
// goroutine.
func postBody(ctx context.Context, url string, header map[string]string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// sseData returns the data of each event of an SSE body.
func sseData(body []byte) [][]byte {
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := bytes.CutPrefix(sc.Bytes(), []byte("data:")); ok {
			out = append(out, bytes.TrimSpace(append([]byte(nil), d...)))
		}
	}
	return out
}

type alphaReplyUsage struct {
	InputTokens   int64 `json:"input_tokens"`
	OutputTokens  int64 `json:"output_tokens"`
	CacheRead     int64 `json:"cache_read_input_tokens"`
	CacheCreation struct {
		M5 int64 `json:"ephemeral_5m_input_tokens"`
		H1 int64 `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
	ServerToolUse struct {
		WebSearchRequests int64 `json:"web_search_requests"`
	} `json:"server_tool_use"`
	ServiceTier string `json:"service_tier"`
}

// messagesBilled reads the usage a messages reply reported, and the model it
// names.
func messagesBilled(body []byte, stream bool) (billed, string, error) {
	var u alphaReplyUsage
	var model string
	if !stream {
		var m struct {
			Model string
			Usage alphaReplyUsage
		}
		if err := json.Unmarshal(body, &m); err != nil {
			return billed{}, "", err
		}
		u, model = m.Usage, m.Model
	} else {
		for _, d := range sseData(body) {
			var ev struct {
				Type    string
				Message struct {
					Model string
					Usage alphaReplyUsage
				}
				Usage alphaReplyUsage
			}
			if err := json.Unmarshal(d, &ev); err != nil {
				return billed{}, "", err
			}
			switch ev.Type {
			case "message_start":
				u, model = ev.Message.Usage, ev.Message.Model
			case "message_delta":
				u.OutputTokens = ev.Usage.OutputTokens
				u.ServerToolUse = ev.Usage.ServerToolUse
			}
		}
	}
	b := billed{input: u.InputTokens, output: u.OutputTokens, cacheRead: u.CacheRead, cache5m: u.CacheCreation.M5,
		cache1h: u.CacheCreation.H1, searches: u.ServerToolUse.WebSearchRequests, tier: u.ServiceTier}
	return b, model, nil
}

type betaReplyUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
		AudioTokens  int64 `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
		AudioTokens     int64 `json:"audio_tokens"`
	} `json:"completion_tokens_details"`
}

// chatCompletionsBilled reads the usage a chat completion reported; the search a
// request with web_search_options runs is one query.
func chatCompletionsBilled(body []byte, stream, search bool) (billed, string, int64, error) {
	var u *betaReplyUsage
	var model, tier string
	docs := [][]byte{body}
	if stream {
		docs = sseData(body)
	}
	for _, d := range docs {
		if string(d) == "[DONE]" {
			continue
		}
		var c struct {
			Model       string
			ServiceTier string `json:"service_tier"`
			Usage       *betaReplyUsage
		}
		if err := json.Unmarshal(d, &c); err != nil {
			return billed{}, "", 0, err
		}
		model, tier = c.Model, c.ServiceTier
		if c.Usage != nil {
			u = c.Usage
		}
	}
	if u == nil {
		return billed{}, "", 0, fmt.Errorf("no usage in %s", body)
	}
	cached, audioIn, audioOut := u.PromptTokensDetails.CachedTokens, u.PromptTokensDetails.AudioTokens, u.CompletionTokensDetails.AudioTokens
	b := billed{input: u.PromptTokens - cached - audioIn, cacheRead: cached, audioIn: audioIn,
		output: u.CompletionTokens - audioOut, audioOut: audioOut, tier: tier}
	if search {
		b.searches = 1
	}
	return b, model, u.CompletionTokensDetails.ReasoningTokens, nil
}

// TestEveryCatalogueModelIsBilledAtItsCataloguePrice drives every Anthropic
// chat model of the pinned catalogue through /alpha and every OpenAI one
// through /beta, each streamed and not, with the fake vendor reporting every
// billed dimension, first with a short prompt and then with one above every
// long-context threshold, and compares each ledger entry's cost with the
// catalogue's price of the reported usage, to the nano-USD.
func TestEveryCatalogueModelIsBilledAtItsCataloguePrice(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	alpha := catalogueModels(t, s.Config.Catalogue, "anthropic")
	beta := catalogueModels(t, s.Config.Catalogue, "openai")
	if alpha["claude-opus-4-8"] == nil || beta["gpt-5.4-nano"] == nil || len(alpha) < 10 || len(beta) < 50 {
		t.Fatalf("catalogue has %d anthropic and %d openai chat models", len(alpha), len(beta))
	}
	type job struct {
		route, model string
		entry        map[string]any
		acct         launch.Account
	}
	var jobs []*job
	for route, models := range map[string]map[string]map[string]any{"alpha": alpha, "beta": beta} {
		for name, e := range models {
			jobs = append(jobs, &job{route: route, model: name, entry: e})
		}
	}
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].route+jobs[i].model < jobs[j].route+jobs[j].model })
	for _, j := range jobs {
		j.acct = s.NewAccount(1_000_000, noLimits)
	}

	// Replies of beta's reserve are priced with the uplift of its region.
	var reserveRegion string
	for _, u := range s.Config.Upstreams {
		if u.Name == "beta" {
			reserveRegion = u.Reserve.RegionalProcessing
		}
	}
	if reserveRegion == "" {
		t.Fatal("the shipped beta reserve is not a regional endpoint")
	}
	phases := []struct {
		name         string
		alpha, beta  map[string]any
		betaSearches bool
		betaReserve  bool // beta's primary refuses: the regional reserve serves
	}{
		{"short prompt", map[string]any{"format": config.FormatMessages, "cache_read_tokens": 3000, "cache_write_tokens": 700,
			"cache_write_1h_tokens": 900, "web_search_requests": 2, "service_tier": "priority", "input_tokens": 0},
			map[string]any{"format": config.FormatChatCompletions, "cache_read_tokens": 300, "audio_input_tokens": 50, "audio_output_tokens": 40,
				"reasoning_tokens": 120, "service_tier": "priority", "input_tokens": 0}, false, false},
		{"long prompt", map[string]any{"format": config.FormatMessages, "cache_read_tokens": 20000, "cache_write_tokens": 100,
			"cache_write_1h_tokens": 0, "web_search_requests": 1, "service_tier": "", "input_tokens": 300000},
			map[string]any{"format": config.FormatChatCompletions, "cache_read_tokens": 1000, "audio_input_tokens": 0, "audio_output_tokens": 0,
				"reasoning_tokens": 10, "service_tier": "flex", "input_tokens": 300000}, true, false},
		// Every other tier: ultrafast where listed; a tier a model lacks is
		// priced at its dearest.
		{"ultrafast", map[string]any{"format": config.FormatMessages, "cache_read_tokens": 0, "cache_write_tokens": 0,
			"cache_write_1h_tokens": 0, "web_search_requests": 0, "service_tier": "ultrafast", "input_tokens": 0},
			map[string]any{"format": config.FormatChatCompletions, "cache_read_tokens": 300, "audio_input_tokens": 0, "audio_output_tokens": 0,
				"reasoning_tokens": 0, "service_tier": "ultrafast", "input_tokens": 0}, false, false},
		{"tier not in the catalogue", map[string]any{"format": config.FormatMessages, "service_tier": "batch"},
			map[string]any{"format": config.FormatChatCompletions, "service_tier": "scale", "input_tokens": 300000}, false, false},
		// The regional reserve serves beta, at the default and priority tiers.
		{"regional", map[string]any{"format": config.FormatMessages, "service_tier": "", "input_tokens": 0},
			map[string]any{"format": config.FormatChatCompletions, "service_tier": "", "input_tokens": 0, "cache_read_tokens": 100}, false, true},
		{"regional priority", map[string]any{"format": config.FormatMessages, "service_tier": ""},
			map[string]any{"format": config.FormatChatCompletions, "service_tier": "priority", "input_tokens": 300000}, false, true},
	}
	type want struct {
		u         billed
		reported  string
		reasoning int64
		reserve   bool // the phase expects beta's regional reserve to serve
		body      int64
	}
	wants := map[*job][]want{}
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ph := range phases {
		for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
			f.Control(ph.alpha)
			f.Control(ph.beta)
		}
		if ph.betaReserve {
			s.Primary.Control(map[string]any{"format": config.FormatChatCompletions, "status": 503})
		}
		work := make(chan *job)
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range work {
					for _, streamed := range []bool{false, true} {
						var path string
						var header map[string]string
						var body []byte
						if j.route == "alpha" {
							path, header = alphaPath, messagesHeaders(j.acct.Key)
							body = []byte(fmt.Sprintf(`{"model":%q,"max_tokens":256,"stream":%t,"messages":[{"role":"user","content":"What does it cost?"}]}`, j.model, streamed))
						} else {
							path, header = betaPath, chatCompletionsHeaders(j.acct.Key)
							extra := ""
							if streamed {
								extra += `,"stream_options":{"include_usage":true}`
							}
							if ph.betaSearches {
								extra += `,"web_search_options":{}`
							}
							body = []byte(fmt.Sprintf(`{"model":%q,"max_tokens":256,"stream":%t%s,"messages":[{"role":"user","content":"What does it cost?"}]}`, j.model, streamed, extra))
						}
						code, reply, err := postBody(ctx, s.URL+path, header, body)
						if err != nil || code != 200 {
							t.Errorf("%s %s %s stream=%v: %d %v %s", ph.name, j.route, j.model, streamed, code, err, reply)
							continue
						}
						var u billed
						var reported string
						var reasoning int64
						if j.route == "alpha" {
							u, reported, err = messagesBilled(reply, streamed)
						} else {
							u, reported, reasoning, err = chatCompletionsBilled(reply, streamed, ph.betaSearches)
						}
						if err != nil {
							t.Errorf("%s %s stream=%v: %v", ph.name, j.model, streamed, err)
							continue
						}
						w := want{u, reported, reasoning, ph.betaReserve && j.route == "beta", int64(len(body))}
						mu.Lock()
						wants[j] = append(wants[j], w)
						mu.Unlock()
					}
				}
			}()
		}
		for _, j := range jobs {
			work <- j
		}
		close(work)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}

	// Settlement may finish just after the reply: wait for each account's
	// ledger to hold every request.
	for _, j := range jobs {
		var entries []ledger.Entry
		eventually.That(t, 30*time.Second, j.model+"'s ledger entries", func() (bool, string) {
			var err error
			entries, _, err = s.Store.Ledger(ctx, j.acct.ID, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			return len(entries) >= len(wants[j]), fmt.Sprintf("%d of %d", len(entries), len(wants[j]))
		})
		if len(entries) != len(wants[j]) {
			t.Errorf("%s: %d ledger entries, want %d", j.model, len(entries), len(wants[j]))
			continue
		}
		for i, e := range entries {
			w := wants[j][i]
			if w.reserve && e.Endpoint != "reserve" {
				t.Errorf("%s request %d: served by %q, want the reserve", j.model, i, e.Endpoint)
			}
			u := w.u
			if e.Endpoint == "reserve" && j.route == "beta" {
				u.region = reserveRegion
			}
			// A reply is charged for no more input than the model's context
			// window (or the body, if larger), no more output than max_tokens.
			window := int64(10_000_000) // the gateway's assumption without a max_input_tokens
			if n, err := strconv.ParseInt(fmt.Sprint(j.entry["max_input_tokens"]), 10, 64); err == nil && n > 0 {
				window = n
			}
			window = max(window, w.body)
			capped := capBilled(&u, window, 256)
			if e.Capped != capped {
				t.Errorf("%s request %d: capped %v, want %v", j.model, i, e.Capped, capped)
			}
			cost := expectedNano(t, j.entry, u)
			_, hasUplift := j.entry["regional_processing_uplift_multiplier_"+u.region]
			if hasUplift && u.region != "" && (e.Region != u.region || e.Uplift == 0) || !hasUplift && (e.Region != "" || e.Uplift != 0) {
				t.Errorf("%s request %d: region %q uplift %d; served by %s", j.model, i, e.Region, e.Uplift, e.Endpoint)
			}
			tierListed := u.tier == "" || u.tier == "default" || u.tier == "standard" || slices.Contains(catalogueTiers(j.entry), u.tier)
			if e.TierUnknown == tierListed {
				t.Errorf("%s request %d: tier %q flagged unknown %v", j.model, i, u.tier, e.TierUnknown)
			}
			if e.Cost != cost || e.Estimated || string(e.Requested) != j.model || string(e.Reported) != w.reported || e.Usage.Reasoning != w.reasoning {
				t.Errorf("%s request %d: cost %d estimated %v requested %q reported %q reasoning %d; want cost %d, requested %q, reported %q, reasoning %d (entry %+v)",
					j.model, i, e.Cost, e.Estimated, e.Requested, e.Reported, e.Usage.Reasoning, cost, j.model, w.reported, w.reasoning, e.Settlement)
			}
		}
	}
	t.Logf("%d models (%d anthropic, %d openai), %d requests, each billed at the catalogue price", len(jobs), len(alpha), len(beta), 2*len(phases)*len(jobs))
}

// The Claude Code CLI's default request: claude-opus-4-8 with max_tokens
// 64000 and a long prompt with tools. The catalogue's maximum output, not an
// older model's, decides; a name that merely starts with a listed one is
// unknown on both routes.
func TestLongOutputRequestAndNoPrefixMatching(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(1000, noLimits)
	prompt := strings.Repeat("Read the repository and explain it. ", 60<<10/36)
	tools := `[{"name":"read_file","description":"Read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}]`
	for _, streamed := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":"claude-opus-4-8","max_tokens":64000,"stream":%t,"tools":%s,"messages":[{"role":"user","content":%q}]}`, streamed, tools, prompt)
		if len(body) < 60<<10 {
			t.Fatalf("prompt of %d bytes", len(body))
		}
		resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), []byte(body))
		if resp.StatusCode != 200 {
			t.Fatalf("stream=%v: %d %s", streamed, resp.StatusCode, b)
		}
	}
	// Above the catalogue's maximum output (128000 for claude-opus-4-8).
	resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), []byte(`{"model":"claude-opus-4-8","max_tokens":128001,"messages":[{"role":"user","content":"Hi"}]}`))
	if resp.StatusCode != 400 || !strings.Contains(string(b), "128000") {
		t.Errorf("max_tokens above the maximum: %d %s", resp.StatusCode, b)
	}
	for _, c := range []struct{ path, model string }{
		{alphaPath, "claude-opus-4-8-turbo"},
		{alphaPath, "claude-opus-4"},
		{alphaPath, "claude-opus-4-8-20261399"}, // not a date
		{betaPath, "gpt-5.4-nano-custom"},
		{betaPath, "gpt-5.4-pro"}, // a responses-only model: not a chat model
		{betaPath, "o3x"},
	} {
		header := messagesHeaders(acct.Key)
		if c.path == betaPath {
			header = chatCompletionsHeaders(acct.Key)
		}
		body := fmt.Sprintf(`{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`, c.model)
		resp, b := s.Do("POST", c.path, header, []byte(body))
		if resp.StatusCode != 400 || !strings.Contains(string(b), `\"`+c.model+`\"`) && !strings.Contains(string(b), c.model) {
			t.Errorf("%s %s: %d %s; want 400 naming the model", c.path, c.model, resp.StatusCode, b)
		}
		var e struct {
			Type  string
			Error struct{ Type, Code string }
		}
		json.Unmarshal(b, &e)
		if c.path == alphaPath && (e.Type != "error" || e.Error.Type != "invalid_request_error") {
			t.Errorf("%s: not the messages error format: %s", c.model, b)
		}
		if c.path == betaPath && e.Error.Type != "invalid_request_error" {
			t.Errorf("%s: not the chat completions error format: %s", c.model, b)
		}
	}
	// A dated snapshot of a listed name is that model, counted under it.
	resp, b = s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), []byte(`{"model":"gpt-5.4-nano-2099-01-31","max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`))
	if resp.StatusCode != 200 {
		t.Fatalf("dated snapshot: %d %s", resp.StatusCode, b)
	}
	rep, err := s.Store.Usage(context.Background(), acct.ID, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	var models []string
	for _, m := range rep.ByModel {
		models = append(models, string(m.Model))
	}
	if strings.Join(models, ",") != "claude-opus-4-8,gpt-5.4-nano" {
		t.Errorf("by_model rows %v", models)
	}
}
