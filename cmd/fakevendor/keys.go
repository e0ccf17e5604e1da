package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"time"
)

// A vendor limits each API key on its own, and keeps a prompt cache per key
// (or organisation). keyState is the fake's view of that: statuses forced
// on the requests of one key (a key answering 429 with retry-after, a
// revoked key answering 401, an overloaded one 529), and, with the
// prompt_cache control, which prompt prefixes each key has written.
//
// Keys are named in the controls and GET /keys by KeyLabel, the first 8 hex
// digits of the secret's SHA-256, never by the secret itself.
type keyState struct {
	mu       sync.Mutex
	forced   map[string]keyForce   // label → status
	prefixes map[string]bool       // label + "/" + prefix hash: written to the cache
	counts   map[string]*keyCount  // label → counters
	windows  map[string]*keyWindow // label → this second's requests (key_rps)
}

// keyWindow counts one key's requests in a one-second window.
type keyWindow struct {
	start time.Time
	n     int
}

type keyForce struct {
	Status     int    `json:"status"`
	RetryAfter string `json:"retry_after,omitempty"`
}

// keyCount is what GET /keys reports per key label.
type keyCount struct {
	Requests    int64 `json:"requests"`     // API requests carrying the key (probes aside)
	Forced      int64 `json:"forced"`       // of which answered with the key's forced status
	CacheReads  int64 `json:"cache_reads"`  // replies that read the key's prompt cache
	CacheWrites int64 `json:"cache_writes"` // replies that wrote it
	Limited     int64 `json:"limited"`      // answered 429 by key_rps
}

// KeyLabel is how the fake names a secret in its controls and stats.
func KeyLabel(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:4])
}

// requestKey returns the credential r carries: x-api-key, else a bearer
// token; "" without one.
func requestKey(r *http.Request) string {
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); strings.HasPrefix(a, "Bearer ") {
		return a[len("Bearer "):]
	}
	return ""
}

// validKey reports whether key is one of the comma-separated keys in list
// (an empty list accepts any request).
func validKey(list, key string) bool {
	if list == "" {
		return true
	}
	for _, k := range strings.Split(list, ",") {
		if k != "" && k == key {
			return true
		}
	}
	return false
}

// admit counts an API request with key and returns the status forced on
// the key, if any.
func (s *keyState) admit(key string) (keyForce, bool) {
	label := KeyLabel(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]*keyCount{}
	}
	c := s.counts[label]
	if c == nil {
		c = &keyCount{}
		s.counts[label] = c
	}
	c.Requests++
	f, ok := s.forced[label]
	if ok && f.Status != 0 {
		c.Forced++
		return f, true
	}
	return keyForce{}, false
}

// cache reports whether key has the body's prompt prefix in its cache, and
// writes it there. The prefix is the body up to its last message: what a
// conversation's next turn repeats.
func (s *keyState) cache(key string, body []byte) (read bool) {
	prefix := body
	var b struct {
		System   json.RawMessage   `json:"system"`
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(body, &b) == nil && len(b.Messages) > 0 {
		// The system prompt and the first message identify a conversation.
		prefix = append(append([]byte{}, b.System...), b.Messages[0]...)
	}
	sum := sha256.Sum256(prefix)
	label := KeyLabel(key)
	id := label + "/" + hex.EncodeToString(sum[:8])
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prefixes == nil {
		s.prefixes = map[string]bool{}
	}
	read = s.prefixes[id]
	s.prefixes[id] = true
	if c := s.counts[label]; c != nil {
		if read {
			c.CacheReads++
		} else {
			c.CacheWrites++
		}
	}
	return read
}

// take counts a request of key against its limit of rps requests per
// second: the requests left in this second, and whether it was within the
// limit.
func (s *keyState) take(key string, rps int, now time.Time) (int, bool) {
	label := KeyLabel(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.windows == nil {
		s.windows = map[string]*keyWindow{}
	}
	kw := s.windows[label]
	if kw == nil || now.Sub(kw.start) >= time.Second {
		kw = &keyWindow{start: now}
		s.windows[label] = kw
	}
	if kw.n >= rps {
		if c := s.counts[label]; c != nil {
			c.Limited++
		}
		return 0, false
	}
	kw.n++
	return rps - kw.n, true
}

func (s *keyState) set(label string, f keyForce) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.forced == nil {
		s.forced = map[string]keyForce{}
	}
	if f.Status == 0 {
		delete(s.forced, label)
		return
	}
	s.forced[label] = f
}

func (s *keyState) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forced, s.prefixes, s.counts, s.windows = nil, nil, nil, nil
}

func (s *keyState) snapshot() map[string]keyCount {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]keyCount, len(s.counts))
	for l, c := range s.counts {
		out[l] = *c
	}
	return out
}

// keyControl is the body of POST /keys: the status forced on one key's
// requests (0 clears it), with an optional retry-after.
type keyControl struct {
	Key        string `json:"key"` // the key's label (KeyLabel)
	Status     int    `json:"status"`
	RetryAfter string `json:"retry_after"`
}

func (h *controlHandler) postKeys(w http.ResponseWriter, r *http.Request) {
	var c keyControl
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || c.Key == "" || (c.Status != 0 && (c.Status < 400 || c.Status > 599)) {
		writeControlJSON(w, http.StatusBadRequest, map[string]string{"error": "want {\"key\": LABEL, \"status\": 0 or 400-599, \"retry_after\": \"S\"}"})
		return
	}
	h.fake.keys.set(c.Key, keyForce{Status: c.Status, RetryAfter: c.RetryAfter})
	h.fake.log.Info("key controls changed", "key", c.Key, "status", c.Status, "retry_after", c.RetryAfter)
	writeControlJSON(w, http.StatusOK, h.fake.keys.snapshot())
}

func (h *controlHandler) getKeys(w http.ResponseWriter, r *http.Request) {
	writeControlJSON(w, http.StatusOK, h.fake.keys.snapshot())
}
