// Package keypool steers the requests of an upstream with several vendor
// keys (upstreams[].keys) to one key each, and keeps each key's state:
// active, cooling down after the vendor limited it (429, 529), or out after
// the vendor refused it (401, 402, 403) until a probe.
//
// The sidecar knows keys by name only: Envoy holds the secrets, injects the
// one of the key whose cluster serves, and retries a key's 429, 529 or
// refusal on the next key of the aggregate the processor chose (its own
// key first). The processor learns what each attempt got from Envoy's
// upstream access log (Failed) and which key served from the host's
// metadata (Served).
//
// A session (the client's own marker, else the account) is hashed to a key
// among those available by weighted rendezvous hashing: a session stays on
// its key while the key is available, and when a key leaves only its
// sessions move. The state is per sidecar: each sidecar learns a key's
// cool-down from its own Envoy's attempts (at most one failed attempt per
// key per cool-down per sidecar, retried by Envoy on another key, and what
// Envoy's access log buffers until it flushes, 50 ms).
package keypool

import (
	"hash/fnv"
	"math"
	"slices"
	"sync"
	"time"
)

// Key states, as /health, the console and gateway_vendor_key_state say.
const (
	Active   = "active"
	Cooling  = "cooling"  // limited by the vendor (429, 529): back after its retry-after or a backoff
	Disabled = "disabled" // refused by the vendor (401, 402, 403): tried again after the probe interval
)

// States are every state a key can take, for the gauge.
var States = []string{Active, Cooling, Disabled}

// Key is one key of a pool as the sidecar sees it: a name, the aggregate
// cluster that tries it first, its weight and the accounts it is pinned to.
type Key struct {
	Name     string
	Cluster  string
	Weight   int
	Accounts []string
}

// Options tune a pool's cool-downs.
type Options struct {
	CoolDown      time.Duration // without a retry-after; doubles per consecutive cool-down
	MaxCoolDown   time.Duration
	ProbeInterval time.Duration
	// Corroborate is how many accounts must draw the same unsure refusal
	// (BlameUnsure) on a key within Window before it is the key's;
	// AccountRefusals how many refusals that blame no key an account may
	// draw within Window before it is refused itself (Refused). Zero: 2,
	// and 1m.
	Corroborate     int
	AccountRefusals int
	Window          time.Duration
	// ShareBelow: while a key's headroom (the lowest remaining fraction
	// of its vendor limits, Capacity) is under it, each account gets at
	// most its share of the pool's recent requests (Share). Zero: never.
	ShareBelow float64
	Now        func() time.Time
	// OnChange, when set, is called (outside the pool's lock) when a key's
	// state changes, with the status that changed it.
	OnChange func(upstream, key, state string, status int, until time.Time)
}

// Pool is one upstream's keys and their states. Safe for concurrent use.
type Pool struct {
	upstream string
	keys     []Key
	o        Options

	mu    sync.Mutex
	state map[string]*keyState
	// unsure holds, per key and status, when each account last drew an
	// unsure refusal; refusals, per account, the times of its refusals
	// that blamed no key; barred, the accounts refused until a time.
	unsure   map[unsureKey]map[string]time.Time
	refusals map[string][]time.Time
	barred   map[string]time.Time
	shares   map[string]*shareCount
	// shareRefused is the last time Share refused a request.
	shareRefused time.Time
}

type unsureKey struct {
	key    string
	status int
}

type keyState struct {
	state   string
	until   time.Time // end of the cool-down, or the next probe
	streak  int       // consecutive cool-downs, for the backoff
	status  int       // the vendor's status that set the state
	changed time.Time
	// headroom is the lowest remaining fraction of the key's vendor
	// limits its last reply reported, at headroomAt.
	headroom   float64
	headroomAt time.Time
}

// New returns the pool of upstream's keys, all active.
func New(upstream string, keys []Key, o Options) *Pool {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Corroborate <= 0 {
		o.Corroborate = 2
	}
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	p := &Pool{upstream: upstream, keys: keys, o: o, state: make(map[string]*keyState, len(keys)),
		unsure: map[unsureKey]map[string]time.Time{}, refusals: map[string][]time.Time{}, barred: map[string]time.Time{}, shares: map[string]*shareCount{}}
	for _, k := range keys {
		p.state[k.Name] = &keyState{state: Active}
	}
	return p
}

// SetOnChange sets Options.OnChange; call it before the pool is used.
func (p *Pool) SetOnChange(f func(upstream, key, state string, status int, until time.Time)) {
	p.o.OnChange = f
}

// Upstream names the pool's upstream.
func (p *Pool) Upstream() string { return p.upstream }

// Keys lists the pool's keys, in configuration order.
func (p *Pool) Keys() []Key { return p.keys }

// Choose returns the key for a request of account in session (the
// session's marker; empty: the account's): among the keys the account may
// use (those pinned to it, else the shared ones), the available one with
// the highest weighted rendezvous score. A cooling key whose time is up is
// available again; a disabled key whose probe is due is lent to this one
// request (its next probe is one interval later). With none available, the
// key whose cool-down ends first: Envoy still retries on the others.
func (p *Pool) Choose(account, session string) Key {
	if session == "" {
		session = account
	}
	pinned := p.pinned(account)
	now := p.o.Now()
	var best, soonest *Key
	bestScore := math.Inf(-1)
	var soonestAt time.Time
	var changed []change
	p.mu.Lock()
	for i := range p.keys {
		k := &p.keys[i]
		if !k.serves(account, pinned) {
			continue
		}
		st := p.state[k.Name]
		if st.state != Active && !now.Before(st.until) {
			if st.state == Cooling {
				st.state, st.changed = Active, now
				changed = append(changed, change{k.Name, Active, 0, time.Time{}})
			} else {
				// A probe: this request tries the key; until it is known
				// good again, the next probe is an interval away.
				st.until = now.Add(p.o.ProbeInterval)
				best, bestScore = k, math.Inf(1)
				continue
			}
		}
		if st.state != Active {
			if soonest == nil || st.until.Before(soonestAt) {
				soonest, soonestAt = k, st.until
			}
			continue
		}
		if s := score(session, k.Name, k.Weight); s > bestScore {
			best, bestScore = k, s
		}
	}
	p.mu.Unlock()
	p.notify(changed)
	switch {
	case best != nil:
		return *best
	case soonest != nil:
		return *soonest
	}
	return p.keys[0] // unreachable with a valid configuration
}

// pinned reports whether some key is pinned to account: then only those
// keys serve it.
func (p *Pool) pinned(account string) bool {
	return slices.ContainsFunc(p.keys, func(k Key) bool { return slices.Contains(k.Accounts, account) })
}

// serves reports whether k may serve account's requests: a key pinned to
// it when it is pinned (to its own keys), else a shared key.
func (k *Key) serves(account string, pinned bool) bool {
	if pinned {
		return slices.Contains(k.Accounts, account)
	}
	return len(k.Accounts) == 0
}

// Forbids reports whether key is one of the pool's keys that may not
// serve account's requests, as Choose would never choose it for them (a key
// pinned to another tenant; a shared key, for an account pinned to its
// own). A request that must go to one key, because it names an object that
// key's vendor account keeps, is refused rather than sent across the pin.
// A key the pool does not have (renamed, or the single key before the
// pool) forbids nothing: such a request goes to the account's own key.
func (p *Pool) Forbids(account, key string) bool {
	i := slices.IndexFunc(p.keys, func(k Key) bool { return k.Name == key })
	return i >= 0 && !p.keys[i].serves(account, p.pinned(account))
}

// score is the weighted rendezvous score of key for session: -w / ln(h)
// with h the session's and key's hash in (0, 1). Every sidecar computes the
// same (FNV-1a, no seed).
func score(session, key string, weight int) float64 {
	h := fnv.New64a()
	h.Write([]byte(session))
	h.Write([]byte{0})
	h.Write([]byte(key))
	u := (float64(h.Sum64()>>11) + 0.5) / (1 << 53)
	return -float64(max(weight, 1)) / math.Log(u)
}

// Failed records an attempt on key, sent at sent (zero: unknown), that got
// status before any byte of a reply: 429, 529 (and 503 with a retry-after)
// cool it down for retryAfter (or the backoff), 401, 402 and 403 take it
// out until the next probe. It reports the key's new state, and whether it
// changed.
func (p *Pool) Failed(key string, status int, retryAfter time.Duration, sent time.Time) (string, bool) {
	switch {
	case status == 401 || status == 402 || status == 403:
		return p.blame(key, Disabled, status, retryAfter, sent)
	case status == 429 || status == 529 || status == 503 && retryAfter > 0:
		return p.blame(key, Cooling, status, retryAfter, sent)
	}
	return p.State(key), false
}

// State is key's state ("" when the pool has no such key).
func (p *Pool) State(key string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.state[key]; ok {
		return st.state
	}
	return ""
}

// blame puts key in state (Cooling or Disabled) for a reply of status.
func (p *Pool) blame(key, state string, status int, retryAfter time.Duration, sent time.Time) (string, bool) {
	now := p.o.Now()
	p.mu.Lock()
	st, ok := p.state[key]
	if !ok {
		p.mu.Unlock()
		return "", false
	}
	var c change
	switch state {
	case Disabled:
		if st.state == Disabled && now.Before(st.until) && st.until.Sub(now) > p.o.ProbeInterval/2 {
			p.mu.Unlock()
			return Disabled, false // already out (a request in flight when it was taken out)
		}
		st.state, st.until, st.status, st.changed = Disabled, now.Add(p.o.ProbeInterval), status, now
		c = change{key, Disabled, status, st.until}
	case Cooling:
		if st.state == Active && !sent.IsZero() && sent.Before(st.changed) {
			// Sent before the key came back: the answer of a burst its
			// last cool-down covered, reported late (Envoy's log is
			// buffered): it must not cool the key again.
			p.mu.Unlock()
			return Active, false
		}
		d := retryAfter
		if d <= 0 {
			n := st.streak
			if st.state == Cooling && now.Before(st.until) && n > 0 {
				n-- // an attempt of this cool-down: its backoff, not the next one's
			}
			d = p.o.CoolDown << min(n, 16)
		}
		d = min(d, p.o.MaxCoolDown)
		until := now.Add(d)
		if st.state == Disabled || st.state == Cooling && !until.After(st.until) {
			p.mu.Unlock()
			return st.state, false
		}
		if st.state == Cooling && now.Before(st.until) {
			// Another attempt of the same cool-down (in flight when it
			// began): the vendor's latest retry-after holds.
			st.until = until
			p.mu.Unlock()
			p.expireAfter(key, d)
			return Cooling, false
		}
		if st.state != Cooling {
			st.streak++
		}
		st.state, st.until, st.status, st.changed = Cooling, until, status, now
		c = change{key, Cooling, status, until}
		p.expireAfter(key, d)
	default:
		p.mu.Unlock()
		return st.state, false
	}
	p.mu.Unlock()
	p.notify([]change{c})
	return c.state, true
}

// expireAfter ends key's cool-down once d has passed, if nothing extended
// it, so that its state (gateway_vendor_key_state) says active again
// without waiting for a request to choose it.
func (p *Pool) expireAfter(key string, d time.Duration) {
	time.AfterFunc(d, func() {
		now := p.o.Now()
		p.mu.Lock()
		st := p.state[key]
		expired := st.state == Cooling && !now.Before(st.until)
		if expired {
			st.state, st.changed = Active, now
		}
		p.mu.Unlock()
		if expired {
			p.notify([]change{{key, Active, 0, time.Time{}}})
		}
	})
}

// Served records a reply served by key: a probed key is back, and a key
// that serves ends its backoff.
func (p *Pool) Served(key string) {
	now := p.o.Now()
	p.mu.Lock()
	st, ok := p.state[key]
	if !ok {
		p.mu.Unlock()
		return
	}
	var changed []change
	if st.state == Disabled {
		st.state, st.changed = Active, now
		changed = append(changed, change{key, Active, 0, time.Time{}})
	}
	if st.state == Active {
		st.streak = 0
	}
	p.mu.Unlock()
	p.notify(changed)
}

// KeyState is a key as /health and the console show it: no secret, which
// the sidecar never has.
type KeyState struct {
	Name     string    `json:"name"`
	State    string    `json:"state"`
	Until    time.Time `json:"until,omitzero"`  // end of the cool-down, or the next probe
	Status   int       `json:"status,omitzero"` // the vendor's status that set the state
	Weight   int       `json:"weight"`
	Pinned   bool      `json:"pinned,omitzero"` // serves only the accounts it is pinned to
	Accounts int       `json:"accounts,omitzero"`
}

// States reports each key's state, in configuration order.
func (p *Pool) States() []KeyState {
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]KeyState, 0, len(p.keys))
	for _, k := range p.keys {
		st := p.state[k.Name]
		ks := KeyState{Name: k.Name, State: st.state, Weight: k.Weight, Pinned: len(k.Accounts) > 0, Accounts: len(k.Accounts)}
		if st.state == Cooling && !now.Before(st.until) {
			ks.State = Active // its time is up; the next request takes it back
		}
		if ks.State != Active {
			ks.Until, ks.Status = st.until.UTC(), st.status
		}
		out = append(out, ks)
	}
	return out
}

type change struct {
	key, state string
	status     int
	until      time.Time
}

func (p *Pool) notify(cs []change) {
	if p.o.OnChange == nil {
		return
	}
	for _, c := range cs {
		p.o.OnChange(p.upstream, c.key, c.state, c.status, c.until)
	}
}
