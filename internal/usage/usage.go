// Package usage defines what one reply consumed, as quantities by kind, and
// the names of the three models a request involves. The same Usage value
// travels from the meters through settlement, pricing, the ledger and the
// usage counters; Kinds is the single list of its fields and of the names
// they carry outside Go (Redis counter and ledger fields, JSON).
package usage

import (
	"log/slog"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Usage is what one reply consumed. Every field is a count of tokens, except
// the built-in tool calls (WebSearches, FileSearches, CodeInterpreter,
// ImageGenerations), counts of calls or sessions, and AudioSeconds, whole
// seconds of input audio for models priced by duration.
//
// The kinds do not overlap, so that each is priced once: Input excludes cache
// reads, cache writes and audio; Output excludes audio output. Reasoning is
// the exception: it is part of Output (vendors bill it as output) and is
// recorded only so that it can be shown.
type Usage struct {
	Input        int64 // text and image input, not cached
	Output       int64 // text output, reasoning included
	CacheRead    int64 // input read from the prompt cache
	CacheWrite5m int64 // input written to the cache for 5 minutes
	CacheWrite1h int64 // input written to the cache for 1 hour
	AudioInput   int64
	AudioOutput  int64
	Reasoning    int64 // part of Output; recorded, not priced on its own
	WebSearches  int64 // server-side web searches (requests, not tokens)
	// Built-in tools of the responses operation, counted from the calls the
	// vendor reports having made.
	FileSearches     int64 // file_search calls
	CodeInterpreter  int64 // code interpreter sessions (distinct containers)
	ImageGenerations int64 // image_generation calls
	// AudioSeconds is input audio measured by duration, in whole seconds
	// (a fraction rounds up), for models the vendor bills per second
	// rather than per token; never also counted as AudioInput.
	AudioSeconds int64
}

// Kind is one field of Usage.
type Kind struct {
	// Name is the field's name in Redis counters, ledger entries and JSON.
	// It never contains a colon.
	Name string
	// Priced is false for a kind contained in another (Reasoning).
	Priced bool
	field  int // the field's index, for Usage.field
}

// Of returns the kind's quantity in u.
func (k Kind) Of(u Usage) int64 { return *u.field(k.field) }

// Set stores n as the kind's quantity in u.
func (k Kind) Set(u *Usage, n int64) { *u.field(k.field) = n }

// field returns the address of field i. A switch rather than a function
// per kind: the compiler then sees that u does not escape, and reading a
// kind allocates nothing (this runs for every kind of every request).
func (u *Usage) field(i int) *int64 {
	switch i {
	case 0:
		return &u.Input
	case 1:
		return &u.Output
	case 2:
		return &u.CacheRead
	case 3:
		return &u.CacheWrite5m
	case 4:
		return &u.CacheWrite1h
	case 5:
		return &u.AudioInput
	case 6:
		return &u.AudioOutput
	case 7:
		return &u.Reasoning
	case 8:
		return &u.WebSearches
	case 9:
		return &u.FileSearches
	case 10:
		return &u.CodeInterpreter
	case 11:
		return &u.ImageGenerations
	case 12:
		return &u.AudioSeconds
	}
	panic("usage: no field " + strconv.Itoa(i))
}

// Kinds lists every field of Usage, in a fixed order. It is the one place that
// names them: adding a field to Usage means adding it here, and the store's
// round-trip test fails until both agree.
var Kinds = []Kind{
	{"input", true, 0},
	{"output", true, 1},
	{"cache_read", true, 2},
	{"cache_write_5m", true, 3},
	{"cache_write_1h", true, 4},
	{"audio_input", true, 5},
	{"audio_output", true, 6},
	{"reasoning", false, 7},
	{"web_searches", true, 8},
	{"file_searches", true, 9},
	{"code_interpreter_sessions", true, 10},
	{"image_generations", true, 11},
	{"audio_seconds", true, 12},
}

// KindNamed returns the kind called name.
func KindNamed(name string) (Kind, bool) {
	for _, k := range Kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Add returns the sum of u and v, kind by kind.
func (u Usage) Add(v Usage) Usage {
	for _, k := range Kinds {
		k.Set(&u, k.Of(u)+k.Of(v))
	}
	return u
}

// LogValue logs the kinds by name, zeros left out, without reflection:
// every request's log line carries one.
func (u Usage) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, 4)
	for _, k := range Kinds {
		if v := k.Of(u); v != 0 {
			attrs = append(attrs, slog.Int64(k.Name, v))
		}
	}
	return slog.GroupValue(attrs...)
}

// Prompt is the size of the prompt in tokens, as long-context price tiers
// measure it: every input token, cached or not.
func (u Usage) Prompt() int64 {
	return u.Input + u.CacheRead + u.CacheWrite5m + u.CacheWrite1h + u.AudioInput
}

// Valid reports whether every quantity is non-negative.
func (u Usage) Valid() bool {
	for _, k := range Kinds {
		if k.Of(u) < 0 {
			return false
		}
	}
	return true
}

// The three models of one request.
type (
	// RequestedModel is the model name the client sent.
	RequestedModel string
	// PricedModel is the catalogue entry the requested name resolved to:
	// usage is counted and reported under it, so a dated snapshot and its
	// alias are one row.
	PricedModel string
	// ReportedModel is the model the vendor's reply names; empty when the
	// reply named none.
	ReportedModel string
)

// CleanName reports whether s may be kept as a name (a model, a tier):
// valid UTF-8 without control characters, which the ledger, logs, CSV and
// PostgreSQL all take as they are.
func CleanName(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// Clean returns s if it is a clean name (CleanName), else s with each
// invalid byte and control character replaced by U+FFFD: what a vendor's
// reply names is kept, never stored raw.
func Clean(s string) string {
	if CleanName(s) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, string(utf8.RuneError)))
}

// Report is what a meter observed in one reply: the usage and the facts about
// the reply that pricing needs.
type Report struct {
	Usage
	Model ReportedModel
	// ServiceTier is the tier the vendor says served the reply ("priority",
	// "flex", "default", ...); empty when not reported.
	ServiceTier string
	// Estimated is set when any figure was not reported by the vendor and was
	// counted or estimated by the gateway instead.
	Estimated bool
}
