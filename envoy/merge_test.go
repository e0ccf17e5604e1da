package envoy_test

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

// The three bootstraps of a platform team (test/integration has Envoy
// validate the same merges): its own listener with its own routes, its own
// clusters named extproc and control, its own routes on the virtual host
// the gateway joins (in JSON, with camelCase names).
var mergeCases = []struct {
	file, listener string
	ownClusters    []string
	ownRoutes      int // the routes of the gateway's virtual host that are the team's
}{
	{"own-listener.yaml", "ingress", []string{"orders"}, 2},
	{"own-clusters.yaml", "public", []string{"extproc", "control", "api"}, 1},
	{"same-vhost.json", "edge", []string{"web"}, 3},
}

func readMergeCase(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/merge/" + file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func merge(t *testing.T, own []byte, c *config.Config, m envoy.MergeOptions) *envoy.Merged {
	t.Helper()
	out, err := envoy.Merge(own, c, envoy.Options{}, m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The parts of a bootstrap the tests read (Envoy itself validates the
// merges in test/integration).
type (
	bootDoc struct {
		StaticResources struct {
			Listeners []listenerDoc `yaml:"listeners"`
			Clusters  []nameDoc     `yaml:"clusters"`
			Secrets   []nameDoc     `yaml:"secrets"`
		} `yaml:"static_resources"`
	}
	nameDoc     struct{ Name string }
	listenerDoc struct {
		Name    string
		Address struct {
			SocketAddress struct {
				PortValue int `yaml:"port_value"`
			} `yaml:"socket_address"`
		}
		PerConnectionBufferLimitBytes int64 `yaml:"per_connection_buffer_limit_bytes"`
		FilterChains                  []struct {
			Filters []struct {
				TypedConfig hcmDoc `yaml:"typed_config"`
			}
		} `yaml:"filter_chains"`
	}
	hcmDoc struct {
		HTTPFilters []struct {
			Name        string
			Disabled    bool
			TypedConfig map[string]any `yaml:"typed_config"`
		} `yaml:"http_filters"`
		RouteConfig struct {
			VirtualHosts []struct {
				Name    string
				Domains []string
				Routes  []routeDoc
			} `yaml:"virtual_hosts"`
		} `yaml:"route_config"`
		LocalReplyConfig struct {
			Mappers []map[string]any
		} `yaml:"local_reply_config"`
	}
	routeDoc struct {
		Name                 string
		Match                map[string]any
		TypedPerFilterConfig map[string]map[string]any `yaml:"typed_per_filter_config"`
	}
)

// decode reads a merged bootstrap, YAML or JSON, field names in either
// spelling.
func decode(t *testing.T, b []byte) *bootDoc {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("merged bootstrap does not parse: %v", err)
	}
	upper := regexp.MustCompile(`[A-Z]`)
	var snake func(v any) any
	snake = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				if !strings.Contains(k, ".") {
					k = upper.ReplaceAllStringFunc(k, func(u string) string { return "_" + strings.ToLower(u) })
				}
				out[k] = snake(e)
			}
			return out
		case []any:
			for i, e := range x {
				x[i] = snake(e)
			}
		}
		return v
	}
	y, err := yaml.Marshal(snake(v))
	if err != nil {
		t.Fatal(err)
	}
	var d bootDoc
	if err := yaml.Unmarshal(y, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

func names(ns []nameDoc) []string {
	var out []string
	for _, n := range ns {
		out = append(out, n.Name)
	}
	return out
}

func hcmOf(l listenerDoc) hcmDoc { return l.FilterChains[0].Filters[0].TypedConfig }

// Merged, each bootstrap keeps all it had and gains the gateway: its
// clusters and relay listener under prefixed names (the vendors' as
// gateway.yaml names them), its routes first in the virtual host serving
// "*", its filter off before the router and on only for the gateway's
// vendor routes, so that no route of the team's reaches the sidecar.
func TestMergeIntoOwnBootstraps(t *testing.T) {
	for _, tc := range mergeCases {
		t.Run(tc.file, func(t *testing.T) {
			own := readMergeCase(t, tc.file)
			m := merge(t, own, load(t), envoy.MergeOptions{NamePrefix: envoy.DefaultNamePrefix})
			if json.Valid(own) != json.Valid(m.Bootstrap) {
				t.Errorf("the merge changed the format (JSON in: %v)", json.Valid(own))
			}
			boot := decode(t, m.Bootstrap)
			sr := boot.StaticResources
			if want := append(slices.Clone(tc.ownClusters), "gateway_extproc", "gateway_control", "alpha", "beta"); !slices.Equal(names(sr.Clusters), want) {
				t.Errorf("clusters %v, want %v", names(sr.Clusters), want)
			}
			if want := []string{"gateway_alpha-vendor-key", "gateway_beta-vendor-key"}; !slices.Equal(names(sr.Secrets), want) {
				t.Errorf("secrets %v, want %v", names(sr.Secrets), want)
			}
			ls := sr.Listeners
			if last := ls[len(ls)-1]; last.Name != "gateway_relay" || last.Address.SocketAddress.PortValue != 9903 {
				t.Errorf("last listener %s, want the relay", last.Name)
			}
			l := ls[0]
			if l.Name != tc.listener || l.PerConnectionBufferLimitBytes == 0 {
				t.Errorf("listener %s buffer limit %d", l.Name, l.PerConnectionBufferLimitBytes)
			}
			h := hcmOf(l)
			var filters []string
			for _, f := range h.HTTPFilters {
				filters = append(filters, f.Name)
			}
			n := len(filters)
			if n < 2 || filters[n-2] != "gateway_ext_proc" || filters[n-1] != "envoy.filters.http.router" || !h.HTTPFilters[n-2].Disabled {
				t.Fatalf("http filters %v: want gateway_ext_proc, disabled, just before the router", filters)
			}
			if tc := h.HTTPFilters[n-2].TypedConfig; tc["failure_mode_allow"] != false || !strings.Contains(mustMarshal(t, tc["grpc_service"]), "cluster_name: gateway_extproc") {
				t.Errorf("the gateway's filter: %v", tc)
			}
			var routes []routeDoc
			for _, v := range h.RouteConfig.VirtualHosts {
				if slices.Contains(v.Domains, "*") {
					routes = v.Routes
				}
			}
			gateway := routes[:len(routes)-tc.ownRoutes]
			var enabled []string
			for _, r := range gateway {
				if fc := r.TypedPerFilterConfig["gateway_ext_proc"]; fc["@type"] == "type.googleapis.com/envoy.config.route.v3.FilterConfig" {
					enabled = append(enabled, r.Name)
				}
			}
			if want := []string{"gateway_alpha", "gateway_beta"}; !slices.Equal(enabled, want) || len(gateway) != 8 {
				t.Errorf("the filter is on for %v of the gateway's %d routes, want %v", enabled, len(gateway), want)
			}
			for _, r := range routes[len(gateway):] {
				if strings.HasPrefix(r.Name, "gateway_") || len(r.TypedPerFilterConfig) != 0 {
					t.Errorf("the team's route %v was changed", r)
				}
			}
			// The gateway's local replies come first and answer only for
			// its routes.
			var exprs []string
			for _, mp := range h.LocalReplyConfig.Mappers {
				if e, ok := dig(mp, "filter", "extension_filter", "typed_config", "expression").(string); ok {
					exprs = append(exprs, e)
				}
			}
			if len(exprs) != 14 || !strings.HasPrefix(exprs[0], "xds.route_name == 'gateway_alpha'") || !strings.HasPrefix(exprs[13], "xds.route_name == 'gateway_beta'") {
				t.Errorf("local reply expressions %q", exprs)
			}
			if tc.file == "same-vhost.json" && len(h.LocalReplyConfig.Mappers) != 15 {
				t.Errorf("%d local reply mappers, want the gateway's 14 and the team's", len(h.LocalReplyConfig.Mappers))
			}
			if tc.file == "own-clusters.yaml" {
				// The team's own processor still runs on its routes.
				if filters[0] != "envoy.filters.http.ext_proc" || h.HTTPFilters[0].Disabled {
					t.Errorf("the team's ext_proc filter: %v", filters)
				}
			}
			if !json.Valid(own) && !strings.Contains(string(m.Bootstrap), strings.SplitN(string(own), "\n", 2)[0]) {
				t.Error("the team's comments are gone")
			}
			if len(m.Notes) != 0 {
				t.Errorf("notes %v", m.Notes)
			}
		})
	}
}

// Without a prefix the gateway's names meet the team's extproc, control,
// relay and ext_proc filter: the merge refuses, naming each, and writes
// nothing.
func TestMergeRefusesNamesTaken(t *testing.T) {
	_, err := envoy.Merge(readMergeCase(t, "own-clusters.yaml"), load(t), envoy.Options{}, envoy.MergeOptions{})
	var ce *envoy.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err %v, want conflicts", err)
	}
	want := []string{"cluster extproc is already", "cluster control is already", "HTTP filter named envoy.filters.http.ext_proc", "listener relay is already"}
	if len(ce.Conflicts) != len(want) {
		t.Errorf("conflicts %q", ce.Conflicts)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("no conflict %q in:\n%v", w, err)
		}
	}
}

// Every other conflict is refused too, all listed at once: a vendor
// cluster of the team's own under the upstream's cluster name (whose hosts
// would lack the endpoint metadata), the relay's port taken, the team's
// routes that the gateway's would take over, a route name taken, and a request
// timeout that would cut streams.
func TestMergeRefusesConflicts(t *testing.T) {
	own := `
admin: {address: {socket_address: {address: 127.0.0.1, port_value: 9903}}}
static_resources:
  listeners:
  - name: edge
    address: {socket_address: {address: 0.0.0.0, port_value: 8080}}
    per_connection_buffer_limit_bytes: 1048576
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          request_timeout: 30s
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - {name: k8s, match: {path: /health}, direct_response: {status: 200}}
              - {name: gateway_beta, match: {prefix: /beta-docs}, route: {cluster: alpha}}
              - {match: {prefix: /alpha/v2/}, route: {cluster: alpha}}
              - {match: {prefix: /}, route: {cluster: alpha}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: alpha
    type: STATIC
    load_assignment:
      cluster_name: alpha
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 10.0.0.1, port_value: 443}}}}]}]
`
	_, err := envoy.Merge([]byte(own), load(t), envoy.Options{}, envoy.MergeOptions{NamePrefix: envoy.DefaultNamePrefix})
	var ce *envoy.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err %v, want conflicts", err)
	}
	for _, w := range []string{
		"cluster alpha is already in your bootstrap: the gateway's cluster for that upstream carries",
		"port 9903 is taken by the admin interface",
		"route k8s in virtual host all would be taken over by the gateway's route for /health",
		"your route for /alpha/v2/ in virtual host all would be taken over by the gateway's route for /alpha/",
		"a route named gateway_beta is already in virtual host all",
		"request_timeout 30s",
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("no conflict %q in:\n%v", w, err)
		}
	}
	if len(ce.Conflicts) != 6 {
		t.Errorf("%d conflicts, want 6:\n%v", len(ce.Conflicts), err)
	}
}

// What the merge cannot place is refused with what to do instead: routes
// from RDS, several HTTP listeners without --listener, a virtual host or
// listener that is not there, nothing to attach to.
func TestMergeRefusesWhatItCannotPlace(t *testing.T) {
	hcm := func(name, routes string) string {
		return `
  - name: ` + name + `
    address: {socket_address: {address: 0.0.0.0, port_value: 1` + name[len(name)-1:] + `}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: x
          ` + routes + `
          http_filters: [{name: envoy.filters.http.router}]`
	}
	inline := `route_config: {virtual_hosts: [{name: a, domains: [a.example.com]}, {name: b, domains: [b.example.com]}]}`
	for _, tc := range []struct {
		name, own string
		m         envoy.MergeOptions
		want      string
	}{
		{"rds", "static_resources:\n  listeners:" + hcm("l1", `rds: {route_config_name: x, config_source: {ads: {}}}`), envoy.MergeOptions{}, "takes its routes from RDS"},
		{"two listeners", "static_resources:\n  listeners:" + hcm("l1", inline) + hcm("l2", inline), envoy.MergeOptions{}, "several listeners with an HTTP connection manager (l1, l2): name the one your clients reach with --listener"},
		{"no star", "static_resources:\n  listeners:" + hcm("l1", inline), envoy.MergeOptions{}, `no virtual host serves "*" among a, b`},
		{"no such host", "static_resources:\n  listeners:" + hcm("l1", inline), envoy.MergeOptions{VirtualHost: "c"}, "no virtual host c (--virtual-host) among a, b"},
		{"no such listener", "static_resources:\n  listeners:" + hcm("l1", inline), envoy.MergeOptions{Listener: "l9"}, "listener l9 (--listener): not among your static listeners with an HTTP connection manager (l1)"},
		{"nothing", "admin: {}", envoy.MergeOptions{}, "no static listener with an HTTP connection manager"},
		{"not a bootstrap", "- a list", envoy.MergeOptions{}, "not a mapping"},
		{"bad JSON", `{"static_resources": [}`, envoy.MergeOptions{}, "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envoy.Merge([]byte(tc.own), load(t), envoy.Options{}, tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
	// With a virtual host named, the gateway's routes go there.
	m := merge(t, []byte("static_resources:\n  listeners:"+hcm("l1", inline)+hcm("l2", inline)), load(t), envoy.MergeOptions{Listener: "l2", VirtualHost: "b"})
	boot := decode(t, m.Bootstrap)
	if vhs := hcmOf(boot.StaticResources.Listeners[1]).RouteConfig.VirtualHosts; len(vhs[0].Routes) != 0 || len(vhs[1].Routes) != 8 {
		t.Errorf("routes %d and %d, want the gateway's 8 in b", len(vhs[0].Routes), len(vhs[1].Routes))
	}
	if len(m.Notes) != 1 || !strings.Contains(m.Notes[0], "no admin interface") {
		t.Errorf("notes %v, want the missing admin", m.Notes)
	}
}

// Under the reduced contract and with upstreams[].envoy_cluster, the merge
// adds the clusters gateway.yaml names, and the sidecar's admin address is
// checked against the bootstrap's.
func TestMergeNamesFromConfig(t *testing.T) {
	c := load(t)
	c.Upstreams[0].EnvoyCluster = "vendor-a-primary"
	c.Listeners.EnvoyAdmin = "127.0.0.1:19901"
	m := merge(t, readMergeCase(t, "own-listener.yaml"), c, envoy.MergeOptions{NamePrefix: "llm-"})
	clusters := names(decode(t, m.Bootstrap).StaticResources.Clusters)
	if want := []string{"orders", "llm-extproc", "llm-control", "vendor-a-primary", "beta"}; !slices.Equal(clusters, want) {
		t.Errorf("clusters %v, want %v", clusters, want)
	}
	if len(m.Notes) != 1 || !strings.Contains(m.Notes[0], "set listeners.envoy_admin to it in gateway.yaml") {
		t.Errorf("notes %v", m.Notes)
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dig follows keys through nested mappings; nil where one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}
