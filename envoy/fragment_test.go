package envoy_test

import (
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

type fragment struct {
	Secrets               []map[string]any `yaml:"secrets"`
	Listener              map[string]any   `yaml:"listener"`
	HTTPConnectionManager map[string]any   `yaml:"http_connection_manager"`
	HTTPFilter            struct {
		Name        string         `yaml:"name"`
		TypedConfig map[string]any `yaml:"typed_config"`
	} `yaml:"http_filter"`
	Routes []struct {
		Name  string         `yaml:"name"`
		Match map[string]any `yaml:"match"`
		Route map[string]any `yaml:"route"`
	} `yaml:"routes"`
	Listeners []map[string]any `yaml:"listeners"`
	Clusters  []struct {
		Name string `yaml:"name"`
	} `yaml:"clusters"`
}

func renderFragment(t *testing.T, c *config.Config) (fragment, string) {
	t.Helper()
	b, err := envoy.RenderFragment(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var f fragment
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatalf("fragment does not parse: %v\n%s", err, b)
	}
	// Every top-level key is a piece this test knows.
	var keys map[string]any
	yaml.Unmarshal(b, &keys)
	for k := range keys {
		if !slices.Contains([]string{"secrets", "listener", "http_connection_manager", "http_filter", "routes", "listeners", "clusters"}, k) {
			t.Errorf("unexpected piece %q", k)
		}
	}
	return f, string(b)
}

// The fragment holds every piece an Envoy of one's own needs, cut from the
// same rendering: the filter, the sidecar's and the upstreams' clusters
// under their configured names, the routes (not the catch-all), the relay
// listener, the buffer limit, and local replies only for the gateway's
// routes.
func TestFragmentPieces(t *testing.T) {
	c := load(t)
	c.Upstreams[0].EnvoyCluster = "vendor-a-primary"
	c.Upstreams[0].Reserve = config.Endpoint{}
	f, raw := renderFragment(t, c)
	if f.HTTPFilter.Name != "envoy.filters.http.ext_proc" {
		t.Errorf("http_filter %q", f.HTTPFilter.Name)
	}
	if f.Listener["per_connection_buffer_limit_bytes"] != config.ReadBufferBytes {
		t.Errorf("listener %v", f.Listener)
	}
	var paths []string
	for _, r := range f.Routes {
		path, _ := r.Match["path"].(string)
		prefix, _ := r.Match["prefix"].(string)
		p := path + prefix
		paths = append(paths, p)
		if p == "/alpha/" && r.Route["cluster"] != "vendor-a-primary" {
			t.Errorf("alpha's route goes to %v", r.Route["cluster"])
		}
	}
	if want := []string{"/health", "/v1/usage", "/v1/usage/", "/console", "/alpha/v1/responses", "/beta/v1/responses", "/alpha/", "/beta/"}; !slices.Equal(paths, want) {
		t.Errorf("routes %v, want %v", paths, want)
	}
	var clusters []string
	for _, c := range f.Clusters {
		clusters = append(clusters, c.Name)
	}
	if want := []string{"extproc", "control", "vendor-a-primary", "beta"}; !slices.Equal(clusters, want) {
		t.Errorf("clusters %v, want %v", clusters, want)
	}
	if len(f.Listeners) != 1 || f.Listeners[0]["name"] != "relay" || len(f.Secrets) != 2 {
		t.Errorf("listeners %v, secrets %v", f.Listeners, f.Secrets)
	}
	mappers := f.HTTPConnectionManager["local_reply_config"].(map[string]any)["mappers"].([]any)
	if len(mappers) != 14 || strings.Contains(raw, "type: gateway_error") {
		t.Errorf("%d local reply mappers; want only the two routes' 7 each", len(mappers))
	}
	if strings.Count(raw, "priority: 1") != 1 {
		t.Errorf("want one reserve (beta's), alpha has none")
	}
	// Off by default, on for the upstreams' routes only: an Envoy's other
	// routes never reach the sidecar.
	if strings.Count(raw, "ExtProcPerRoute\n") != 3 || strings.Count(raw, "type.googleapis.com/envoy.config.route.v3.FilterConfig") != 2 || !strings.Contains(raw, "  disabled: true\n# At the top") {
		t.Errorf("the filter is not off by default and on for the two upstream routes")
	}
	if !strings.Contains(raw, "# Into static_resources.clusters") {
		t.Error("pieces lack their comments")
	}
}

// The reduced contract asks of the filter only what Envoy Gateway's
// EnvoyExtensionPolicy can express: two attributes it allows, no
// max_message_timeout, no mutation of x-envoy-* headers; and no host
// metadata anywhere.
func TestReducedFilter(t *testing.T) {
	c := load(t)
	c.Envoy.Contract = config.ContractReduced
	f, raw := renderFragment(t, c)
	tc := f.HTTPFilter.TypedConfig
	attrs := tc["response_attributes"].([]any)
	if len(attrs) != 2 || attrs[0] != "response.code" || attrs[1] != "upstream.address" {
		t.Errorf("attributes %v", attrs)
	}
	for _, k := range []string{"max_message_timeout", "mutation_rules"} {
		if _, ok := tc[k]; ok {
			t.Errorf("reduced filter sets %s", k)
		}
	}
	if strings.Contains(raw, "gateway: {endpoint") || strings.Contains(raw, "UPSTREAM_METADATA") {
		t.Error("reduced rendering relies on host metadata")
	}
	full, _ := renderFragment(t, load(t))
	if _, ok := full.HTTPFilter.TypedConfig["max_message_timeout"]; !ok {
		t.Error("full filter lacks max_message_timeout")
	}
}
