package extproc

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/config"
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
	Operations []*Operation
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
	// regional maps an endpoint ("primary", "reserve") to the regional
	// processing region it serves, for the catalogue's uplift.
	regional map[string]string
	// query lists, by path after the prefix, the query parameters the
	// vendor's API defines there; every other parameter is dropped.
	query map[string][]string
}

// Query parameters the vendors' APIs define, by wire format and path. The
// messages API takes "beta" (sent by the SDK's beta namespace) and pages its
// model list; chat completions defines none on these paths.
var vendorQuery = map[string]map[string][]string{
	config.FormatMessages: {
		"/v1/messages":              {"beta"},
		"/v1/messages/count_tokens": {"beta"},
		"/v1/models":                {"beta", "limit", "after_id", "before_id"},
		"/v1/models/*":              {"beta"},
	},
	config.FormatChatCompletions: {},
}

// NewUpstream builds the processor's view of one configured upstream. The
// vendor's credential is not part of it: Envoy injects it.
// prices is the upstream's price table.
func NewUpstream(u config.Upstream, prices *pricing.Table) (*Upstream, error) {
	if prices == nil {
		return nil, fmt.Errorf("upstream %s: no price table", u.Name)
	}
	r := &Upstream{
		Name:      u.Name,
		Prices:    prices,
		freePaths: make(map[string]bool),
		prefix:    "/" + u.Name + "/",
	}
	vendor, ok := operations[u.Format]
	if !ok {
		return nil, fmt.Errorf("upstream %s: unknown format %q", u.Name, u.Format)
	}
	r.Format = vendor.Format
	for _, name := range u.OperationNames() {
		op, ok := operations[name]
		if !ok {
			return nil, fmt.Errorf("upstream %s: unknown operation %q", u.Name, name)
		}
		op.Name = name
		r.Operations = append(r.Operations, &op)
	}
	r.query = vendorQuery[u.Format]
	r.firstByte, r.prefill, r.generate = u.Failover.FirstByteTimeout.D(), u.Failover.PrefillTokensPerSecond, u.Failover.GenerationTokensPerSecond
	r.regional = map[string]string{"primary": u.Primary.RegionalProcessing, "reserve": u.Reserve.RegionalProcessing}
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
func (r *Upstream) Serving(m *pricing.Model) []*Operation {
	var out []*Operation
	for _, op := range r.Operations {
		if m.Serves(op.Modes, op.Path()) {
			out = append(out, op)
		}
	}
	return out
}

// forwardQuery returns the part of a raw query string that the vendor's API
// defines at sub (the path after the prefix), in the client's order: the
// parameters of route rt, or when it is nil those of a free path.
func (r *Upstream) forwardQuery(rt *Route, sub, rawQuery string) string {
	allowed, ok := r.query[sub]
	if !ok {
		if i := strings.LastIndexByte(sub, '/'); i > 0 {
			allowed = r.query[sub[:i]+"/*"]
		}
	}
	if rt != nil {
		allowed = rt.Query
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
