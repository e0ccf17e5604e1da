package extproc

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/internal/pricing"
)

// Upstream is one vendor, reached under /NAME/, /NAME/..., as the processor sees it.
type Upstream struct {
	Name string
	// Format is the vendor API's own format: it writes the gateway's
	// errors on every path of the upstream.
	Format format.Format
	// Prices finds a model's prices; its contents are replaced on reload.
	Prices *pricing.Table
	// Operations are the metered operations served, each with its routes.
	Operations []*operation.Operation
	// freePaths are "METHOD /path" forwarded with a valid model key and not
	// billed (model listings, token counting); freePrefixes hold those
	// written with a trailing "*".
	freePaths    map[string]bool
	freePrefixes []string

	prefix string // "/NAME/"
	// firstByte, prefill and generate bound the wait for a reply's headers
	// (firstByteBound); MaxDuration caps it (limits.max_request_duration,
	// set by the caller; 0: no cap).
	firstByte         time.Duration
	prefill, generate int64
	MaxDuration       time.Duration
	// NoPerTryHeader: Envoy does not take the per-try timeout the
	// processor would set (a reduced contract); none is sent.
	NoPerTryHeader bool
	// regional maps an endpoint ("primary", "reserve") to the regional
	// processing region it serves, for the catalogue's uplift.
	regional map[string]string
	// addrs tells the serving endpoint from the address Envoy connected
	// to, where no host metadata says it.
	addrs *endpointAddrs
	// query lists, by path after the prefix, the query parameters the
	// vendor's API defines there; every other parameter is dropped.
	query map[string][]string
	// Pool steers each request to one of the upstream's vendor keys; nil
	// with one key, whose name is defaultKey.
	Pool       *keypool.Pool
	defaultKey string
	// forward is the client headers the vendor hears.
	forward forwardHeaders
}

// NewUpstream builds the processor's view of one configured upstream. The
// vendor's credential is not part of it: Envoy injects it.
// prices is the upstream's price table; ops are the operations the gateway
// knows, of which the upstream serves those it lists.
func NewUpstream(u config.Upstream, prices *pricing.Table, ops operation.Registry) (*Upstream, error) {
	if prices == nil {
		return nil, fmt.Errorf("upstream %s: no price table", u.Name)
	}
	r := &Upstream{
		Name:      u.Name,
		Prices:    prices,
		freePaths: make(map[string]bool),
		prefix:    "/" + u.Name + "/",
	}
	vendor, ok := ops.Lookup(u.Format)
	if !ok || vendor.API != u.Format {
		return nil, fmt.Errorf("upstream %s: unknown format %q", u.Name, u.Format)
	}
	r.Format = vendor.Format
	for j, name := range u.OperationNames() {
		op, ok := ops.Lookup(name)
		if !ok || op.API != u.Format || slices.Index(u.OperationNames(), name) != j {
			return nil, fmt.Errorf("upstreams %s: operations[%d]: %q is not an operation of format %s (%s), or is listed twice",
				u.Name, j, name, u.Format, strings.Join(ops.Names(u.Format), ", "))
		}
		r.Operations = append(r.Operations, op)
	}
	r.query = vendor.FreeQuery
	r.forward = newForwardHeaders(u.ForwardHeaders)
	r.firstByte, r.prefill, r.generate = u.Failover.FirstByteTimeout.D(), u.Failover.PrefillTokensPerSecond, u.Failover.GenerationTokensPerSecond
	r.regional = map[string]string{"primary": u.Primary.RegionalProcessing, "reserve": u.Reserve.RegionalProcessing}
	r.addrs = newEndpointAddrs(u)
	r.Pool = newPool(u)
	if !u.Pooled() {
		r.defaultKey = u.Keys()[0].Name
	}
	for _, fp := range u.FreePaths {
		method, path, err := config.ParseFreePath(fp)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
		}
		if prefix, ok := strings.CutSuffix(path, "*"); ok {
			r.freePrefixes = append(r.freePrefixes, method+" "+prefix)
			continue
		}
		r.freePaths[method+" "+path] = true
	}
	return r, nil
}

// ServingOperations names the operations of configured upstream u that
// serve model m, of those ops registers: what `gateway models` lists.
func ServingOperations(u config.Upstream, prices *pricing.Table, ops operation.Registry, m *pricing.Model) []string {
	up, err := NewUpstream(u, prices, ops)
	if err != nil {
		return nil // a config that loaded has known operations
	}
	var out []string
	for _, op := range up.Serving(m) {
		out = append(out, op.Name)
	}
	return out
}

// polled is the operation whose background requests the upstream's
// parked responses are; nil when none (or no upstream).
func (r *Upstream) polled() *operation.Operation {
	if r == nil {
		return nil
	}
	for _, op := range r.Operations {
		if op.Poll != "" {
			return op
		}
	}
	return nil
}

// isFree reports whether "METHOD /path" is a free read-only vendor path.
func (r *Upstream) isFree(methodPath string) bool {
	if r.freePaths[methodPath] {
		return true
	}
	for _, p := range r.freePrefixes {
		if strings.HasPrefix(methodPath, p) && !strings.Contains(methodPath[len(p):], "/") {
			return true
		}
	}
	return false
}

// Serving returns the operations that serve a model: those whose modes and
// path its catalogue entry names (pricing.Model.Serves).
func (r *Upstream) Serving(m *pricing.Model) []*operation.Operation {
	var out []*operation.Operation
	for _, op := range r.Operations {
		if m.Serves(op.Modes, op.Path()) {
			out = append(out, op)
		}
	}
	return out
}

// forwardQuery returns the part of a raw query string that the vendor's API
// defines at sub (the path after the prefix), in the client's order: the
// parameters of vendor path vp, or when it is nil those of a free path.
func (r *Upstream) forwardQuery(vp *operation.Path, sub, rawQuery string) string {
	allowed, ok := r.query[sub]
	if !ok {
		if i := strings.LastIndexByte(sub, '/'); i > 0 {
			allowed = r.query[sub[:i]+"/*"]
		}
	}
	if vp != nil {
		allowed = vp.Query
	}
	if len(allowed) == 0 || rawQuery == "" {
		return ""
	}
	var kept []string
	// ";" separates parameters as "&" does for some servers (and Go's
	// net/url before 1.17): "beta=true;stream=true" is two, and only the
	// allowed one goes on.
	for _, kv := range strings.FieldsFunc(rawQuery, func(r rune) bool { return r == '&' || r == ';' }) {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(allowed, name) {
			kept = append(kept, kv)
		}
	}
	return strings.Join(kept, "&")
}

// firstByteBound is how long one attempt of a request may wait for its
// reply's headers: the first-byte timeout, plus its input bound at the
// prefill rate, plus, when not streaming (the headers come with the whole
// reply), its output bound at the generation rate; at most MaxDuration.
// Zero when the upstream sets no first-byte timeout.
func (r *Upstream) firstByteBound(stream bool, input, output int64) time.Duration {
	if r.firstByte <= 0 {
		return 0
	}
	d := r.firstByte
	if r.prefill > 0 {
		d += time.Duration(float64(input) / float64(r.prefill) * float64(time.Second))
	}
	if !stream && r.generate > 0 {
		d += time.Duration(float64(output) / float64(r.generate) * float64(time.Second))
	}
	if r.MaxDuration > 0 && (d > r.MaxDuration || d < 0) {
		d = r.MaxDuration
	}
	return d
}
