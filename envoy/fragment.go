package envoy

import (
	"bytes"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/internal/config"
)

// A fragment is the part of the bootstrap an operator merges into an Envoy
// of their own (docs/envoy.md): cut from the same rendering, so that the
// two never disagree. Each piece is a top-level key, with a comment saying
// where it goes.
var fragmentPieces = []struct {
	key, comment string
	pick         func(b *bootstrap) *yaml.Node
}{
	{"secrets", "Into static_resources.secrets: the vendor keys, read from Envoy's environment.",
		func(b *bootstrap) *yaml.Node { return b.get(b.root, "static_resources", "secrets") }},
	{"listener", "Onto the listener your clients reach: what Envoy reads of a client at once, and so what\n" +
		"a request refused on its headers costs; the routes below buffer bodies up to limits.max_request_bytes.",
		func(b *bootstrap) *yaml.Node { return b.pickKeys(b.public, "per_connection_buffer_limit_bytes") }},
	{"http_connection_manager", "Onto that listener's HTTP connection manager: streams run for minutes (no request\n" +
		"timeout, an idle one), and Envoy's own replies read as the vendor's errors (local_reply_config).",
		func(b *bootstrap) *yaml.Node {
			m := b.pickKeys(b.hcm, "request_timeout", "stream_idle_timeout", "local_reply_config")
			b.onlyRouteMappers(b.get(m, "local_reply_config", "mappers"))
			return m
		}},
	{"http_filter", "Into that connection manager's http_filters, before envoy.filters.http.router: the sidecar.\n" +
		"Off by default, so that your other routes never reach it; the upstreams' routes below turn it on.",
		func(b *bootstrap) *yaml.Node {
			f := b.first(b.get(b.hcm, "http_filters"))
			if f == nil {
				return nil
			}
			f.Content = append(f.Content, scalar("disabled"), scalar("true"))
			return f
		}},
	{"routes", "At the top of your virtual host's routes: the sidecar's own paths (ext_proc off) and one\n" +
		"route per upstream, /NAME/, to its cluster (upstreams[].envoy_cluster), with the retry policy.",
		func(b *bootstrap) *yaml.Node {
			vh := b.first(b.get(b.hcm, "route_config", "virtual_hosts"))
			routes := b.get(vh, "routes")
			if routes == nil || len(routes.Content) == 0 {
				return nil
			}
			// Not the catch-all: the rest of the host is the operator's.
			out := &yaml.Node{Kind: yaml.SequenceNode, Content: routes.Content[:len(routes.Content)-1]}
			for _, r := range out.Content {
				if b.get(r, "name") != nil && b.get(r, "typed_per_filter_config") == nil {
					r.Content = append(r.Content, scalar("typed_per_filter_config"), enableExtProc())
				}
			}
			return out
		}},
	{"listeners", "Into static_resources.listeners: the loopback relay the sidecar settles background\n" +
		"responses through (its routes add the vendor key).",
		func(b *bootstrap) *yaml.Node {
			relay := b.named(b.get(b.root, "static_resources", "listeners"), "relay")
			if relay == nil {
				return nil
			}
			return &yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{relay}}
		}},
	{"clusters", "Into static_resources.clusters: the sidecar (extproc, control) and each upstream's cluster.\n" +
		"For a vendor cluster of your own, keep its name (upstreams[].envoy_cluster) and endpoints, give\n" +
		"each host its endpoint metadata as below (envoy.contract full: without it x-gateway-endpoint is\n" +
		"empty) and merge the rest: buffer limit, circuit breakers, credential injection, health checks,\n" +
		"outlier detection. gateway envoy-config --merge-into does all of this.",
		func(b *bootstrap) *yaml.Node {
			cs := b.get(b.root, "static_resources", "clusters")
			if cs == nil {
				return nil
			}
			out := &yaml.Node{Kind: yaml.SequenceNode}
			for _, c := range cs.Content {
				if n := b.get(c, "name"); n != nil && (n.Value == "envoy_admin" || n.Value == "otel_collector") {
					continue
				}
				out.Content = append(out.Content, c)
			}
			return out
		}},
}

// RenderFragment returns the pieces of c's bootstrap to merge into an
// Envoy of one's own, as one YAML document.
func RenderFragment(c *config.Config, o Options) ([]byte, error) {
	doc, err := fragmentPieceNodes(c, o)
	if err != nil {
		return nil, err
	}
	doc.HeadComment = fmt.Sprintf("Rendered by `gateway envoy-config --fragment` from gateway.yaml (envoy.contract %s):\n"+
		"the pieces of the gateway's Envoy configuration to merge into your own. docs/envoy.md says\n"+
		"what each does and what breaks without it.", c.Envoy.Contract)
	return encodeYAML(doc)
}

// encodeYAML writes a mapping node as one YAML document.
func encodeYAML(doc *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{doc}}); err != nil {
		return nil, fmt.Errorf("envoy fragment: %w", err)
	}
	return buf.Bytes(), nil
}

// fragmentPieceNodes is the fragment as a mapping of its pieces, each key
// with its comment.
func fragmentPieceNodes(c *config.Config, o Options) (*yaml.Node, error) {
	if o.Bare {
		return nil, fmt.Errorf("a fragment without the ext_proc filter has nothing to attach")
	}
	for _, u := range c.Upstreams {
		if u.Pooled() {
			// The pool's cool-downs come from the router's upstream log,
			// which belongs to your router, not to a piece to merge.
			return nil, fmt.Errorf("upstreams %s: a pool of keys (upstreams[].keys) needs the gateway's whole bootstrap (gateway envoy-config without --fragment); a fragment takes one key per upstream", u.Name)
		}
	}
	full, err := Render(c, o)
	if err != nil {
		return nil, err
	}
	b, err := parseBootstrap(full)
	if err != nil {
		return nil, err
	}
	doc := &yaml.Node{Kind: yaml.MappingNode}
	for _, p := range fragmentPieces {
		n := p.pick(b)
		if n == nil {
			continue // no secrets without credentials
		}
		doc.Content = append(doc.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: p.key, HeadComment: p.comment}, n)
	}
	return doc, nil
}

// bootstrap is a rendered bootstrap as YAML nodes, with its public
// listener and that listener's HTTP connection manager found.
type bootstrap struct {
	root, public, hcm *yaml.Node
}

func parseBootstrap(data []byte) (*bootstrap, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return nil, fmt.Errorf("envoy fragment: the bootstrap does not parse: %v", err)
	}
	b := &bootstrap{root: doc.Content[0]}
	b.public = b.named(b.get(b.root, "static_resources", "listeners"), "public")
	for _, f := range b.get(b.first(b.get(b.public, "filter_chains")), "filters").Content {
		if n := b.get(f, "name"); n != nil && n.Value == "envoy.filters.network.http_connection_manager" {
			b.hcm = b.get(f, "typed_config")
		}
	}
	if b.public == nil || b.hcm == nil {
		return nil, fmt.Errorf("envoy fragment: the bootstrap has no public listener with an HTTP connection manager")
	}
	return b, nil
}

// get follows mapping keys from n; nil when one is missing.
func (b *bootstrap) get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == k {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

// pickKeys is a mapping of n's entries for keys, in n's order, with their
// comments.
func (b *bootstrap) pickKeys(n *yaml.Node, keys ...string) *yaml.Node {
	out := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; n != nil && i+1 < len(n.Content); i += 2 {
		for _, k := range keys {
			if n.Content[i].Value == k {
				out.Content = append(out.Content, n.Content[i], n.Content[i+1])
			}
		}
	}
	return out
}

func (b *bootstrap) first(seq *yaml.Node) *yaml.Node {
	if seq == nil || seq.Kind != yaml.SequenceNode || len(seq.Content) == 0 {
		return nil
	}
	return seq.Content[0]
}

// named is the element of seq whose name is name.
func (b *bootstrap) named(seq *yaml.Node, name string) *yaml.Node {
	if seq == nil {
		return nil
	}
	for _, e := range seq.Content {
		if n := b.get(e, "name"); n != nil && n.Value == name {
			return e
		}
	}
	return nil
}

// onlyRouteMappers keeps the local reply mappers of the gateway's own
// routes: the bootstrap's catch-alls would rewrite every other route's
// local replies in an Envoy that serves more than the gateway.
func (b *bootstrap) onlyRouteMappers(mappers *yaml.Node) {
	if mappers == nil {
		return
	}
	kept := mappers.Content[:0:0]
	for _, m := range mappers.Content {
		e := b.get(m, "filter", "extension_filter", "typed_config", "expression")
		if e != nil && strings.HasPrefix(e.Value, "xds.route_name == ") {
			kept = append(kept, m)
		}
	}
	mappers.Content = kept
}

func scalar(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: v} }

// ExtProcOnRoute is a route's typed_per_filter_config that turns an
// ext_proc filter rendered off by default (disabled: true) on for that
// route: the fragment's upstream routes carry it, and so do the routes the
// control planes' renderings enable.
const ExtProcOnRoute = `envoy.filters.http.ext_proc:
  "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
  config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute
    overrides: {}
`

// enableExtProc is ExtProcOnRoute as a node, for an upstream's route.
func enableExtProc() *yaml.Node {
	var n yaml.Node
	yaml.Unmarshal([]byte(ExtProcOnRoute), &n)
	return n.Content[0]
}
