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

// ShareWindow is the window of recent requests the shares are of, counted
// in one-second buckets.
const ShareWindow = shareSeconds * time.Second

const shareSeconds = 10

type shareCount struct {
	sec [shareSeconds]int64 // the second each bucket counts
	n   [shareSeconds]int
}

func (c *shareCount) add(now int64) {
	i := now % shareSeconds
	if c.sec[i] != now {
		c.sec[i], c.n[i] = now, 0
	}
	c.n[i]++
}

func (c *shareCount) total(now int64) int {
	t := 0
	for i := range c.sec {
		if now-c.sec[i] < shareSeconds {
			t += c.n[i]
		}
	}
	return t
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
	now := p.o.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.state[key]; ok {
		st.headroom, st.headroomAt = low, now
	}
}

// Share admits a request of account, or refuses it because the vendor's
// capacity is low (a key's headroom, seen within the window, under
// ShareBelow) and the account already sent more than its share of the
// pool's requests of the last ShareWindow (an equal share of the accounts
// that sent any): what it sent, and its share.
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
	low := false
	for _, st := range p.state {
		if !st.headroomAt.IsZero() && now.Sub(st.headroomAt) < shareSeconds*time.Second && st.headroom < p.o.ShareBelow {
			low = true
		}
	}
	if low {
		total, active := 0, 0
		for a, ac := range p.shares {
			n := ac.total(sec)
			if n == 0 && a != account {
				delete(p.shares, a)
				continue
			}
			total += n
			active++
		}
		used = c.total(sec)
		if active > 1 {
			share = (total + active - 1) / active
			if used >= share {
				return false, used, share
			}
		}
	}
	c.add(sec)
	if len(p.shares) > 4096 {
		for a, ac := range p.shares {
			if ac.total(sec) == 0 {
				delete(p.shares, a)
			}
		}
	}
	return true, used, share
}
