package keypool

// Fair share of a pool's vendor capacity: while the vendor says a key's
// remaining requests or tokens are low, no account may take more than its
// share of the pool's recent requests.

import (
	"strconv"
	"strings"
	"time"
)

// CapacityHeaders pair each vendor's remaining header with its limit.
var CapacityHeaders = [][2]string{
	{"x-ratelimit-remaining-requests", "x-ratelimit-limit-requests"},
	{"x-ratelimit-remaining-tokens", "x-ratelimit-limit-tokens"},
	{"anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-limit"},
	{"anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-limit"},
	{"anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-limit"},
	{"anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-limit"},
}

// HeadroomNamespace and HeadroomField are where Envoy's listener filter
// (envoy/blame.go, headroomLua) puts a reply's headroom, the lowest
// remaining fraction of CapacityHeaders, in the request's dynamic
// metadata; the ext_proc filter forwards the namespace to the processor.
const (
	HeadroomNamespace = "gateway.headroom"
	HeadroomField     = "headroom"
)

// ShareWindow is the window of recent requests the shares are of, counted
// in one-second buckets.
const ShareWindow = shareSeconds * time.Second

const shareSeconds = 10

// shareCount is one account's requests in the window: what it sent
// (sent, its demand) and what was admitted.
type shareCount struct {
	sec      [shareSeconds]int64 // the second each bucket counts
	sent     [shareSeconds]int
	admitted [shareSeconds]int
}

func (c *shareCount) add(now int64, admitted bool) {
	i := now % shareSeconds
	if c.sec[i] != now {
		c.sec[i], c.sent[i], c.admitted[i] = now, 0, 0
	}
	c.sent[i]++
	if admitted {
		c.admitted[i]++
	}
}

// now is what was admitted in second now.
func (c *shareCount) now(now int64) int {
	if i := now % shareSeconds; c.sec[i] == now {
		return c.admitted[i]
	}
	return 0
}

// totals are the window's sent and admitted requests.
func (c *shareCount) totals(now int64) (sent, admitted int) {
	for i := range c.sec {
		if now-c.sec[i] < shareSeconds {
			sent += c.sent[i]
			admitted += c.admitted[i]
		}
	}
	return sent, admitted
}

// Capacity takes a reply's rate-limit headers (header reads them) from
// key: the lowest remaining fraction of its limits is the key's headroom.
func (p *Pool) Capacity(key string, header func(string) string) {
	low := 2.0
	for _, h := range CapacityHeaders {
		rem, err1 := strconv.ParseFloat(strings.TrimSpace(header(h[0])), 64)
		lim, err2 := strconv.ParseFloat(strings.TrimSpace(header(h[1])), 64)
		if err1 != nil || err2 != nil || lim <= 0 {
			continue
		}
		low = min(low, rem/lim)
	}
	if low > 1 {
		return // no headers
	}
	p.Headroom(key, low)
}

// Headroom records key's headroom: the lowest remaining fraction of its
// vendor limits, as a reply said (Capacity, or Envoy's listener filter).
func (p *Pool) Headroom(key string, low float64) {
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.state[key]; ok {
		st.headroom, st.headroomAt = low, now
	}
}

// Share admits a request of account, or refuses it: while the vendor's
// capacity is low (a key's headroom, reported within the window, under
// ShareBelow), the account that sent the most requests in the last
// ShareWindow is held to an equal share of the requests admitted, among
// the accounts that sent any, spread evenly over the window's seconds. It
// reports what the account was admitted,
// and its share.
func (p *Pool) Share(account string) (ok bool, used, share int) {
	now := p.o.Now()
	sec := now.Unix()
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.shares[account]
	if c == nil {
		c = &shareCount{}
		p.shares[account] = c
	}
	ok = true
	if p.low(now) {
		sent, total, active, heaviest := 0, 0, 0, 0
		for a, ac := range p.shares {
			s, n := ac.totals(sec)
			if s == 0 && a != account {
				delete(p.shares, a)
				continue
			}
			total += n
			active++
			heaviest = max(heaviest, s)
		}
		sent, used = c.totals(sec)
		if active > 1 {
			// Its share, and no more of it in one second than its even
			// spread: a burst when old seconds leave the window would
			// spend the keys again.
			share = (total + active - 1) / active
			ok = sent < heaviest || used < share && c.now(sec) < (share+shareSeconds-1)/shareSeconds
		}
	}
	c.add(sec, ok)
	if !ok {
		p.shareRefused = now
	}
	if len(p.shares) > 4096 {
		for a, ac := range p.shares {
			if s, _ := ac.totals(sec); s == 0 {
				delete(p.shares, a)
			}
		}
	}
	return ok, used, share
}

// low reports whether a key's headroom, reported within the window, is
// under ShareBelow, or the window's shares refused a request: demand is
// still above what the vendor served, and letting the heaviest loose
// again would spend the keys again. Called with p.mu held.
func (p *Pool) low(now time.Time) bool {
	for _, st := range p.state {
		if !st.headroomAt.IsZero() && now.Sub(st.headroomAt) < ShareWindow && st.headroom < p.o.ShareBelow {
			return true
		}
	}
	return now.Sub(p.shareRefused) < ShareWindow
}
