package main

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The vendors' usage reports, computed from what the fake really served:
// Anthropic's Usage and Cost Admin API (GET
// /v1/organizations/usage_report/messages) on the messages listener,
// OpenAI's organization Usage API (GET /v1/organization/usage/completions)
// on the chat completions one. Each /v1/messages and /v1/chat/completions
// reply the fake generates is billed in full when it is planned, as a
// vendor bills a generation whose client left; so are the token-priced
// images (gpt-image-*) and transcriptions (gpt-4o-transcribe), which the
// completions report counts (images.go, transcriptions.go). The reports want the admin key (-messages-admin-key,
// -chat-completions-admin-key), never an API key.

// The report paths.
const (
	messagesUsagePath = "/v1/organizations/usage_report/messages"
	chatUsagePath     = "/v1/organization/usage/completions"
)

// VendorKeyID is the vendor's id of an API key in the reports: "key_" and
// the key's label.
func VendorKeyID(secret string) string { return "key_" + KeyLabel(secret) }

// billed is the usage of one reply, by kind, as the reports count it.
type billed struct {
	Input        int64 `json:"input_tokens"` // uncached
	CacheRead    int64 `json:"cache_read_tokens"`
	CacheWrite5m int64 `json:"cache_write_tokens"`
	CacheWrite1h int64 `json:"cache_write_1h_tokens"`
	Output       int64 `json:"output_tokens"` // reasoning included
	AudioInput   int64 `json:"audio_input_tokens"`
	AudioOutput  int64 `json:"audio_output_tokens"`
	ImageInput   int64 `json:"image_input_tokens"`
	ImageOutput  int64 `json:"image_output_tokens"`
	WebSearches  int64 `json:"web_search_requests"`
	// AudioSeconds and Images are what the transcriptions and images
	// reports count (adminreports.go).
	AudioSeconds int64 `json:"audio_seconds"`
	Images       int64 `json:"images"`
}

func (b *billed) add(o billed) {
	b.Input += o.Input
	b.CacheRead += o.CacheRead
	b.CacheWrite5m += o.CacheWrite5m
	b.CacheWrite1h += o.CacheWrite1h
	b.Output += o.Output
	b.AudioInput += o.AudioInput
	b.AudioOutput += o.AudioOutput
	b.ImageInput += o.ImageInput
	b.ImageOutput += o.ImageOutput
	b.WebSearches += o.WebSearches
	b.AudioSeconds += o.AudioSeconds
	b.Images += o.Images
}

// billed is what the vendor bills for rp.
func (rp *reply) billed() billed {
	return billed{
		Input: int64(rp.inputTokens), CacheRead: int64(rp.cacheRead),
		CacheWrite5m: int64(rp.cacheWrite), CacheWrite1h: int64(rp.cacheWrite1h),
		Output:     int64(rp.outputTokens + rp.reasoningTokens),
		AudioInput: int64(rp.audioIn), AudioOutput: int64(rp.audioOut),
		WebSearches: int64(rp.webSearches),
	}
}

// usageEntry is the usage of one request (or one control-added lot).
type usageEntry struct {
	at       time.Time
	keyID    string
	model    string
	tokens   billed
	requests int64
	cost     int64 // nano-USD, at the price when billed (admincosts.go)
}

// usageLog is one wire format's billed usage. It is kept whole (not a
// ring like the records): a report must add up to everything served. So it
// grows with every request, and its entries hold no pointers, for the
// garbage collector never to scan them: a log of a few hundred thousand
// entries with strings and times in them made each collection's mark take
// 25–80 ms on two busy cores, and replies wait for it.
type usageLog struct {
	mu      sync.Mutex
	entries []loggedUsage
	names   []string          // the keys and models of entries, by index
	index   map[string]uint32 // each name's index in names
	prices  map[string]billed // by model, nano-USD per million of each kind
}

// loggedUsage is a usageEntry as the log keeps it (entryLocked reads it).
type loggedUsage struct {
	at           int64  // Unix nanoseconds
	keyID, model uint32 // indexes into usageLog.names
	tokens       billed
	requests     int64
	cost         int64
}

func (l *usageLog) add(e usageEntry) {
	l.mu.Lock()
	l.entries = append(l.entries, loggedUsage{
		at: e.at.UnixNano(), keyID: l.nameLocked(e.keyID), model: l.nameLocked(e.model),
		tokens: e.tokens, requests: e.requests, cost: l.costLocked(e),
	})
	l.mu.Unlock()
}

// nameLocked is s's index in l.names, added when new; l.mu is held.
func (l *usageLog) nameLocked(s string) uint32 {
	i, ok := l.index[s]
	if !ok {
		if l.index == nil {
			l.index = map[string]uint32{}
		}
		i = uint32(len(l.names))
		l.names = append(l.names, s)
		l.index[s] = i
	}
	return i
}

// entryLocked is the log's entry i; l.mu is held.
func (l *usageLog) entryLocked(i int) usageEntry {
	e := &l.entries[i]
	return usageEntry{
		at: time.Unix(0, e.at), keyID: l.names[e.keyID], model: l.names[e.model],
		tokens: e.tokens, requests: e.requests, cost: e.cost,
	}
}

func (l *usageLog) reset() {
	l.mu.Lock()
	l.entries, l.names, l.index, l.prices = nil, nil, nil, nil
	l.mu.Unlock()
}

// group is one result of a bucket: the usage of one key and model (either
// "" when the report is not grouped by it).
type group struct{ keyID, model string }

// report sums the usage in [start, end) into buckets of width, by the
// groups asked for.
func (l *usageLog) report(start, end time.Time, width time.Duration, byKey, byModel bool) (starts []time.Time, buckets []map[group]*usageEntry) {
	for t := start; t.Before(end); t = t.Add(width) {
		starts = append(starts, t)
		buckets = append(buckets, map[group]*usageEntry{})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.entries {
		e := l.entryLocked(i)
		if e.at.Before(start) || !e.at.Before(end) {
			continue
		}
		i := int(e.at.Sub(start) / width)
		var g group
		if byKey {
			g.keyID = e.keyID
		}
		if byModel {
			g.model = e.model
		}
		sum := buckets[i][g]
		if sum == nil {
			sum = &usageEntry{keyID: g.keyID, model: g.model}
			buckets[i][g] = sum
		}
		sum.tokens.add(e.tokens)
		sum.requests += e.requests
	}
	return starts, buckets
}

// sortedGroups returns a bucket's results in a stable order.
func sortedGroups(b map[group]*usageEntry) []*usageEntry {
	out := make([]*usageEntry, 0, len(b))
	for _, e := range b {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *usageEntry) int {
		return strings.Compare(a.keyID+"\x00"+a.model, b.keyID+"\x00"+b.model)
	})
	return out
}

// bill records a generation of model for the request's key.
func (l *usageLog) bill(r *http.Request, model string, b billed) {
	l.add(usageEntry{at: time.Now(), keyID: VendorKeyID(requestKey(r)), model: model, tokens: b, requests: 1})
}

// widths are the bucket widths both reports take, with their default and
// maximum numbers of buckets per page (as documented by both vendors).
var widths = map[string]struct {
	d          time.Duration
	def, limit int
}{
	"1m": {time.Minute, 60, 1440},
	"1h": {time.Hour, 24, 168},
	"1d": {24 * time.Hour, 7, 31},
}

// reportQuery is a usage report request, either vendor's.
type reportQuery struct {
	start, end     time.Time
	width          time.Duration
	limit          int
	byKey, byModel bool
}

// parseReportQuery reads the parameters common to both reports; start and
// end are already read, in the vendor's own formats. The page token is the
// start of the page's first bucket.
func parseReportQuery(q map[string][]string, start, end time.Time, groupParam string) (reportQuery, string) {
	w := first(q["bucket_width"], "1d")
	wd, ok := widths[w]
	if !ok {
		return reportQuery{}, "bucket_width must be one of 1m, 1h, 1d"
	}
	rq := reportQuery{width: wd.d, limit: wd.def}
	if v := first(q["limit"], ""); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > wd.limit {
			return reportQuery{}, "limit must be 1 to " + strconv.Itoa(wd.limit) + " for bucket_width " + w
		}
		rq.limit = n
	}
	for _, g := range q[groupParam] {
		for _, f := range strings.Split(g, ",") {
			switch f {
			case "api_key_id":
				rq.byKey = true
			case "model":
				rq.byModel = true
			case "":
			default:
				// The fake serves no workspaces, projects or tiers apart:
				// grouping by them is one group.
			}
		}
	}
	rq.start = start.UTC().Truncate(wd.d)
	if p := first(q["page"], ""); p != "" {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(p, "page_"))
		t, terr := time.Parse(time.RFC3339, string(b))
		if err != nil || terr != nil {
			return reportQuery{}, "page is not a page token of this report"
		}
		rq.start = t
	}
	if end.IsZero() {
		end = time.Now()
	}
	rq.end = end.UTC()
	return rq, ""
}

// page returns the page's bucket range and the next page's token ("" at the
// end).
func (rq *reportQuery) page() (end time.Time, next string) {
	end = rq.start.Add(time.Duration(rq.limit) * rq.width)
	if !end.Before(rq.end) {
		// The last bucket may end after the range: the range's end lies in it.
		n := (rq.end.Sub(rq.start) + rq.width - 1) / rq.width
		return rq.start.Add(n * rq.width), ""
	}
	return end, "page_" + base64.RawURLEncoding.EncodeToString([]byte(end.Format(time.RFC3339)))
}

func first(v []string, def string) string {
	if len(v) == 0 {
		return def
	}
	return v[0]
}

// adminKeyOK reports whether r carries the admin key of the format: the
// reports refuse API keys, and every request when no admin key is set.
func adminKeyOK(admin, got string) bool { return admin != "" && got == admin }

// messagesUsageReport serves Anthropic's Messages usage report.
func (s *site) messagesUsageReport(w http.ResponseWriter, r *http.Request) {
	start, end, ok := s.anthropicWindow(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	rq, msg := parseReportQuery(q, start, end, "group_by[]")
	if msg != "" {
		s.api.writeError(w, r, http.StatusBadRequest, msg)
		return
	}
	pageEnd, next := rq.page()
	starts, buckets := s.usage.report(rq.start, pageEnd, rq.width, rq.byKey, rq.byModel)
	type result struct {
		Uncached      int64 `json:"uncached_input_tokens"`
		CacheCreation struct {
			Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
			Ephemeral5m int64 `json:"ephemeral_5m_input_tokens"`
		} `json:"cache_creation"`
		CacheRead     int64 `json:"cache_read_input_tokens"`
		Output        int64 `json:"output_tokens"`
		ServerToolUse struct {
			WebSearchRequests int64 `json:"web_search_requests"`
		} `json:"server_tool_use"`
		APIKeyID      *string `json:"api_key_id"`
		WorkspaceID   *string `json:"workspace_id"`
		Model         *string `json:"model"`
		ServiceTier   *string `json:"service_tier"`
		ContextWindow *string `json:"context_window"`
	}
	writeAnthropicPage(w, starts, rq.width, next, func(i int, out []result) []result {
		for _, e := range sortedGroups(buckets[i]) {
			var res result
			res.Uncached, res.CacheRead, res.Output = e.tokens.Input, e.tokens.CacheRead, e.tokens.Output
			res.CacheCreation.Ephemeral5m, res.CacheCreation.Ephemeral1h = e.tokens.CacheWrite5m, e.tokens.CacheWrite1h
			res.ServerToolUse.WebSearchRequests = e.tokens.WebSearches
			res.APIKeyID, res.Model = orNull(rq.byKey, e.keyID), orNull(rq.byModel, e.model)
			out = append(out, res)
		}
		return out
	})
}

// chatUsageReport serves OpenAI's completions usage report.
func (s *site) chatUsageReport(w http.ResponseWriter, r *http.Request) {
	start, end, ok := s.openAIWindow(w, r, "usage")
	if !ok {
		return
	}
	q := r.URL.Query()
	groupParam := "group_by"
	if len(q["group_by[]"]) > 0 {
		groupParam = "group_by[]"
	}
	rq, msg := parseReportQuery(q, start, end, groupParam)
	if msg != "" {
		s.api.writeError(w, r, http.StatusBadRequest, msg)
		return
	}
	pageEnd, next := rq.page()
	starts, buckets := s.usage.report(rq.start, pageEnd, rq.width, rq.byKey, rq.byModel)
	type result struct {
		Object            string  `json:"object"`
		InputTokens       int64   `json:"input_tokens"`
		OutputTokens      int64   `json:"output_tokens"`
		InputCachedTokens int64   `json:"input_cached_tokens"`
		InputAudioTokens  int64   `json:"input_audio_tokens"`
		OutputAudioTokens int64   `json:"output_audio_tokens"`
		InputImageTokens  int64   `json:"input_image_tokens"`
		OutputImageTokens int64   `json:"output_image_tokens"`
		NumModelRequests  int64   `json:"num_model_requests"`
		ProjectID         *string `json:"project_id"`
		UserID            *string `json:"user_id"`
		APIKeyID          *string `json:"api_key_id"`
		Model             *string `json:"model"`
		Batch             *bool   `json:"batch"`
	}
	writeOpenAIPage(w, starts, rq.width, next, func(i int, out []result) []result {
		for _, e := range sortedGroups(buckets[i]) {
			out = append(out, result{
				Object: "organization.usage.completions.result",
				// Text input, the cached part included; audio and image
				// tokens apart.
				InputTokens: e.tokens.Input + e.tokens.CacheRead, InputCachedTokens: e.tokens.CacheRead,
				OutputTokens: e.tokens.Output, InputAudioTokens: e.tokens.AudioInput, OutputAudioTokens: e.tokens.AudioOutput,
				InputImageTokens: e.tokens.ImageInput, OutputImageTokens: e.tokens.ImageOutput,
				NumModelRequests: e.requests,
				APIKeyID:         orNull(rq.byKey, e.keyID), Model: orNull(rq.byModel, e.model),
			})
		}
		return out
	})
}

// openAIPage is a page of an OpenAI admin report: buckets with Unix-second
// bounds, each with its results R.
type openAIPage[R any] struct {
	Object   string            `json:"object"`
	Data     []openAIBucket[R] `json:"data"`
	HasMore  bool              `json:"has_more"`
	NextPage *string           `json:"next_page"`
}

type openAIBucket[R any] struct {
	Object    string `json:"object"`
	StartTime int64  `json:"start_time"`
	EndTime   int64  `json:"end_time"`
	Results   []R    `json:"results"`
}

// anthropicPage is a page of an Anthropic admin report: buckets with RFC
// 3339 bounds, each with its results R.
type anthropicPage[R any] struct {
	Data     []anthropicBucket[R] `json:"data"`
	HasMore  bool                 `json:"has_more"`
	NextPage *string              `json:"next_page"`
}

type anthropicBucket[R any] struct {
	StartingAt string `json:"starting_at"`
	EndingAt   string `json:"ending_at"`
	Results    []R    `json:"results"`
}

// writeOpenAIPage writes the page of the buckets of width at starts, the
// i-th's results appended to out by results, and the next page's token
// next ("" on the last page).
func writeOpenAIPage[R any](w http.ResponseWriter, starts []time.Time, width time.Duration, next string, results func(i int, out []R) []R) {
	p := openAIPage[R]{Object: "page", Data: make([]openAIBucket[R], 0, len(starts)), HasMore: next != "", NextPage: orNull(next != "", next)}
	for i, st := range starts {
		p.Data = append(p.Data, openAIBucket[R]{Object: "bucket", StartTime: st.Unix(), EndTime: st.Add(width).Unix(), Results: results(i, []R{})})
	}
	writeJSON(w, http.StatusOK, &p)
}

// writeAnthropicPage is writeOpenAIPage in Anthropic's shape.
func writeAnthropicPage[R any](w http.ResponseWriter, starts []time.Time, width time.Duration, next string, results func(i int, out []R) []R) {
	p := anthropicPage[R]{Data: make([]anthropicBucket[R], 0, len(starts)), HasMore: next != "", NextPage: orNull(next != "", next)}
	for i, st := range starts {
		p.Data = append(p.Data, anthropicBucket[R]{StartingAt: st.Format(time.RFC3339), EndingAt: st.Add(width).Format(time.RFC3339), Results: results(i, []R{})})
	}
	writeJSON(w, http.StatusOK, &p)
}

func orNull(grouped bool, v string) *string {
	if !grouped {
		return nil
	}
	return &v
}

// usageControl is the body of POST /usage: usage billed to one key that
// the gateway never sent (someone using the key directly).
type usageControl struct {
	Format string `json:"format"` // "messages" or "chat_completions"
	Key    string `json:"key"`    // the key's label (KeyLabel)
	Model  string `json:"model"`
	// At is when the usage was served (RFC 3339); empty: now.
	At string `json:"at"`
	billed
}

func (h *controlHandler) postUsage(w http.ResponseWriter, r *http.Request) {
	var c usageControl
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	err := dec.Decode(&c)
	l := h.fake.usageLogOf(c.Format)
	at := time.Now()
	if err == nil && c.At != "" {
		at, err = time.Parse(time.RFC3339, c.At)
	}
	if err != nil || l == nil || c.Key == "" || c.Model == "" || c.negative() {
		writeControlJSON(w, http.StatusBadRequest, map[string]string{"error": `want {"format": "messages"|"chat_completions", "key": LABEL, "model": ID, "input_tokens": N, "output_tokens": N, ..., "at": RFC3339 (optional)}, no count negative`})
		return
	}
	l.add(usageEntry{at: at, keyID: "key_" + c.Key, model: c.Model, tokens: c.billed, requests: 1})
	h.fake.log.Info("usage added outside the gateway", "format", c.Format, "key", c.Key, "model", c.Model)
	writeControlJSON(w, http.StatusOK, map[string]string{"vendor_key_id": "key_" + c.Key})
}

func (b billed) negative() bool {
	return min(b.Input, b.CacheRead, b.CacheWrite5m, b.CacheWrite1h, b.Output, b.AudioInput, b.AudioOutput, b.ImageInput, b.ImageOutput, b.WebSearches, b.AudioSeconds, b.Images) < 0
}

// openAIWindow checks an OpenAI admin report's key and reads its
// start_time and end_time (Unix seconds; none: open-ended), answering the
// error itself when either is wrong.
func (s *site) openAIWindow(w http.ResponseWriter, r *http.Request, api string) (start, end time.Time, ok bool) {
	a := r.Header.Get("Authorization")
	if !strings.HasPrefix(a, "Bearer ") || !adminKeyOK(s.fake.cfg.chatCompletionsAdminKey, a[len("Bearer "):]) {
		s.api.writeError(w, r, http.StatusUnauthorized, "The "+api+" API needs an admin key.")
		return start, end, false
	}
	q := r.URL.Query()
	secs, err := strconv.ParseInt(q.Get("start_time"), 10, 64)
	if err != nil {
		s.api.writeError(w, r, http.StatusBadRequest, "start_time: Unix seconds are required.")
		return start, end, false
	}
	if v := q.Get("end_time"); v != "" {
		e, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.api.writeError(w, r, http.StatusBadRequest, "end_time: not Unix seconds.")
			return start, end, false
		}
		end = time.Unix(e, 0)
	}
	return time.Unix(secs, 0), end, true
}

// anthropicWindow checks an Anthropic admin report's key and reads its
// starting_at and ending_at (RFC 3339; no ending_at: open-ended),
// answering the error itself when either is wrong.
func (s *site) anthropicWindow(w http.ResponseWriter, r *http.Request) (start, end time.Time, ok bool) {
	if !adminKeyOK(s.fake.cfg.messagesAdminKey, r.Header.Get("X-Api-Key")) {
		s.api.writeError(w, r, http.StatusUnauthorized, "Admin API requests need an admin key (sk-ant-admin...).")
		return start, end, false
	}
	q := r.URL.Query()
	start, err := time.Parse(time.RFC3339, q.Get("starting_at"))
	if err != nil {
		s.api.writeError(w, r, http.StatusBadRequest, "starting_at: an RFC 3339 timestamp is required.")
		return start, end, false
	}
	if v := q.Get("ending_at"); v != "" {
		if end, err = time.Parse(time.RFC3339, v); err != nil {
			s.api.writeError(w, r, http.StatusBadRequest, "ending_at: not an RFC 3339 timestamp.")
			return start, end, false
		}
	}
	return start, end, true
}
