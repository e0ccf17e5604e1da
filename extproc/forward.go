package extproc

// The client's request headers a vendor hears: the upstream's allow-list
// (upstreams[].forward_headers), applied here so that every rendering
// (bootstrap, Istio, Envoy Gateway) and the WebSocket transport, which
// dials the vendor itself, apply the same one.

import (
	"strings"
)

// forwardHeaders is an upstream's allow-list of client headers.
type forwardHeaders struct {
	names    map[string]bool
	prefixes []string
}

func newForwardHeaders(list []string) forwardHeaders {
	f := forwardHeaders{names: make(map[string]bool, len(list))}
	for _, n := range list {
		if p, ok := strings.CutSuffix(n, "*"); ok {
			f.prefixes = append(f.prefixes, p)
			continue
		}
		f.names[n] = true
	}
	return f
}

// allows reports whether the vendor hears the client's header name (lower
// case).
func (f forwardHeaders) allows(name string) bool {
	if f.names[name] {
		return true
	}
	for _, p := range f.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// transportHeader reports whether a header is the request's framing or
// Envoy's own, which the sidecar leaves to Envoy: pseudo-headers, the
// host, the body's length and coding, the request id Envoy's access log
// names, Envoy's x-envoy-* and the x-forwarded-* headers.
func transportHeader(name string) bool {
	// Envoy's own and the forwarding headers are Envoy's to keep or drop
	// (the routes drop the client's address): removing them here, after
	// Envoy has set them, leaves a pool's request without a route when
	// the route is matched again.
	if strings.HasPrefix(name, ":") || strings.HasPrefix(name, "x-envoy-") || strings.HasPrefix(name, "x-forwarded-") {
		return true
	}
	switch name {
	case "host", "content-length", "transfer-encoding", "te", "connection", "upgrade", "x-request-id":
		return true
	}
	return false
}

// unforwarded lists the request's headers the vendor must not hear: every
// one neither allowed nor transport. The credential and the gateway's own
// headers are removed by credentialMutation whatever the list says.
func (f forwardHeaders) unforwarded(names headerNames, out []string) []string {
	for i := range names.Len() {
		k := names.Name(i)
		if transportHeader(k) || f.allows(k) || strings.HasPrefix(k, internalHeaderPrefix) {
			continue
		}
		switch k {
		case "x-api-key", "authorization", "accept-encoding":
			continue // removed already
		}
		out = append(out, k)
	}
	return out
}
