package main

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"time"
)

// The vendors' cost reports, from the usage the fake billed, each entry
// priced when billed at the prices a test set (POST /prices), in whole
// nano-USD rounded up, as the gateway's ledger prices a reply: Anthropic's
// GET /v1/organizations/cost_report (amounts in cents, decimal strings),
// OpenAI's GET /v1/organization/costs (amounts in USD). Both bucket by day
// only. A model without a price costs nothing.

const (
	messagesCostPath = "/v1/organizations/cost_report"
	chatCostPath     = "/v1/organization/costs"
)

// costLocked prices e at the model's current price; l.mu is held.
func (l *usageLog) costLocked(e usageEntry) int64 {
	p, ok := l.prices[e.model]
	if !ok {
		return 0
	}
	sum := new(big.Int)
	for _, qr := range [][2]int64{
		{e.tokens.Input, p.Input}, {e.tokens.CacheRead, p.CacheRead}, {e.tokens.CacheWrite5m, p.CacheWrite5m},
		{e.tokens.CacheWrite1h, p.CacheWrite1h}, {e.tokens.Output, p.Output}, {e.tokens.AudioInput, p.AudioInput},
		{e.tokens.AudioOutput, p.AudioOutput}, {e.tokens.ImageInput, p.ImageInput},
		{e.tokens.ImageOutput, p.ImageOutput}, {e.tokens.WebSearches, p.WebSearches},
		{e.tokens.AudioSeconds, p.AudioSeconds}, {e.tokens.Images, p.Images},
	} {
		sum.Add(sum, new(big.Int).Mul(big.NewInt(qr[0]), big.NewInt(qr[1])))
	}
	// Round up to a whole nano-USD.
	sum.Add(sum, big.NewInt(999_999))
	return sum.Div(sum, big.NewInt(1_000_000)).Int64()
}

func (l *usageLog) setPrice(model string, p billed) {
	l.mu.Lock()
	if l.prices == nil {
		l.prices = map[string]billed{}
	}
	l.prices[model] = p
	l.mu.Unlock()
}

// costs sums the cost billed in [start, end) into buckets of width.
func (l *usageLog) costs(start, end time.Time, width time.Duration) (starts []time.Time, sums []int64) {
	for t := start; t.Before(end); t = t.Add(width) {
		starts = append(starts, t)
		sums = append(sums, 0)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.entries {
		if e := l.entryLocked(i); !e.at.Before(start) && e.at.Before(end) {
			sums[int(e.at.Sub(start)/width)] += e.cost
		}
	}
	return starts, sums
}

// costQuery reads a cost report's query: bucket_width 1d only, limit 1 to
// maxLimit (default 7).
func costQuery(q map[string][]string, start, end time.Time, maxLimit int) (reportQuery, string) {
	if w := first(q["bucket_width"], "1d"); w != "1d" {
		return reportQuery{}, "bucket_width must be 1d"
	}
	limit := 7
	if v := first(q["limit"], ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return reportQuery{}, "limit must be 1 to " + strconv.Itoa(maxLimit)
		}
		limit = n
	}
	rest := map[string][]string{"page": q["page"]}
	rq, msg := parseReportQuery(rest, start, end, "")
	rq.limit = limit
	return rq, msg
}

// messagesCostReport serves Anthropic's cost report.
func (s *site) messagesCostReport(w http.ResponseWriter, r *http.Request) {
	start, end, ok := s.anthropicWindow(w, r)
	if !ok {
		return
	}
	rq, msg := costQuery(r.URL.Query(), start, end, 31)
	if msg != "" {
		s.api.writeError(w, r, http.StatusBadRequest, msg)
		return
	}
	pageEnd, next := rq.page()
	starts, sums := s.usage.costs(rq.start, pageEnd, rq.width)
	type result struct {
		Currency    string  `json:"currency"`
		Amount      string  `json:"amount"` // cents
		WorkspaceID *string `json:"workspace_id"`
		Description *string `json:"description"`
	}
	writeAnthropicPage(w, starts, rq.width, next, func(i int, out []result) []result {
		if sums[i] != 0 {
			out = append(out, result{Currency: "USD", Amount: decimal(sums[i], 7)})
		}
		return out
	})
}

// chatCostReport serves OpenAI's Costs API.
func (s *site) chatCostReport(w http.ResponseWriter, r *http.Request) {
	start, end, ok := s.openAIWindow(w, r, "costs")
	if !ok {
		return
	}
	q := r.URL.Query()
	rq, msg := costQuery(q, start, end, 180)
	if msg != "" {
		s.api.writeError(w, r, http.StatusBadRequest, msg)
		return
	}
	pageEnd, next := rq.page()
	// The bill covers every report of the organization.
	f := s.fake
	starts, sums := s.usage.costs(rq.start, pageEnd, rq.width)
	for _, l := range []*usageLog{&f.embeddingsUsage, &f.transcriptionsUsage, &f.imagesUsage} {
		_, more := l.costs(rq.start, pageEnd, rq.width)
		for i := range sums {
			sums[i] += more[i]
		}
	}
	type amount struct {
		Value    json.Number `json:"value"`
		Currency string      `json:"currency"`
	}
	type result struct {
		Object    string  `json:"object"`
		Amount    amount  `json:"amount"`
		LineItem  *string `json:"line_item"`
		ProjectID *string `json:"project_id"`
	}
	writeOpenAIPage(w, starts, rq.width, next, func(i int, out []result) []result {
		if sums[i] != 0 {
			out = append(out, result{Object: "organization.costs.result", Amount: amount{json.Number(decimal(sums[i], 9)), "usd"}})
		}
		return out
	})
}

// decimal writes n × 10^-places exactly (n ≥ 0).
func decimal(n int64, places int) string {
	s := fmt.Sprintf("%0*d", places+1, n)
	return s[:len(s)-places] + "." + s[len(s)-places:]
}

// priceControl is the body of POST /prices: the price the fake bills a
// model at from now on, per million of each kind, in nano-USD (the names of
// POST /usage).
type priceControl struct {
	Format string `json:"format"`
	Model  string `json:"model"`
	billed
}

func (h *controlHandler) postPrices(w http.ResponseWriter, r *http.Request) {
	var c priceControl
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	l := h.fake.usageLogOf(c.Format)
	if err != nil || l == nil || c.Model == "" || c.negative() {
		writeControlJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"format": "messages"|"chat_completions"|"embeddings"|"audio_transcriptions"|"images", "model": ID, "input_tokens": NANO_USD_PER_MILLION, ...}, no price negative`})
		return
	}
	l.setPrice(c.Model, c.billed)
	writeControlJSON(w, http.StatusOK, map[string]string{"model": c.Model})
}

// billedEntry is one entry of GET /usage: what the fake billed.
type billedEntry struct {
	At      time.Time `json:"at"`
	KeyID   string    `json:"vendor_key_id"`
	Model   string    `json:"model"`
	Tokens  billed    `json:"tokens"`
	NanoUSD int64     `json:"cost_nano_usd"`
}

// getUsage serves GET /usage?format=F: every entry billed, as a test
// computes the reports' expected differences from.
func (h *controlHandler) getUsage(w http.ResponseWriter, r *http.Request) {
	l := h.fake.usageLogOf(r.URL.Query().Get("format"))
	if l == nil {
		writeControlJSON(w, http.StatusBadRequest, map[string]string{"error": "format must be messages or chat_completions"})
		return
	}
	l.mu.Lock()
	out := make([]billedEntry, 0, len(l.entries))
	for i := range l.entries {
		e := l.entryLocked(i)
		out = append(out, billedEntry{At: e.at, KeyID: e.keyID, Model: e.model, Tokens: e.tokens, NanoUSD: e.cost})
	}
	l.mu.Unlock()
	writeControlJSON(w, http.StatusOK, out)
}

func (f *fake) usageLogOf(format string) *usageLog {
	switch format {
	case "messages":
		return &f.messagesUsage
	case "chat_completions":
		return &f.chatCompletionsUsage
	case "embeddings":
		return &f.embeddingsUsage
	case "audio_transcriptions":
		return &f.transcriptionsUsage
	case "images":
		return &f.imagesUsage
	}
	return nil
}
