package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// maxBody bounds request bodies; it matches the larger vendor's published
// request size limit (32 MB).
const maxBody = 32 << 20

// fake is one fake-vendor process: both vendor APIs and their shared state.
type fake struct {
	cfg     config
	log     *slog.Logger
	ids     idSource
	records *recorder

	messagesCtl, chatCompletionsCtl     controlState
	messagesCount, chatCompletionsCount counters
	keys                                keyState
	messagesUsage, chatCompletionsUsage usageLog // billed, for the usage reports
	// OpenAI's other usage reports (adminreports.go).
	embeddingsUsage, transcriptionsUsage, imagesUsage usageLog

	messages, chatCompletions, control http.Handler
}

func newFake(cfg config, log *slog.Logger) *fake {
	if cfg.maxRecords < 1 {
		cfg.maxRecords = 1000
	}
	f := &fake{cfg: cfg, log: log, records: newRecorder(cfg.maxRecords)}
	f.ids.init()
	f.messages = &site{fake: f, format: "messages", ctl: &f.messagesCtl, count: &f.messagesCount, api: &messagesAPI{fake: f},
		usage: &f.messagesUsage, reports: map[string]func(*site, http.ResponseWriter, *http.Request){
			messagesUsagePath: (*site).messagesUsageReport, messagesCostPath: (*site).messagesCostReport}}
	f.chatCompletions = &site{fake: f, format: "chat_completions", ctl: &f.chatCompletionsCtl, count: &f.chatCompletionsCount, api: &chatAPI{fake: f},
		usage: &f.chatCompletionsUsage, reports: map[string]func(*site, http.ResponseWriter, *http.Request){
			chatUsagePath: (*site).chatUsageReport, chatCostPath: (*site).chatCostReport,
			embeddingsUsagePath: (*site).otherUsageReport, transcriptionsUsagePath: (*site).otherUsageReport, imagesUsagePath: (*site).otherUsageReport}}
	f.control = newControlHandler(f)
	return f
}

// vendorAPI is what differs between the two vendors: their credentials,
// their error format and their endpoints.
type vendorAPI interface {
	// requestIDHeader names the header that carries the request id.
	requestIDHeader() string
	// authorized reports whether r carries the configured credential.
	authorized(r *http.Request) bool
	// route returns the endpoint for r, or nil, and whether r is a probe
	// (a GET of the model list, as health checks send).
	route(r *http.Request) (h endpoint, probe bool)
	// writeError answers with status and the vendor's error body; an
	// empty msg stands for the vendor's usual message for status.
	writeError(w http.ResponseWriter, r *http.Request, status int, msg string)
}

// endpoint answers one admitted request. body is the raw request body.
type endpoint func(w http.ResponseWriter, r *http.Request, body []byte, ctl *Controls)

// site serves one vendor API. Every request, probes included, goes through
// the same steps: read and record the body, count it, wait latency_ms, then
// answer 413/400 for an unreadable body, 401 for a missing credential, 404
// for an unknown endpoint or the forced status, if any; only then does the
// endpoint see it. The credential comes before the forced status, as it
// would at a real vendor, so a gateway sending the wrong key shows up as 401
// even during a simulated outage.
type site struct {
	fake   *fake
	format string // the wire format served, as in records and controls
	ctl    *controlState
	count  *counters
	api    vendorAPI
	// usage is what the site billed; reports serve it by path (admin
	// APIs: not recorded, counted or steered by the controls).
	usage   *usageLog
	reports map[string]func(*site, http.ResponseWriter, *http.Request)
	// billAbandoned: hung requests are billed when given up on
	// (abandoned.go).
	billAbandoned atomic.Bool
}

var errTooLarge = errors.New("request body too large")

func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f := s.fake
	h := w.Header()
	h.Set("X-Fake-Vendor", f.cfg.name)
	h.Set(s.api.requestIDHeader(), f.ids.next("req_"))
	if report := s.reports[r.URL.Path]; report != nil && r.Method == http.MethodGet {
		report(s, w, r)
		return
	}

	ep, probe := s.api.route(r)
	body, readErr := readBody(r)
	f.records.add(Record{
		Name:    f.cfg.name,
		Format:  s.format,
		Method:  r.Method,
		Host:    r.Host,
		Path:    r.URL.Path,
		Query:   r.URL.RawQuery,
		Headers: r.Header.Clone(),
		Body:    body,
		At:      time.Now(),
	})
	switch {
	case probe:
		s.count.probes.Add(1)
	case socketUpgrade(r):
		// A socket counts each response it serves (socket.go), not the
		// upgrade that opened it.
		defer s.count.enter()()
	default:
		s.count.requests.Add(1)
		defer s.count.enter()()
	}
	f.log.Debug("request", "format", s.format, "method", r.Method, "path", r.URL.Path, "bytes", len(body))

	if unhang, ok := s.ctl.hang(); ok {
		if !probe {
			s.count.hung.Add(1)
		}
		select {
		case <-r.Context().Done():
			if !probe {
				s.billHung(r, body)
			}
		case <-unhang:
		}
		// Never answered: drop the connection without a reply.
		panic(http.ErrAbortHandler)
	}
	ctl := s.ctl.get()
	// A test may steer one request: the x-fake-controls header holds a
	// control update (as POST /control takes) applied to this request only.
	if v := r.Header.Get("x-fake-controls"); v != "" && !probe {
		var u controlUpdate
		if err := json.Unmarshal([]byte(v), &u); err != nil || u.validate() != nil || u.Status != nil || u.StatusCount != nil {
			s.api.writeError(w, r, http.StatusBadRequest, "x-fake-controls: not a valid control update (status cannot be set per request)")
			return
		}
		u.apply(&ctl)
	}
	if !sleepCtx(r, time.Duration(ctl.LatencyMS)*time.Millisecond) {
		return
	}
	// A forced status stands for an outage in front of the API: like a real
	// one, it answers before any authentication, so unauthenticated health
	// probes see it too.
	if status, retryAfter := s.ctl.forcedStatus(probe); status != 0 {
		if retryAfter != "" && (status == 429 || status == 503 || status == 529) {
			h.Set("Retry-After", retryAfter)
		}
		s.api.writeError(w, r, status, "Forced status "+strconv.Itoa(status)+" by the fake vendor's controls.")
		return
	}
	switch {
	case errors.Is(readErr, errTooLarge):
		s.api.writeError(w, r, http.StatusRequestEntityTooLarge, "Request exceeds the maximum allowed number of bytes.")
		return
	case readErr != nil:
		s.api.writeError(w, r, http.StatusBadRequest, "Could not read the request body.")
		return
	case !s.api.authorized(r):
		s.api.writeError(w, r, http.StatusUnauthorized, "")
		return
	case ep == nil:
		s.api.writeError(w, r, http.StatusNotFound, "")
		return
	}
	if !probe {
		// The key's own limits: a status forced on this key alone, before
		// any generation (a vendor's 429 is decided at admission).
		key := requestKey(r)
		if f, ok := f.keys.admit(key); ok {
			if f.RetryAfter != "" {
				h.Set("Retry-After", f.RetryAfter)
			}
			// As a vendor answers a key's own limit or refusal: the limit's
			// header at 0, the message of a bad key.
			msg := "Forced status " + strconv.Itoa(f.Status) + " on this key by the fake vendor's controls."
			switch f.Status {
			case 429:
				h.Set(s.remainingHeader(), "0")
			case 401, 403:
				// In the vendors' words of a bad key, which the blame table
				// reads; OpenAI's (and a 403) name the key by its first and
				// last characters, which the gateway must keep from the
				// client. Anthropic's 401 says "invalid x-api-key" alone.
				switch {
				case f.Status == 403:
					msg = "This key may not be used: " + maskKey(key) + ". " + msg
				case s.format == "messages":
					msg = "invalid x-api-key"
				default:
					msg = "Incorrect API key provided: " + maskKey(key) + ". " + msg
				}
			}
			s.api.writeError(w, r, f.Status, msg)
			return
		}
		if ctl.KeyRPS > 0 {
			left, ok := f.keys.take(key, ctl.KeyRPS, time.Now())
			h.Set(s.remainingHeader(), strconv.Itoa(left))
			h.Set(strings.Replace(s.remainingHeader(), "remaining", "limit", 1), strconv.Itoa(ctl.KeyRPS))
			if !ok {
				h.Set("Retry-After", "1")
				s.api.writeError(w, r, http.StatusTooManyRequests, "This key's requests per second are spent (the fake vendor's key_rps).")
				return
			}
		}
		if ctl.Refuse != 0 {
			s.refuse(w, r, ctl.Refuse, ctl.KeyRPS)
			return
		}
		if ctl.PromptCache {
			// Each key has a cache of its own: a conversation's prefix is
			// read from it only if the same key wrote it.
			if f.keys.cache(key, body) {
				ctl.CacheReadTokens, ctl.CacheWriteTokens = promptCacheTokens, 0
			} else {
				ctl.CacheReadTokens, ctl.CacheWriteTokens = 0, promptCacheTokens
			}
		}
	}
	if ctl.AbortAtStart && !probe {
		// Reset before any byte of the reply: unless the reply streams,
		// whose headers go first (startSSE resets after them).
		if !streaming(body) {
			panic(http.ErrAbortHandler)
		}
	}
	ep(w, r, body, &ctl)
}

// streaming reports whether a generation request body asks for a stream.
func streaming(body []byte) bool {
	var b struct {
		Stream bool `json:"stream"`
	}
	json.Unmarshal(body, &b) // a malformed body is answered by the endpoint
	return b.Stream
}

// readBody reads the whole request body into a slice of its own, which the
// records keep as is: no copy, and byte-identical to what was received.
func readBody(r *http.Request) ([]byte, error) {
	if r.ContentLength > maxBody {
		return []byte{}, errTooLarge
	}
	if r.ContentLength >= 0 {
		body := make([]byte, r.ContentLength)
		n, err := io.ReadFull(r.Body, body)
		return body[:n], err
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if len(body) > maxBody {
		return body[:maxBody], errTooLarge
	}
	if body == nil {
		body = []byte{}
	}
	return body, err
}

// sleepCtx waits d, or until the client goes away; it reports whether the
// request should go on.
func sleepCtx(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// idSource makes unique ids cheaply: a random per-process tag, so that ids
// from several fakes or restarts do not collide, and a counter.
type idSource struct {
	tag string
	n   atomic.Uint64
}

func (s *idSource) init() {
	var b [6]byte
	rand.Read(b[:])
	s.tag = hex.EncodeToString(b[:])
}

// next returns prefix followed by 24 hex digits.
func (s *idSource) next(prefix string) string {
	n := s.n.Add(1)
	var buf [64]byte
	out := append(buf[:0], prefix...)
	out = append(out, s.tag...)
	var hexn [16]byte
	digits := strconv.AppendUint(hexn[:0], n, 16)
	for i := len(digits); i < 12; i++ {
		out = append(out, '0')
	}
	out = append(out, digits...)
	return string(out)
}

// maskKey writes a key as the vendors' refusals name it: its first eight
// and last four characters.
func maskKey(k string) string {
	if len(k) <= 12 {
		return strings.Repeat("*", len(k))
	}
	return k[:8] + "********" + k[len(k)-4:]
}

// remainingHeader is the vendor's header of a key's remaining requests.
func (s *site) remainingHeader() string {
	if s.format == "messages" {
		return "anthropic-ratelimit-requests-remaining"
	}
	return "x-ratelimit-remaining-requests"
}

// refuse answers status for the request itself, as the vendors do: the
// key's remaining requests untouched (its limit, or 1000 without one),
// the body naming what of the request is refused.
func (s *site) refuse(w http.ResponseWriter, r *http.Request, status, limit int) {
	if limit <= 0 {
		w.Header().Set(s.remainingHeader(), "1000")
	}
	var msg string
	switch {
	case status == 429 && s.format == "messages":
		msg = "This request would exceed your organization's rate limit of 30,000 input tokens per minute."
	case status == 429:
		msg = "Request too large for gpt-4o in organization org-fake on tokens per min (TPM): Limit 30000, Requested 90000."
	case status == 401:
		msg = "Unsupported authorization scheme in this request."
	default:
		msg = "This request may not use the model it names."
	}
	s.api.writeError(w, r, status, msg)
}
