package messages

import (
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/internal/usage"
)

// The usage object of a message, as paths below "usage":
//
//	input_tokens                              uncached input
//	output_tokens                             output, thinking included
//	cache_read_input_tokens                   input read from the cache
//	cache_creation_input_tokens               input written to the cache
//	cache_creation.ephemeral_5m_input_tokens  ... of it, for 5 minutes
//	cache_creation.ephemeral_1h_input_tokens  ... of it, for 1 hour
//	server_tool_use.web_search_requests       server-side web searches
//	service_tier                              the tier that served the reply
//
// input_tokens already excludes cache reads and writes.
const (
	uInput = iota
	uOutput
	uCacheRead
	uCacheWrite
	uCache5m
	uCache1h
	uWebSearch
	uTier
	uFields
)

var usagePaths = [uFields]string{
	"input_tokens",
	"output_tokens",
	"cache_read_input_tokens",
	"cache_creation_input_tokens",
	"cache_creation.ephemeral_5m_input_tokens",
	"cache_creation.ephemeral_1h_input_tokens",
	"server_tool_use.web_search_requests",
	"service_tier",
}

// usagePathsUnder returns the usage paths below prefix ("usage.").
func usagePathsUnder(prefix string) []string {
	out := make([]string, uFields)
	for i, p := range usagePaths {
		out[i] = prefix + p
	}
	return out
}

// vendorUsage accumulates the usage figures of one reply.
type vendorUsage struct {
	n       [uTier]int64
	seen    [uTier]bool
	tier    string
	hasTier bool
}

// set records the value of field i, ignoring values that are not
// non-negative integers, and zeros too when nonZero is set (a later event
// repeating a figure only replaces it with a real one).
func (u *vendorUsage) set(i int, v jsonscan.Value, nonZero bool) bool {
	if i == uTier {
		if v.Kind == jsonscan.String && !u.hasTier {
			u.tier, u.hasTier = v.Text(), true
		}
		return false
	}
	n, ok := v.Int()
	if !ok || n < 0 || nonZero && n == 0 {
		return false
	}
	u.n[i], u.seen[i] = n, true
	return true
}

// report turns the vendor's figures into usage. Without the 5m/1h
// breakdown, every cache write is a 5-minute one (the vendor's default).
func (u *vendorUsage) report() usage.Report {
	r := usage.Report{
		Usage: usage.Usage{
			Input:       u.n[uInput],
			Output:      u.n[uOutput],
			CacheRead:   u.n[uCacheRead],
			WebSearches: u.n[uWebSearch],
		},
		ServiceTier: u.tier,
	}
	if u.seen[uCache5m] || u.seen[uCache1h] {
		r.CacheWrite5m, r.CacheWrite1h = u.n[uCache5m], u.n[uCache1h]
	} else {
		r.CacheWrite5m = u.n[uCacheWrite]
	}
	return r
}
