package keypool

// Blame: whether a vendor's refusal is the key's fault or the request's.
// One table (Rules) says it; the sidecar judges each attempt Envoy logs
// with it (Judge), and Envoy's upstream filter, rendered from the same
// table, decides from it which attempts another key may retry.

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Who a refusal is charged to.
const (
	BlameKey     = "key"     // the key is limited or refused: it cools or is taken out, another key retries
	BlameRequest = "request" // the request is at fault: answered to its client, no key is touched
	// BlameUnsure: no evidence either way. The refusal goes to its client;
	// the key cools or is taken out only when different accounts' requests
	// draw the same status on it within the pool's corroboration window.
	BlameUnsure = "unsure"
)

// Marker is an error a vendor writes in a refusal's JSON body: a string
// field whose value is (or, with Prefix, starts with) Value. Envoy's
// upstream filter names the first marker a refusal's body holds in the
// ErrorHeader of the reply, which the sidecar reads from Envoy's log.
type Marker struct {
	Name   string
	Field  string
	Value  string
	Prefix bool
}

// Markers are the vendor errors the rules read, in the order they are
// looked for: the first found names the body's error.
var Markers = []Marker{
	// OpenAI: one request above the organisation's tokens per minute. Its
	// code is rate_limit_exceeded too, so it is looked for first.
	{Name: "request_too_large", Field: "message", Value: "Request too large", Prefix: true},
	{Name: "insufficient_quota", Field: "code", Value: "insufficient_quota"},
	{Name: "rate_limit_exceeded", Field: "code", Value: "rate_limit_exceeded"},
	{Name: "invalid_api_key", Field: "code", Value: "invalid_api_key"},
	// Anthropic's 401 for the key the gateway's Envoy set (the client's
	// x-api-key never reaches the vendor).
	{Name: "invalid_x_api_key", Field: "message", Value: "invalid x-api-key"},
}

// Pattern is the marker as a regular expression on the raw body: the
// quoted field, a colon, the quoted value. A client's text echoed inside
// a vendor's message is escaped there (\"code\"), so it never matches.
func (m Marker) Pattern() string {
	p := `"` + regexp.QuoteMeta(m.Field) + `"\s*:\s*"` + regexp.QuoteMeta(m.Value)
	if !m.Prefix {
		p += `"`
	}
	return p
}

// RemainingHeaders are the vendors' rate-limit headers that say a key's
// limit is spent when one is 0: OpenAI's x-ratelimit-remaining-*, Anthropic's
// anthropic-ratelimit-*-remaining.
var RemainingHeaders = remaining()

func remaining() []string {
	var out []string
	for _, h := range CapacityHeaders {
		out = append(out, h[0])
	}
	return out
}

// Headers Envoy's upstream filter sets on an attempt's reply: ErrorHeader
// names the body's Marker, RetryHeader marks a reply another key may retry
// (the retry policy's retriable_headers). Both are removed before the
// client.
const (
	ErrorHeader = "x-gateway-vendor-error"
	RetryHeader = "x-gateway-retry"
)

// Rule is one row of the table: a status, the evidence that must hold
// (none: any reply of the status), whom it blames and the state a blamed
// key takes.
type Rule struct {
	Name   string
	Status int
	// Spent: one of RemainingHeaders is 0.
	Spent bool
	// Error: the body holds this Marker (ErrorHeader).
	Error string
	// RetryAfter: the reply has a retry-after header.
	RetryAfter bool
	Blame      string
	State      string // Cooling or Disabled, once the key is blamed
}

// Rules is the table, first match wins. A status it does not list says
// nothing of the key.
var Rules = []Rule{
	{Name: "request_too_large", Status: 429, Error: "request_too_large", Blame: BlameRequest},
	{Name: "insufficient_quota", Status: 429, Error: "insufficient_quota", Blame: BlameKey, State: Disabled},
	{Name: "limit_spent", Status: 429, Spent: true, Blame: BlameKey, State: Cooling},
	{Name: "rate_limit_exceeded", Status: 429, Error: "rate_limit_exceeded", Blame: BlameKey, State: Cooling},
	{Name: "limited", Status: 429, Blame: BlameUnsure, State: Cooling},
	{Name: "invalid_api_key", Status: 401, Error: "invalid_api_key", Blame: BlameKey, State: Disabled},
	{Name: "invalid_x_api_key", Status: 401, Error: "invalid_x_api_key", Blame: BlameKey, State: Disabled},
	{Name: "unauthorized", Status: 401, Blame: BlameUnsure, State: Disabled},
	{Name: "payment_required", Status: 402, Blame: BlameKey, State: Disabled},
	// OpenAI answers 403 to a model the project may not use, Anthropic's
	// permission_error may name the request's resource: the request's, until
	// other accounts see the same.
	{Name: "forbidden", Status: 403, Blame: BlameUnsure, State: Disabled},
	// Overloaded (Anthropic's 529, a 503 that says when to come back): the
	// key's endpoint, not the request.
	{Name: "overloaded", Status: 529, Blame: BlameKey, State: Cooling},
	{Name: "unavailable", Status: 503, RetryAfter: true, Blame: BlameKey, State: Cooling},
}

// Judge returns the rule that matches a reply of status with the headers
// header reads (lowercase names; ErrorHeader included), and whether one
// does.
func Judge(status int, header func(string) string) (Rule, bool) {
	for _, r := range Rules {
		if r.Status != status {
			continue
		}
		if r.Error != "" && header(ErrorHeader) != r.Error {
			continue
		}
		if r.RetryAfter && header("retry-after") == "" {
			continue
		}
		if r.Spent && !spent(header) {
			continue
		}
		return r, true
	}
	return Rule{}, false
}

// spent reports whether one of the vendor's remaining headers is 0.
func spent(header func(string) string) bool {
	for _, h := range RemainingHeaders {
		v := strings.TrimSpace(header(h))
		if n, err := strconv.ParseFloat(v, 64); err == nil && n <= 0 {
			return true
		}
	}
	return false
}

// Statuses are the statuses the table judges, in order.
func Statuses() []int {
	var out []int
	for _, r := range Rules {
		if !slices.Contains(out, r.Status) {
			out = append(out, r.Status)
		}
	}
	return out
}

// Verdict is what one refused attempt did: the rule that judged it, the
// key's state after it, whether that changed, and whether the account
// that sent it is now refused itself.
type Verdict struct {
	Rule    Rule
	State   string
	Changed bool
	Barred  bool
}

// Attempt takes one refused attempt on key, of account (empty: unknown),
// sent at sent, judged by rule: a key's fault cools it or takes it out; an
// unsure one does so once Corroborate accounts drew it on the key within
// Window; a refusal that blames no key counts against its account, which
// AccountRefusals of them within Window refuse for Window.
func (p *Pool) Attempt(key, account string, rule Rule, retryAfter time.Duration, sent time.Time) Verdict {
	v := Verdict{Rule: rule}
	if rule.Blame == BlameKey {
		v.State, v.Changed = p.blame(key, rule.State, rule.Status, retryAfter, sent)
		return v
	}
	now := p.o.Now()
	corroborated := false
	p.mu.Lock()
	if rule.Blame == BlameUnsure {
		uk := unsureKey{key, rule.Status}
		seen := p.unsure[uk]
		if seen == nil {
			seen = map[string]time.Time{}
			p.unsure[uk] = seen
		}
		for a, t := range seen {
			if now.Sub(t) > p.o.Window {
				delete(seen, a)
			}
		}
		if account != "" {
			seen[account] = now
		}
		if corroborated = len(seen) >= p.o.Corroborate; corroborated {
			delete(p.unsure, uk)
		}
	}
	if account != "" && !corroborated && p.o.AccountRefusals > 0 {
		ts := p.refusals[account]
		i := 0
		for i < len(ts) && now.Sub(ts[i]) > p.o.Window {
			i++
		}
		ts = append(ts[i:], now)
		p.refusals[account] = ts
		if len(ts) >= p.o.AccountRefusals {
			p.barred[account] = now.Add(p.o.Window)
			delete(p.refusals, account)
			v.Barred = true
		}
	}
	p.sweep(now)
	p.mu.Unlock()
	if corroborated {
		v.State, v.Changed = p.blame(key, rule.State, rule.Status, retryAfter, sent)
		return v
	}
	v.State = p.State(key)
	return v
}

// Barred reports until when account is refused for drawing refusals on
// healthy keys, and whether it is.
func (p *Pool) Barred(account string) (time.Time, bool) {
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	until, ok := p.barred[account]
	if ok && !now.Before(until) {
		delete(p.barred, account)
		return time.Time{}, false
	}
	return until, ok
}

// sweep drops what is older than the window, so that the maps hold only
// the accounts of the last window. Called with p.mu held.
func (p *Pool) sweep(now time.Time) {
	if len(p.refusals)+len(p.barred) < 1024 {
		return
	}
	for a, ts := range p.refusals {
		if len(ts) == 0 || now.Sub(ts[len(ts)-1]) > p.o.Window {
			delete(p.refusals, a)
		}
	}
	for a, t := range p.barred {
		if !now.Before(t) {
			delete(p.barred, a)
		}
	}
}
