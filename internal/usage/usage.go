// Package usage defines what one reply consumed, as quantities by kind, and
// the names of the three models a request involves. The same Usage value
// travels from the meters through settlement, pricing, the ledger and the
// usage counters; Kinds is the single list of its fields and of the names
// they carry outside Go (Redis counter and ledger fields, JSON).
package usage

import (
	"log/slog"
	"strings"
	"unicode"
	"unicode/utf8"
)

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
// measure it: every input token, cached or not (every kind of SideInput).
func (u Usage) Prompt() int64 { return u.Sum(SideInput, Token) }

// Tokens is every token of the reply, input and output (reasoning is
// inside output): what it counts towards a tokens-per-minute limit.
func (u Usage) Tokens() int64 { return u.Sum(SideInput, Token) + u.Sum(SideOutput, Token) }

// Sum adds the quantities of the priced kinds of side s measured in unit.
func (u Usage) Sum(s Side, unit Unit) int64 {
	var n int64
	for _, k := range Kinds {
		if k.Priced() && k.Side == s && k.Unit == unit {
			n += k.Of(u)
		}
	}
	return n
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
