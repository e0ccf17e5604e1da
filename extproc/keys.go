package extproc

// Vendor key pools: the key each request is steered to, and the key that served.

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/keypool"
)

// sessionHeader is a client's own session marker (Claude Code sends it): a
// conversation whose requests should share a vendor key, and so its prompt
// cache.
const sessionHeader = "x-claude-code-session-id"

// maxSessionBytes bounds the part of a session marker that is hashed.
const maxSessionBytes = 256

// bound cuts a session marker to the part that is hashed.
func bound(s string) string {
	if len(s) > maxSessionBytes {
		return s[:maxSessionBytes]
	}
	return s
}

// newPool builds an upstream's key pool; nil without one.
func newPool(u config.Upstream) *keypool.Pool {
	if !u.Pooled() {
		return nil
	}
	keys := make([]keypool.Key, 0, len(u.VendorKeys))
	for _, k := range u.VendorKeys {
		keys = append(keys, keypool.Key{Name: k.Name, Cluster: config.KeyCluster(u.EnvoyCluster, k.Name), Weight: k.Weight, Accounts: k.Accounts})
	}
	return keypool.New(u.Name, keys, keypool.Options{
		CoolDown: u.Pool.CoolDown.D(), MaxCoolDown: u.Pool.MaxCoolDown.D(), ProbeInterval: u.Pool.ProbeInterval.D(),
		Corroborate: u.Pool.CorroborateAccounts, AccountRefusals: u.Pool.AccountRefusals, Window: u.Pool.CorroborateWindow.D(),
		ShareBelow: u.Pool.ShareBelow,
	})
}

// steer chooses the request's key for session (empty: the account's) and
// names its aggregate cluster in the request's headers; it reports whether
// the choice changed (Envoy must then match the route again).
func (x *exchange) steer(session string, m *onward) bool {
	p := x.upstream.Pool
	if p == nil {
		return false
	}
	k := p.Choose(x.key.AccountID, session)
	return x.steerTo(k.Name, k.Cluster, m)
}

// steerTo names the aggregate cluster that tries key first in the
// request's headers, in place of any named before; it reports whether the
// choice changed.
func (x *exchange) steerTo(key, cluster string, m *onward) bool {
	if key == x.steered || cluster == "" {
		return false
	}
	x.steered = key
	m.setHeader(config.KeyClusterHeader, cluster)
	return true
}

// steerToCreator moves a request naming stored objects to the vendor key
// that created them (Owners records it with the owner): the vendor keeps
// an object for its key's vendor account only, whatever the session.
func (x *exchange) steerToCreator(m *onward) bool {
	if x.upstream.Pool == nil || x.creator == "" {
		return false
	}
	return x.steerTo(x.creator, keyClusterOf(x.upstream, x.creator), m)
}

// keyClusterOf names the aggregate of u's pool that tries key first; ""
// when u has no pool or no such key.
func keyClusterOf(u *Upstream, key string) string {
	if u == nil || u.Pool == nil {
		return ""
	}
	for _, k := range u.Pool.Keys() {
		if k.Name == key {
			return k.Cluster
		}
	}
	return ""
}

// steerByBody moves a request to the key that created the stored
// objects its body names (previous_response_id), else to the key of the
// session its body names (format.Request.Session, read with the rest of
// the body) when its headers named none.
func (x *exchange) steerByBody(r *onward) {
	changed := false
	switch {
	case x.creator != "":
		changed = x.steerToCreator(r)
	case !x.headerSession && x.req.Session != "":
		changed = x.steer(bound(x.req.Session), r)
	}
	if changed {
		r.reroute = true
	}
}

// metadataString returns the string value of field in the gateway's host
// metadata as Envoy sends it (protobuf text: ... key: "FIELD" value {
// string_value: "VALUE" } ...), "" when absent.
func metadataString(md, field string) string {
	quoted := `"` + field + `"`
	for i := 0; ; {
		j := strings.Index(md[i:], quoted)
		if j < 0 {
			return ""
		}
		i += j + len(quoted)
		rest := strings.TrimLeft(md[i:], " \t\n")
		// A field name is followed by its value; a value by "}" or
		// another field.
		if !strings.HasPrefix(rest, "value") {
			continue
		}
		k := strings.Index(rest, "string_value:")
		if k < 0 {
			return ""
		}
		rest = strings.TrimLeft(rest[k+len("string_value:"):], " \t\n")
		if !strings.HasPrefix(rest, `"`) {
			return ""
		}
		end := strings.IndexByte(rest[1:], '"')
		if end < 0 {
			return ""
		}
		return rest[1 : 1+end]
	}
}

// servedBy records the key that served the reply (the serving host's
// metadata) and what its status says of the key.
func (x *exchange) servedBy(key string) {
	if key == "" {
		key = x.upstream.defaultKey
	}
	x.vendorKey = key
	if key != "" {
		x.s.metrics.vendorKeyRequests.WithLabelValues(x.upstream.Name, key).Inc()
	}
	p := x.upstream.Pool
	if p == nil || key == "" {
		return
	}
	// What a failed attempt says of its key comes from Envoy's upstream
	// log (KeyAttempt), the last attempt's too, with the vendor's
	// retry-after.
	if x.status >= 200 && x.status < 300 {
		p.Served(key)
	}
}

// pooled refuses a request of an account that keeps drawing refusals on
// the pool's healthy keys (keypool.Pool.Barred), and otherwise remembers
// whose request Envoy's id names, for the upstream log of its attempts.
func (x *exchange) pooled(requestID string) *Refusal {
	p := x.upstream.Pool
	if p == nil {
		return nil
	}
	if until, ok := p.Barred(x.key.AccountID); ok {
		x.s.metrics.vendorKeyBarred.WithLabelValues(x.upstream.Name).Inc()
		resp := x.reject(format.RateLimited, "this account's requests keep being refused by "+x.upstream.Name+
			" on keys that serve other accounts; its requests to "+x.upstream.Name+" are refused until "+until.UTC().Format(time.RFC3339), until.Sub(x.s.now()))
		resp.Header.Set("x-should-retry", "false")
		return resp
	}
	if ok, used, share := p.Share(x.key.AccountID); !ok {
		x.s.metrics.poolShareRefusals.WithLabelValues(x.upstream.Name).Inc()
		resp := x.reject(format.RateLimited, fmt.Sprintf("%s's vendor capacity is running low and is shared fairly: this account sent %d of its requests in the last %s, its share is %d; retry shortly",
			x.upstream.Name, used, keypool.ShareWindow, share), time.Second)
		resp.Header.Set("x-should-retry", "true")
		return resp
	}
	x.s.attempts.put(requestID, x.key.AccountID)
	return nil
}

// byRequest remembers one name (an account, a priced model) of each of
// the last requests by Envoy's request id: Envoy's upstream logs name the
// request, not its account or model. A fixed ring: the oldest is forgotten
// first.
type byRequest struct {
	mu   sync.Mutex
	ids  map[string]string
	ring []string
	next int
}

// recentRequests is how many requests' names a sidecar remembers: far
// more than are in flight, and their log entries arrive within Envoy's
// flush interval of their end.
const recentRequests = 1 << 14

func (r *byRequest) put(id, name string) {
	if id == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ids == nil {
		r.ids, r.ring = make(map[string]string, recentRequests), make([]string, recentRequests)
	}
	if old := r.ring[r.next]; old != "" {
		delete(r.ids, old)
	}
	r.ring[r.next] = id
	r.next = (r.next + 1) % len(r.ring)
	r.ids[id] = name
}

func (r *byRequest) get(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[id]
}

// KeyAttempt takes one refused attempt Envoy made on a pooled upstream's key
// (its upstream access log): the request's id, the vendor's status and the
// reply's headers as header reads them (the evidence keypool.Judge weighs).
func (s *Server) KeyAttempt(upstream, key, requestID string, status int, header func(string) string, sent time.Time) {
	if u := s.upstreamNamed(upstream); u != nil && u.Pool != nil {
		s.judgeAttempt(u, key, s.attempts.get(requestID), status, header, sent)
	}
}

// judgeAttempt takes one refusal of account's request (empty: unknown)
// on u's key by the blame table, whichever way to the vendor it came.
func (s *Server) judgeAttempt(u *Upstream, key, account string, status int, header func(string) string, sent time.Time) {
	rule, ok := keypool.Judge(status, header)
	if !ok {
		return
	}
	upstream := u.Name
	if status == 429 || status == 529 {
		s.metrics.vendorKeyLimited.WithLabelValues(upstream, key).Inc()
	}
	s.metrics.vendorKeyRefusals.WithLabelValues(upstream, rule.Blame).Inc()
	u.Pool.Capacity(key, header)
	v := u.Pool.Attempt(key, account, rule, retryAfter(header("retry-after"), s.now()), sent)
	if rule.Blame != keypool.BlameKey {
		s.log.Info("vendor refusal not charged to the key", "upstream", upstream, "vendor_key", key, "status", status,
			"rule", rule.Name, "blame", rule.Blame, "account_id", account, "key_state", v.State)
	}
	if v.Barred {
		s.log.Warn("account refused on the pool: its requests keep drawing refusals on healthy keys", "upstream", upstream, "account_id", account)
	}
}

// keyChanged follows a key's state into the metrics and, when the vendor
// refused it, the alert.
func (s *Server) keyChanged(upstream, key, state string, status int, until time.Time) {
	for _, st := range keypool.States {
		v := 0.0
		if st == state {
			v = 1
		}
		s.metrics.vendorKeyState.WithLabelValues(upstream, key, st).Set(v)
	}
	switch state {
	case keypool.Cooling:
		s.metrics.vendorKeyCooldowns.WithLabelValues(upstream, key).Inc()
		s.log.Warn("vendor key cooling down", "upstream", upstream, "vendor_key", key, "status", status, "until", until)
		if s.onKeyLimited != nil {
			s.onKeyLimited(upstream, key, status, until)
		}
	case keypool.Disabled:
		s.log.Error("vendor key refused by the vendor: out until its probe", "upstream", upstream, "vendor_key", key, "status", status, "probe_at", until)
		if s.onKeyRefused != nil {
			s.onKeyRefused(upstream, key, status)
		}
	case keypool.Active:
		s.log.Info("vendor key active again", "upstream", upstream, "vendor_key", key)
	}
}

// VendorKeys reports each pooled upstream's keys and their states, for
// /health and the console.
func (s *Server) VendorKeys() map[string][]keypool.KeyState {
	out := map[string][]keypool.KeyState{}
	for _, u := range s.upstreams {
		if u.Pool != nil {
			out[u.Name] = u.Pool.States()
		}
	}
	return out
}
