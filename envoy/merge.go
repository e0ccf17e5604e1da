package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/internal/config"
)

// DefaultNamePrefix is what `gateway envoy-config --merge-into` puts before
// every name the gateway adds to an Envoy of one's own, so that its
// clusters, listener, secrets, routes and filter never meet a team's own
// extproc, control or relay.
const DefaultNamePrefix = "gateway_"

// MergeOptions say where the fragment goes in an Envoy of one's own.
type MergeOptions struct {
	// NamePrefix is put before every name the gateway adds, but the
	// upstreams' clusters: the sidecar reads their health by the names
	// gateway.yaml gives them (upstreams[].envoy_cluster).
	NamePrefix string
	// Listener names the listener the clients reach; empty means the only
	// one with an HTTP connection manager.
	Listener string
	// VirtualHost names the virtual host that gets the gateway's routes;
	// empty means the one serving "*", else the only one.
	VirtualHost string
}

// Merged is an Envoy bootstrap of one's own with the gateway merged in.
type Merged struct {
	Bootstrap []byte
	// Notes are what still needs doing by hand, one line each (the admin
	// interface where the sidecar does not look for it).
	Notes []string
}

// ConflictError lists what the merge refused to overwrite.
type ConflictError struct {
	Conflicts []string
}

func (e *ConflictError) Error() string {
	return "the gateway's Envoy configuration conflicts with your bootstrap, which is left as it is:\n  - " +
		strings.Join(e.Conflicts, "\n  - ")
}

// Merge returns own, an Envoy bootstrap in YAML or JSON, with c's fragment
// (RenderFragment) merged in: the clusters, secrets and relay listener
// added to static_resources, the routes at the top of the listener's
// virtual host, the ext_proc filter before its router (off, turned on by
// the gateway's upstream routes only), the gateway's local replies and the
// listener's buffer limit. A name or port already taken, a route the
// gateway's would shadow, or a setting that would break the gateway's
// streams is refused with a ConflictError listing all of them. The result
// keeps own's format, and for YAML its comments and order.
func Merge(own []byte, c *config.Config, o Options, m MergeOptions) (*Merged, error) {
	pieces, err := fragmentPieceNodes(c, o)
	if err != nil {
		return nil, err
	}
	frag := fragment{root: expand(pieces)}
	doc, isJSON, err := parseOwn(own)
	if err != nil {
		return nil, err
	}
	root := doc.Content[0]
	vendor := map[string]bool{}
	for _, u := range c.Upstreams {
		vendor[orDefault(u.EnvoyCluster, u.Name)] = true
	}
	frag.rename(m.NamePrefix, vendor)

	mg := merger{frag: frag, c: c}
	sr := get(root, "static_resources")
	if sr == nil {
		sr = &yaml.Node{Kind: yaml.MappingNode}
		set(root, "static_resources", sr)
	}
	mg.addNamed(sr, "clusters", "cluster", frag.get("clusters"), vendor)
	mg.addNamed(sr, "secrets", "secret", frag.get("secrets"), nil)
	mg.relayPorts(root, sr)
	mg.attach(get(sr, "listeners"), m)
	mg.addNamed(sr, "listeners", "listener", frag.get("listeners"), nil)
	if len(mg.conflicts) > 0 {
		return nil, &ConflictError{Conflicts: mg.conflicts}
	}
	out := &Merged{Notes: adminNotes(root, c)}
	if isJSON {
		var v any
		if err := doc.Decode(&v); err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		if out.Bootstrap, err = json.MarshalIndent(v, "", "  "); err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
		out.Bootstrap = append(out.Bootstrap, '\n')
		return out, nil
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	out.Bootstrap = buf.Bytes()
	return out, nil
}

// parseOwn reads a bootstrap in JSON (its first character is '{') or YAML
// into a document node.
func parseOwn(b []byte) (*yaml.Node, bool, error) {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, true, fmt.Errorf("your bootstrap is not valid JSON: %w", err)
		}
		var n yaml.Node
		if err := n.Encode(numbers(v)); err != nil {
			return nil, true, fmt.Errorf("your bootstrap: %w", err)
		}
		return &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{&n}}, true, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, false, fmt.Errorf("your bootstrap is not valid YAML: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, false, fmt.Errorf("your bootstrap is not a mapping (an Envoy bootstrap in YAML or JSON)")
	}
	return &doc, false, nil
}

// numbers turns JSON numbers into integers where they are, so that a port
// or a byte count is not written back as a float.
func numbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbers(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// fragment is the gateway's pieces, renamed for the Envoy they join.
type fragment struct {
	root *yaml.Node
	// routes are the gateway's route names; filter the ext_proc filter's.
	routes []string
	filter string
}

func (f *fragment) get(piece string) *yaml.Node { return get(f.root, piece) }

// rename puts prefix before the name of every cluster (but the vendors'),
// secret, listener and route of the fragment, and of its filter, and
// before every reference to one.
func (f *fragment) rename(prefix string, vendor map[string]bool) {
	clusters, secrets := map[string]string{}, map[string]string{}
	for _, c := range items(f.get("clusters")) {
		if n := get(c, "name"); n != nil && !vendor[n.Value] {
			clusters[n.Value] = prefix + n.Value
		}
	}
	for _, s := range items(f.get("secrets")) {
		if n := get(s, "name"); n != nil {
			secrets[n.Value] = prefix + n.Value
			n.Value = prefix + n.Value
		}
	}
	for _, l := range items(f.get("listeners")) {
		if n := get(l, "name"); n != nil {
			n.Value = prefix + n.Value
		}
		// Its stats too, apart from a listener of yours with the same prefix.
		for _, h := range hcms(l) {
			if n := get(h, "stat_prefix"); n != nil {
				n.Value = prefix + n.Value
			}
		}
	}
	routes := map[string]string{}
	for _, r := range items(f.get("routes")) {
		if n := get(r, "name"); n != nil {
			routes[n.Value] = prefix + n.Value
			n.Value = prefix + n.Value
			f.routes = append(f.routes, n.Value)
		}
	}
	oldFilter := ""
	if n := get(f.get("http_filter"), "name"); n != nil {
		oldFilter = n.Value
		f.filter = prefix + strings.TrimPrefix(n.Value, "envoy.filters.http.")
		if prefix == "" {
			f.filter = n.Value
		}
		n.Value = f.filter
	}
	var walk func(n *yaml.Node, parent string)
	walk = func(n *yaml.Node, parent string) {
		switch n.Kind {
		case yaml.SequenceNode:
			for _, e := range n.Content {
				walk(e, parent)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if v.Kind == yaml.ScalarNode {
					switch {
					case keyIs(k.Value, "name") && parent == "cluster":
						if to, ok := clusters[v.Value]; ok {
							v.Value = to
						}
					case keyIs(k.Value, "cluster"), keyIs(k.Value, "cluster_name"):
						if to, ok := clusters[v.Value]; ok {
							v.Value = to
						}
					case keyIs(k.Value, "name") && parent == "credential":
						if to, ok := secrets[v.Value]; ok {
							v.Value = to
						}
					case keyIs(k.Value, "expression"):
						for from, to := range routes {
							v.Value = strings.ReplaceAll(v.Value, "xds.route_name == '"+from+"'", "xds.route_name == '"+to+"'")
						}
					}
				}
				if parent == "typed_per_filter_config" && k.Value == oldFilter {
					k.Value = f.filter
				}
				walk(v, k.Value)
			}
		}
	}
	for i := 0; i+1 < len(f.root.Content); i += 2 {
		p := f.root.Content[i].Value
		if p == "clusters" {
			// Each element is a cluster: its own name is renamed too.
			for _, c := range items(f.root.Content[i+1]) {
				walk(&yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{scalar("cluster"), c}}, "")
			}
			continue
		}
		walk(f.root.Content[i+1], p)
	}
}

// merger collects the conflicts while it merges.
type merger struct {
	frag      fragment
	c         *config.Config
	conflicts []string
}

func (m *merger) conflict(format string, args ...any) {
	m.conflicts = append(m.conflicts, fmt.Sprintf(format, args...))
}

// addNamed appends the fragment's elements of a static_resources list
// (clusters, secrets, listeners) to own's, refusing a name own has.
func (m *merger) addNamed(sr *yaml.Node, key, what string, add *yaml.Node, vendor map[string]bool) {
	if len(items(add)) == 0 {
		return
	}
	list := get(sr, key)
	if list == nil {
		list = &yaml.Node{Kind: yaml.SequenceNode}
		set(sr, key, list)
	}
	for _, e := range items(add) {
		name := str(get(e, "name"))
		if named(list, name) == nil {
			continue
		}
		switch {
		case vendor[name]:
			m.conflict("cluster %s is already in your bootstrap: the gateway's cluster for that upstream carries its health checks, breakers, credential and the hosts' endpoint metadata (gateway.endpoint); remove yours, or give the gateway's another name (upstreams[].envoy_cluster)", name)
		default:
			m.conflict("%s %s is already in your bootstrap: choose another --name-prefix", what, name)
		}
	}
	added := items(add)
	added[0].HeadComment = strings.TrimSpace("Added by `gateway envoy-config --merge-into` (docs/envoy.md).\n" + added[0].HeadComment)
	list.Kind, list.Style = yaml.SequenceNode, 0
	list.Content = append(list.Content, added...)
}

// relayPorts refuses a fragment listener whose port one of own's listeners
// or its admin interface already takes.
func (m *merger) relayPorts(root, sr *yaml.Node) {
	taken := map[string]string{}
	if a := socketAddr(get(root, "admin", "address")); a != "" {
		taken[a] = "the admin interface"
	}
	for _, l := range items(get(sr, "listeners")) {
		if a := socketAddr(get(l, "address")); a != "" {
			taken[a] = "listener " + str(get(l, "name"))
		}
	}
	for _, l := range items(m.frag.get("listeners")) {
		a := socketAddr(get(l, "address"))
		host, port, _ := net.SplitHostPort(a)
		for t, by := range taken {
			th, tp, _ := net.SplitHostPort(t)
			if tp == port && (th == host || wildcard(th) || wildcard(host)) {
				m.conflict("listener %s (listeners.relay, %s): port %s is taken by %s (%s); move listeners.relay in gateway.yaml", str(get(l, "name")), a, port, by, t)
			}
		}
	}
}

func wildcard(host string) bool { return host == "0.0.0.0" || host == "::" || host == "" }

// socketAddr is an address node's host:port, "" when it has none (a pipe).
func socketAddr(addr *yaml.Node) string {
	sa := get(addr, "socket_address")
	if sa == nil {
		return ""
	}
	return net.JoinHostPort(str(get(sa, "address")), str(get(sa, "port_value")))
}

// attach puts the gateway onto the listener the clients reach: its buffer
// limit, and in each of its HTTP connection managers the routes, the
// filter and the local replies.
func (m *merger) attach(listeners *yaml.Node, o MergeOptions) {
	var candidates []string
	var chosen *yaml.Node
	for _, l := range items(listeners) {
		if len(hcms(l)) == 0 {
			continue
		}
		name := str(get(l, "name"))
		candidates = append(candidates, name)
		if o.Listener == name || (o.Listener == "" && chosen == nil) {
			chosen = l
		}
	}
	switch {
	case o.Listener != "" && (chosen == nil || str(get(chosen, "name")) != o.Listener):
		m.conflict("listener %s (--listener): not among your static listeners with an HTTP connection manager (%s)", o.Listener, orDefault(strings.Join(candidates, ", "), "none"))
		return
	case len(candidates) == 0:
		m.conflict("your bootstrap has no static listener with an HTTP connection manager to attach the gateway to (listeners from LDS cannot be merged); render the gateway's whole bootstrap instead (gateway envoy-config)")
		return
	case o.Listener == "" && len(candidates) > 1:
		m.conflict("your bootstrap has several listeners with an HTTP connection manager (%s): name the one your clients reach with --listener", strings.Join(candidates, ", "))
		return
	}
	lname := str(get(chosen, "name"))
	// The listener's buffer bounds what Envoy reads of a client at once;
	// the gateway's routes buffer their bodies themselves
	// (request_body_buffer_limit), so a limit of the team's own stands.
	if want := get(m.frag.get("listener"), "per_connection_buffer_limit_bytes"); want != nil && get(chosen, "per_connection_buffer_limit_bytes") == nil {
		set(chosen, "per_connection_buffer_limit_bytes", want)
	}
	for _, h := range hcms(chosen) {
		m.attachHCM(lname, h, o)
	}
}

// hcms are the typed configs of a listener's HTTP connection managers, one
// per filter chain that has one.
func hcms(l *yaml.Node) []*yaml.Node {
	chains := slices.Clone(items(get(l, "filter_chains")))
	if d := get(l, "default_filter_chain"); d != nil {
		chains = append(chains, d)
	}
	var out []*yaml.Node
	for _, ch := range chains {
		for _, f := range items(get(ch, "filters")) {
			tc := get(f, "typed_config")
			if str(get(f, "name")) == "envoy.filters.network.http_connection_manager" ||
				strings.HasSuffix(str(get(tc, "@type")), ".HttpConnectionManager") {
				out = append(out, tc)
			}
		}
	}
	return out
}

func (m *merger) attachHCM(lname string, hcm *yaml.Node, o MergeOptions) {
	if get(hcm, "rds") != nil {
		m.conflict("listener %s: its HTTP connection manager takes its routes from RDS; the gateway's routes can only join an inline route_config (add them in your control plane, from `gateway envoy-config --fragment`)", lname)
		return
	}
	if t := get(hcm, "request_timeout"); t != nil && !zeroDuration(str(t)) {
		m.conflict("listener %s: request_timeout %s would cut the gateway's streams, which run for minutes; remove it or set 0s (stream_idle_timeout still ends idle streams)", lname, str(t))
	}
	// The filter, before the router.
	filters := get(hcm, "http_filters")
	router := -1
	for i, f := range items(filters) {
		name := str(get(f, "name"))
		if name == m.frag.filter {
			m.conflict("listener %s: an HTTP filter named %s is already there: choose another --name-prefix", lname, name)
		}
		if router < 0 && (name == "envoy.filters.http.router" || strings.HasSuffix(str(get(f, "typed_config", "@type")), "router.v3.Router")) {
			router = i
		}
	}
	if router < 0 {
		m.conflict("listener %s: its HTTP connection manager has no envoy.filters.http.router to put the gateway's filter before", lname)
		return
	}
	f := m.frag.get("http_filter")
	f.HeadComment = "Added by `gateway envoy-config --merge-into`: the gateway's sidecar, off but on the gateway's routes."
	filters.Content = slices.Insert(filters.Content, router, f)

	vh := m.virtualHost(lname, get(hcm, "route_config"), o)
	if vh == nil {
		return
	}
	routes := get(vh, "routes")
	if routes == nil {
		routes = &yaml.Node{Kind: yaml.SequenceNode}
		set(vh, "routes", routes)
	}
	m.shadowed(lname, vh)
	add := items(m.frag.get("routes"))
	if len(add) > 0 {
		add[0].HeadComment = strings.TrimSpace("Added by `gateway envoy-config --merge-into`: the gateway's routes, before yours.\n" + add[0].HeadComment)
	}
	routes.Kind, routes.Style = yaml.SequenceNode, 0
	routes.Content = append(slices.Clone(add), routes.Content...)

	// Local replies: the gateway's mappers match its own routes only, and
	// go first so that yours never answer for them.
	mappers := get(m.frag.get("http_connection_manager"), "local_reply_config", "mappers")
	if len(items(mappers)) == 0 {
		return
	}
	lrc := get(hcm, "local_reply_config")
	if lrc == nil {
		lrc = &yaml.Node{Kind: yaml.MappingNode}
		set(hcm, "local_reply_config", lrc)
	}
	own := get(lrc, "mappers")
	if own == nil {
		own = &yaml.Node{Kind: yaml.SequenceNode}
		set(lrc, "mappers", own)
	}
	own.Kind, own.Style = yaml.SequenceNode, 0
	own.Content = append(slices.Clone(mappers.Content), own.Content...)
}

// virtualHost is the virtual host of rc that gets the gateway's routes,
// refusing route names the gateway's would repeat anywhere in rc.
func (m *merger) virtualHost(lname string, rc *yaml.Node, o MergeOptions) *yaml.Node {
	var names []string
	var chosen, star *yaml.Node
	for _, vh := range items(get(rc, "virtual_hosts")) {
		name := str(get(vh, "name"))
		names = append(names, name)
		if name == o.VirtualHost {
			chosen = vh
		}
		if star == nil && slices.ContainsFunc(items(get(vh, "domains")), func(d *yaml.Node) bool { return d.Value == "*" }) {
			star = vh
		}
		for _, r := range items(get(vh, "routes")) {
			if n := str(get(r, "name")); n != "" && slices.Contains(m.frag.routes, n) {
				m.conflict("listener %s: a route named %s is already in virtual host %s: choose another --name-prefix", lname, n, name)
			}
		}
	}
	switch {
	case o.VirtualHost != "":
		if chosen == nil {
			m.conflict("listener %s: no virtual host %s (--virtual-host) among %s", lname, o.VirtualHost, orDefault(strings.Join(names, ", "), "none"))
		}
	case star != nil:
		chosen = star
	case len(names) == 1:
		chosen = items(get(rc, "virtual_hosts"))[0]
	default:
		m.conflict("listener %s: no virtual host serves \"*\" among %s: name the one for the gateway with --virtual-host", lname, orDefault(strings.Join(names, ", "), "none"))
	}
	return chosen
}

// shadowed refuses the routes of vh that the gateway's, put before them,
// would take over: a path or prefix one of the gateway's matches.
func (m *merger) shadowed(lname string, vh *yaml.Node) {
	type match struct{ path, prefix string }
	var gw []match
	for _, r := range items(m.frag.get("routes")) {
		if get(r, "match", "headers") != nil {
			continue // the socket routes: upgrades only, behind the prefix routes below
		}
		gw = append(gw, match{str(get(r, "match", "path")), str(get(r, "match", "prefix"))})
	}
	for _, r := range items(get(vh, "routes")) {
		path := str(get(r, "match", "path"))
		prefix := orDefault(str(get(r, "match", "prefix")), str(get(r, "match", "path_separated_prefix")))
		own := orDefault(path, prefix)
		if own == "" {
			continue // a regex or a template: not compared
		}
		for _, g := range gw {
			hit := (g.prefix != "" && strings.HasPrefix(own, g.prefix)) || (g.path != "" && own == g.path)
			if hit {
				what := "your route for " + own
				if n := str(get(r, "name")); n != "" {
					what = "route " + n
				}
				m.conflict("listener %s: %s in virtual host %s would be taken over by the gateway's route for %s (the gateway's routes go first); move it, or give the gateway a virtual host of its own (--virtual-host)", lname, what, str(get(vh, "name")), orDefault(g.path, g.prefix))
				break
			}
		}
	}
}

// adminNotes say where the sidecar looks for Envoy's admin interface when
// own's is elsewhere: without it, /health cannot tell which endpoint serves.
func adminNotes(root *yaml.Node, c *config.Config) []string {
	a := socketAddr(get(root, "admin", "address"))
	switch {
	case a == "":
		return []string{fmt.Sprintf("your bootstrap has no admin interface: the sidecar reads the clusters' health from Envoy's admin at listeners.envoy_admin (%s); add one there, on loopback", c.Listeners.EnvoyAdmin)}
	case a != c.Listeners.EnvoyAdmin:
		return []string{fmt.Sprintf("your Envoy's admin interface is at %s: set listeners.envoy_admin to it in gateway.yaml, where the sidecar reads the clusters' health (now %s)", a, c.Listeners.EnvoyAdmin)}
	}
	return nil
}

func zeroDuration(s string) bool {
	s = strings.TrimSuffix(strings.TrimSpace(s), "s")
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && f == 0
}

// expand copies n with every alias replaced by a copy of what it names,
// so that renaming one route's settings never renames another's.
func expand(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.AliasNode {
		return expand(n.Alias)
	}
	c := *n
	c.Anchor = ""
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		c.Content[i] = expand(e)
	}
	return &c
}

// keyIs says whether a mapping key is the proto field name: snake_case as
// written by hand, or the lowerCamelCase JSON name.
func keyIs(k, field string) bool {
	if k == field {
		return true
	}
	parts := strings.Split(field, "_")
	for i := 1; i < len(parts); i++ {
		if parts[i] != "" {
			parts[i] = strings.ToUpper(parts[i][:1]) + parts[i][1:]
		}
	}
	return k == strings.Join(parts, "")
}

// get follows mapping keys (either spelling) from n, through aliases; nil
// when one is missing.
func get(n *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		n = deref(n)
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if keyIs(n.Content[i].Value, k) {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return deref(n)
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// set puts v under key in the mapping n, replacing a value of either
// spelling.
func set(n *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if keyIs(n.Content[i].Value, key) {
			n.Content[i+1] = v
			return
		}
	}
	n.Content = append(n.Content, scalar(key), v)
}

// items are a sequence's elements, aliases resolved; nil for anything else.
func items(n *yaml.Node) []*yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	out := make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		out[i] = deref(e)
	}
	return out
}

// named is the element of seq whose name is name.
func named(seq *yaml.Node, name string) *yaml.Node {
	for _, e := range items(seq) {
		if str(get(e, "name")) == name {
			return e
		}
	}
	return nil
}

func str(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}
