package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// defaultReplyWords is the reply length when the reply_words control is 0.
const defaultReplyWords = 12

// Controls steer how one wire format of the fake answers. The zero value is
// the default behaviour: immediate, successful, 12-word text replies.
type Controls struct {
	// Status, when not 0, is answered (with a vendor-format error body)
	// instead of a reply.
	Status int `json:"status"`
	// StatusCount is how many more API requests get Status; 0 means every
	// request until Status is changed. When it counts down to 0 Status is
	// cleared.
	StatusCount int `json:"status_count"`
	// ProbesPass keeps Status off the probes: a vendor whose model list
	// still answers while its model requests fail.
	ProbesPass bool `json:"probes_pass"`
	// LatencyMS delays the response headers of every request, probes too.
	LatencyMS int `json:"latency_ms"`
	// EventDelayMS pauses between SSE events.
	EventDelayMS int `json:"event_delay_ms"`
	// FirstEventDelayMS pauses between a stream's response headers and its
	// first event: a vendor slow to its first token.
	FirstEventDelayMS int `json:"first_event_delay_ms"`
	// ToolCall makes requests that offer tools get a call of the first tool.
	ToolCall bool `json:"tool_call"`
	// CacheReadTokens and CacheWriteTokens are reported as prompt cache
	// usage.
	CacheReadTokens  int `json:"cache_read_tokens"`
	CacheWriteTokens int `json:"cache_write_tokens"`
	// CacheWrite1hTokens are reported as 1-hour cache writes (messages), beside
	// CacheWriteTokens, the 5-minute ones.
	CacheWrite1hTokens int `json:"cache_write_1h_tokens"`
	// InputTokens, when not 0, is reported as the uncached input instead of
	// the fake's count of the body: a prompt above a long-context threshold
	// without sending one.
	InputTokens int `json:"input_tokens"`
	// OutputTokens, when not 0, is reported as the output instead of the
	// reply's words: a vendor claiming more than it sent.
	OutputTokens int `json:"output_tokens"`
	// ServiceTier is reported as the tier that served the reply; empty
	// reports the default ("standard" for messages, "default" for chat completions).
	ServiceTier string `json:"service_tier"`
	// AudioInputTokens and AudioOutputTokens are reported as audio (chat completions),
	// inside prompt_tokens and completion_tokens.
	AudioInputTokens  int `json:"audio_input_tokens"`
	AudioOutputTokens int `json:"audio_output_tokens"`
	// WebSearchRequests are reported as server-side web searches (messages).
	WebSearchRequests int `json:"web_search_requests"`
	// FileSearchCalls, CodeInterpreterCalls and ImageGenerationCalls are
	// output items of those built-in tools in responses replies; the code
	// interpreter calls run in CodeInterpreterContainers containers (at
	// least one when there are calls), as sessions are billed.
	FileSearchCalls           int `json:"file_search_calls"`
	CodeInterpreterCalls      int `json:"code_interpreter_calls"`
	CodeInterpreterContainers int `json:"code_interpreter_containers"`
	ImageGenerationCalls      int `json:"image_generation_calls"`
	// ReplyWords is the length of text replies; 0 means defaultReplyWords.
	ReplyWords int `json:"reply_words"`
	// AbortAfterEvents, when not 0, resets the connection after that many
	// SSE events.
	AbortAfterEvents int `json:"abort_after_events"`
	// AbortAtStart resets the connection before the first event: after the
	// response headers of a stream, before any byte of other replies.
	AbortAtStart bool `json:"abort_at_start"`
	// NoWebSocket makes the Responses API's WebSocket upgrade (GET
	// /v1/responses) unknown, as at a vendor that speaks HTTP only: 404.
	NoWebSocket bool `json:"no_websocket"`
	// ToolPromptTokens is added to the input tokens of requests that offer
	// tools, as vendors add a tool-use system prompt.
	ToolPromptTokens int `json:"tool_prompt_tokens"`
	// RetryAfter is sent as the retry-after header of forced 429, 503 and
	// 529 answers when not empty.
	RetryAfter string `json:"retry_after"`
	// Hang makes every request, probes too, be read and then never answered:
	// a vendor that accepts and hangs. Hung requests never generate a reply;
	// when hang is turned off their connections are dropped.
	Hang bool `json:"hang"`
	// ReasoningTokens makes chat completions a reasoning model: each reply reports that
	// many reasoning tokens, which its text does not show, in
	// completion_tokens and completion_tokens_details.reasoning_tokens.
	ReasoningTokens int `json:"reasoning_tokens"`
	// FailResponse makes the chat completions API's responses end "failed", their input billed.
	FailResponse bool `json:"fail_response"`
	// BackgroundPolls is how many retrievals see a background response in
	// progress before it completes; 0 means 1.
	BackgroundPolls int `json:"background_polls"`
	// PromptCache keeps a prompt cache per key: a request whose
	// conversation (system prompt and first message) the same key sent
	// before reports promptCacheTokens cache reads, else as many cache
	// writes; GET /keys counts them per key.
	PromptCache bool `json:"prompt_cache"`
	// Refuse answers this status (429, 401 or 403) as a vendor refuses
	// one request for what it asks, not for its key: the key's rate-limit
	// headers show room, the body blames the request. Meant per request
	// (x-fake-controls).
	Refuse int `json:"refuse"`
	// KeyRPS limits each key to that many requests per second (a fixed
	// one-second window): every reply carries the vendor's remaining
	// requests header, and a request over the limit gets 429 with it at 0
	// and retry-after 1.
	KeyRPS int `json:"key_rps"`
}

// promptCacheTokens is the cached prefix the prompt_cache control reports.
const promptCacheTokens = 1000

// replyWords returns the effective reply length.
func (c *Controls) replyWords() int {
	if c.ReplyWords <= 0 {
		return defaultReplyWords
	}
	return c.ReplyWords
}

// controlUpdate is the body of POST /control. Pointer fields tell an absent
// field (left unchanged) from a zero one.
type controlUpdate struct {
	Format           string  `json:"format"`
	Status           *int    `json:"status"`
	StatusCount      *int    `json:"status_count"`
	ProbesPass       *bool   `json:"probes_pass"`
	LatencyMS        *int    `json:"latency_ms"`
	EventDelayMS     *int    `json:"event_delay_ms"`
	FirstEventDelay  *int    `json:"first_event_delay_ms"`
	ToolCall         *bool   `json:"tool_call"`
	CacheReadTokens  *int    `json:"cache_read_tokens"`
	CacheWriteTokens *int    `json:"cache_write_tokens"`
	CacheWrite1h     *int    `json:"cache_write_1h_tokens"`
	InputTokens      *int    `json:"input_tokens"`
	OutputTokens     *int    `json:"output_tokens"`
	ServiceTier      *string `json:"service_tier"`
	AudioInput       *int    `json:"audio_input_tokens"`
	AudioOutput      *int    `json:"audio_output_tokens"`
	WebSearches      *int    `json:"web_search_requests"`
	FileSearches     *int    `json:"file_search_calls"`
	CodeInterpreter  *int    `json:"code_interpreter_calls"`
	Containers       *int    `json:"code_interpreter_containers"`
	Images           *int    `json:"image_generation_calls"`
	ReplyWords       *int    `json:"reply_words"`
	AbortAfterEvents *int    `json:"abort_after_events"`
	AbortAtStart     *bool   `json:"abort_at_start"`
	NoWebSocket      *bool   `json:"no_websocket"`
	ToolPromptTokens *int    `json:"tool_prompt_tokens"`
	RetryAfter       *string `json:"retry_after"`
	Hang             *bool   `json:"hang"`
	ReasoningTokens  *int    `json:"reasoning_tokens"`
	FailResponse     *bool   `json:"fail_response"`
	BackgroundPolls  *int    `json:"background_polls"`
	PromptCache      *bool   `json:"prompt_cache"`
	Refuse           *int    `json:"refuse"`
	KeyRPS           *int    `json:"key_rps"`
}

func (u *controlUpdate) validate() error {
	if u.Format != "" && u.Format != "messages" && u.Format != "chat_completions" {
		return fmt.Errorf("format must be \"messages\", \"chat_completions\" or \"\", not %q", u.Format)
	}
	if u.Status != nil && *u.Status != 0 && (*u.Status < 400 || *u.Status > 599) {
		return fmt.Errorf("status must be 0 or 400-599, not %d", *u.Status)
	}
	for name, p := range map[string]*int{
		"status_count": u.StatusCount, "latency_ms": u.LatencyMS, "event_delay_ms": u.EventDelayMS, "first_event_delay_ms": u.FirstEventDelay,
		"cache_read_tokens": u.CacheReadTokens, "cache_write_tokens": u.CacheWriteTokens,
		"reply_words": u.ReplyWords, "abort_after_events": u.AbortAfterEvents,
		"cache_write_1h_tokens": u.CacheWrite1h, "input_tokens": u.InputTokens, "output_tokens": u.OutputTokens,
		"audio_input_tokens": u.AudioInput, "audio_output_tokens": u.AudioOutput,
		"reasoning_tokens": u.ReasoningTokens, "web_search_requests": u.WebSearches,
		"tool_prompt_tokens": u.ToolPromptTokens, "background_polls": u.BackgroundPolls,
		"file_search_calls": u.FileSearches, "code_interpreter_calls": u.CodeInterpreter,
		"code_interpreter_containers": u.Containers, "image_generation_calls": u.Images,
		"key_rps": u.KeyRPS,
	} {
		if p != nil && *p < 0 {
			return fmt.Errorf("%s must not be negative", name)
		}
	}
	if u.Refuse != nil && *u.Refuse != 0 && *u.Refuse != 429 && *u.Refuse != 401 && *u.Refuse != 403 {
		return fmt.Errorf("refuse must be 0, 429, 401 or 403, not %d", *u.Refuse)
	}
	return nil
}

func (u *controlUpdate) apply(c *Controls) {
	set := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	set(&c.Status, u.Status)
	set(&c.StatusCount, u.StatusCount)
	set(&c.LatencyMS, u.LatencyMS)
	set(&c.EventDelayMS, u.EventDelayMS)
	set(&c.FirstEventDelayMS, u.FirstEventDelay)
	set(&c.CacheReadTokens, u.CacheReadTokens)
	set(&c.CacheWriteTokens, u.CacheWriteTokens)
	set(&c.ReplyWords, u.ReplyWords)
	set(&c.CacheWrite1hTokens, u.CacheWrite1h)
	set(&c.InputTokens, u.InputTokens)
	set(&c.OutputTokens, u.OutputTokens)
	set(&c.AudioInputTokens, u.AudioInput)
	set(&c.AudioOutputTokens, u.AudioOutput)
	set(&c.WebSearchRequests, u.WebSearches)
	set(&c.FileSearchCalls, u.FileSearches)
	set(&c.CodeInterpreterCalls, u.CodeInterpreter)
	set(&c.CodeInterpreterContainers, u.Containers)
	set(&c.ImageGenerationCalls, u.Images)
	if u.ServiceTier != nil {
		c.ServiceTier = *u.ServiceTier
	}
	set(&c.AbortAfterEvents, u.AbortAfterEvents)
	set(&c.ToolPromptTokens, u.ToolPromptTokens)
	if u.AbortAtStart != nil {
		c.AbortAtStart = *u.AbortAtStart
	}
	if u.NoWebSocket != nil {
		c.NoWebSocket = *u.NoWebSocket
	}
	if u.ProbesPass != nil {
		c.ProbesPass = *u.ProbesPass
	}
	set(&c.ReasoningTokens, u.ReasoningTokens)
	set(&c.BackgroundPolls, u.BackgroundPolls)
	if u.FailResponse != nil {
		c.FailResponse = *u.FailResponse
	}
	if u.ToolCall != nil {
		c.ToolCall = *u.ToolCall
	}
	if u.RetryAfter != nil {
		c.RetryAfter = *u.RetryAfter
	}
	if u.Hang != nil {
		c.Hang = *u.Hang
	}
	if u.PromptCache != nil {
		c.PromptCache = *u.PromptCache
	}
	set(&c.Refuse, u.Refuse)
	set(&c.KeyRPS, u.KeyRPS)
}

// controlState holds one wire format's Controls. Every API request reads them,
// so the lock is held only to copy or count down.
type controlState struct {
	mu sync.Mutex
	c  Controls
	// unhang is closed when hang is turned off, releasing hung requests.
	unhang chan struct{}
}

// hang reports whether requests hang now and, if so, the channel that is
// closed when the hang ends.
func (s *controlState) hang() (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.c.Hang {
		return nil, false
	}
	if s.unhang == nil {
		s.unhang = make(chan struct{})
	}
	return s.unhang, true
}

// release lets hung requests go when the controls no longer hang; the lock
// is held.
func (s *controlState) release() {
	if !s.c.Hang && s.unhang != nil {
		close(s.unhang)
		s.unhang = nil
	}
}

func (s *controlState) get() Controls {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

func (s *controlState) update(u *controlUpdate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u.apply(&s.c)
	s.release()
}

func (s *controlState) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.c = Controls{}
	s.release()
}

// forcedStatus reports the status to force on this request, or 0, and
// counts status_count down. A probe (GET of the model list) sees a forced
// status only while it is open-ended (status_count 0) and probes_pass is
// off, and never counts it down: that way an outage is visible to health
// checks, while "fail the next N requests" means exactly the next N API
// requests, whatever the probes do.
func (s *controlState) forcedStatus(probe bool) (status int, retryAfter string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c.Status == 0 || (probe && s.c.ProbesPass) {
		return 0, ""
	}
	status, retryAfter = s.c.Status, s.c.RetryAfter
	if s.c.StatusCount > 0 {
		if probe {
			return 0, ""
		}
		s.c.StatusCount--
		if s.c.StatusCount == 0 {
			s.c.Status = 0
		}
	}
	return status, retryAfter
}

// Record is what GET /requests reports of one received request. Body is the
// raw request body exactly as received (base64 in JSON).
type Record struct {
	Seq     uint64      `json:"seq"`
	Name    string      `json:"name"`
	Format  string      `json:"format"`
	Method  string      `json:"method"`
	Host    string      `json:"host"`
	Path    string      `json:"path"`
	Query   string      `json:"query"`
	Headers http.Header `json:"headers"`
	Body    []byte      `json:"body"`
	At      time.Time   `json:"at"`
}

// recorder keeps the most recent requests in a fixed ring, so memory stays
// bounded under load and recording is one lock and one slot write.
type recorder struct {
	mu   sync.Mutex
	ring []Record
	next int    // slot the next record goes to
	full bool   // ring has wrapped
	seq  uint64 // records ever added
}

func newRecorder(size int) *recorder {
	return &recorder{ring: make([]Record, size)}
}

func (r *recorder) add(rec Record) {
	r.mu.Lock()
	r.seq++
	rec.Seq = r.seq
	r.ring[r.next] = rec
	r.next++
	if r.next == len(r.ring) {
		r.next, r.full = 0, true
	}
	r.mu.Unlock()
}

// snapshot returns the kept records, oldest first.
func (r *recorder) snapshot() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Record, 0, len(r.ring))
	if r.full {
		out = append(out, r.ring[r.next:]...)
	}
	return append(out, r.ring[:r.next]...)
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.ring)
	r.next, r.full = 0, false
}

// counters are the figures GET /stats reports for one wire format.
type counters struct {
	requests atomic.Int64 // every request but probes
	probes   atomic.Int64 // GETs of the model list
	hung     atomic.Int64 // requests (not probes) held by the hang control, never answered
	inFlight atomic.Int64 // requests (not probes) being answered now
	peak     atomic.Int64 // the most in flight at once since the last reset
}

// enter counts a request in flight and returns the function that ends it.
func (c *counters) enter() func() {
	n := c.inFlight.Add(1)
	for {
		p := c.peak.Load()
		if n <= p || c.peak.CompareAndSwap(p, n) {
			break
		}
	}
	return func() { c.inFlight.Add(-1) }
}

// controlHandler serves the control listener.
type controlHandler struct {
	fake *fake
	mux  *http.ServeMux
}

func newControlHandler(f *fake) *controlHandler {
	h := &controlHandler{fake: f, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /control", h.getControl)
	h.mux.HandleFunc("POST /control", h.postControl)
	h.mux.HandleFunc("POST /reset", h.reset)
	h.mux.HandleFunc("GET /requests", h.requests)
	h.mux.HandleFunc("GET /stats", h.stats)
	h.mux.HandleFunc("GET /keys", h.getKeys)
	h.mux.HandleFunc("POST /keys", h.postKeys)
	h.mux.HandleFunc("POST /usage", h.postUsage)
	h.mux.HandleFunc("GET /usage", h.getUsage)
	h.mux.HandleFunc("POST /prices", h.postPrices)
	h.mux.HandleFunc("POST /abandoned", h.postAbandoned)
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok\n"))
	})
	return h
}

func (h *controlHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
}

func (h *controlHandler) currentControls() map[string]Controls {
	return map[string]Controls{"messages": h.fake.messagesCtl.get(), "chat_completions": h.fake.chatCompletionsCtl.get()}
}

func (h *controlHandler) getControl(w http.ResponseWriter, r *http.Request) {
	writeControlJSON(w, http.StatusOK, h.currentControls())
}

func (h *controlHandler) postControl(w http.ResponseWriter, r *http.Request) {
	var u controlUpdate
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		writeControlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err := u.validate(); err != nil {
		writeControlJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if u.Format == "" || u.Format == "messages" {
		h.fake.messagesCtl.update(&u)
	}
	if u.Format == "" || u.Format == "chat_completions" {
		h.fake.chatCompletionsCtl.update(&u)
	}
	cur := h.currentControls()
	h.fake.log.Info("controls changed", "format", u.Format, "messages", cur["messages"], "chat_completions", cur["chat_completions"])
	writeControlJSON(w, http.StatusOK, cur)
}

// reset clears the controls, the records and the counters, so that each test
// can start from a known state without restarting the fake.
func (h *controlHandler) reset(w http.ResponseWriter, r *http.Request) {
	f := h.fake
	f.messagesCtl.reset()
	f.chatCompletionsCtl.reset()
	f.records.reset()
	f.keys.reset()
	f.messagesUsage.reset()
	f.chatCompletionsUsage.reset()
	f.embeddingsUsage.reset()
	f.transcriptionsUsage.reset()
	f.imagesUsage.reset()
	f.siteOf("messages").billAbandoned.Store(false)
	f.siteOf("chat_completions").billAbandoned.Store(false)
	for _, c := range []*counters{&f.messagesCount, &f.chatCompletionsCount} {
		c.requests.Store(0)
		c.probes.Store(0)
		c.hung.Store(0)
		c.peak.Store(c.inFlight.Load())
	}
	f.log.Info("reset")
	writeControlJSON(w, http.StatusOK, h.currentControls())
}

// requests lists the kept records, oldest first. The optional query
// parameters format and path keep only records that match them exactly.
func (h *controlHandler) requests(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	format, path := q.Get("format"), q.Get("path")
	recs := h.fake.records.snapshot()
	out := recs[:0]
	for _, rec := range recs {
		if (format == "" || rec.Format == format) && (path == "" || rec.Path == path) {
			out = append(out, rec)
		}
	}
	writeControlJSON(w, http.StatusOK, out)
}

func (h *controlHandler) stats(w http.ResponseWriter, r *http.Request) {
	f := h.fake
	writeControlJSON(w, http.StatusOK, map[string]int64{
		"messages":                        f.messagesCount.requests.Load(),
		"messages_probes":                 f.messagesCount.probes.Load(),
		"chat_completions":                f.chatCompletionsCount.requests.Load(),
		"chat_completions_probes":         f.chatCompletionsCount.probes.Load(),
		"messages_hung":                   f.messagesCount.hung.Load(),
		"chat_completions_hung":           f.chatCompletionsCount.hung.Load(),
		"messages_in_flight":              f.messagesCount.inFlight.Load(),
		"messages_peak_in_flight":         f.messagesCount.peak.Load(),
		"chat_completions_in_flight":      f.chatCompletionsCount.inFlight.Load(),
		"chat_completions_peak_in_flight": f.chatCompletionsCount.peak.Load(),
	})
}

func writeControlJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
