package extproc

// Refusals remembered for a moment: a key or account that a limit refused
// whatever the request (its request rate or tokens per minute spent) is
// refused again at the next request's headers, before Envoy buffers its
// body and the processor parses it, with the same answer the body phase
// would give. Nothing is asked of Redis: the memory is this sidecar's, and
// lasts config.RefusalMemory at most (a raised limit or a top-up is seen
// that much later), never past the refusal's own retry-after.

import (
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
)

// rememberedOutcomes are the refusals that can hold whatever the next
// request's body (rememberFor says which do). A concurrency refusal is
// not among them: a slot frees whenever a request ends, and a key may let
// requests wait for one. Nor are budgets and the balance: their refusal
// names what the request could cost, which only its body tells.
var rememberedOutcomes = []account.Outcome{account.RateLimited, account.TokenLimited}

// rememberFor is how long a refusal holds for any request, 0 when it
// depends on the request refused.
func rememberFor(d account.Decision) time.Duration {
	switch d.Outcome {
	case account.RateLimited:
		// Requests are counted, whatever their size: no slot frees
		// before the retry-after.
		return min(d.RetryAfter, config.RefusalMemory)
	case account.TokenLimited:
		if d.Used >= d.Limit && d.RetryAfter > 0 {
			return min(d.RetryAfter, config.RefusalMemory)
		}
	}
	return 0
}

// maxRemembered bounds the memory; past it, expired refusals are dropped
// first, and then the memory starts again empty.
const maxRemembered = 1 << 16

type refusalKey struct {
	level account.Level
	id    string // the account's or the key's id; a project's is "ACCOUNT/PROJECT"
}

type remembered struct {
	d     account.Decision
	at    time.Time
	until time.Time
}

// refusalMemory is the refusals of the last moment, by account and key.
type refusalMemory struct {
	mu sync.Mutex
	m  map[refusalKey]remembered
}

func newRefusalMemory() *refusalMemory {
	return &refusalMemory{m: map[refusalKey]remembered{}}
}

// remember records a refusal of key's account or key at now, if it holds
// for any request.
func (r *refusalMemory) remember(key account.Key, d account.Decision, now time.Time) {
	ttl := rememberFor(d)
	if ttl <= 0 {
		return
	}
	k := refusalKey{d.Level, key.AccountID}
	switch d.Level {
	case account.KeyLevel:
		k.id = key.ID
	case account.ProjectLevel:
		k.id = key.AccountID + "/" + key.Project()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.m) >= maxRemembered {
		for k, v := range r.m {
			if !now.Before(v.until) {
				delete(r.m, k)
			}
		}
		if len(r.m) >= maxRemembered {
			clear(r.m)
		}
	}
	r.m[k] = remembered{d: d, at: now, until: now.Add(ttl)}
}

// recall returns the refusal that holds for key at now, its retry-after
// counted down to now.
func (r *refusalMemory) recall(key account.Key, now time.Time) (account.Decision, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range [3]refusalKey{{account.KeyLevel, key.ID}, {account.ProjectLevel, key.AccountID + "/" + key.Project()}, {account.AccountLevel, key.AccountID}} {
		v, ok := r.m[k]
		if !ok {
			continue
		}
		if !now.Before(v.until) {
			delete(r.m, k)
			continue
		}
		d := v.d
		if d.RetryAfter > 0 {
			d.RetryAfter = max(d.RetryAfter-now.Sub(v.at), time.Millisecond)
		}
		return d, true
	}
	return account.Decision{}, false
}

// refusedAtHeaders answers a metered request whose key or account a limit
// refused a moment ago, whatever the request: the refusal the body phase
// would give (status, format, retry-after, x-should-retry), without the
// amounts only the body tells (what this request could cost). nil: read
// the body.
func (x *exchange) refusedAtHeaders() *Refusal {
	d, ok := x.s.refusals.recall(x.key, x.s.now())
	if !ok {
		return nil
	}
	return x.refusedEarly(d)
}

// unknownAmount is a request's hold or token bound at its headers: its
// refusal's message leaves it out.
const unknownAmount = -1
