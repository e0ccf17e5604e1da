package envoy_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/keypool"
)

// pooled gives alpha a pool: two shared keys and one pinned to an account.
func pooled(t *testing.T) *config.Config {
	c := load(t)
	u := &c.Upstreams[0]
	u.CredentialEnv = ""
	u.VendorKeys = []config.VendorKey{
		{Name: "k1", Env: "ALPHA_KEY_1", Weight: 1},
		{Name: "k2", File: "/run/secrets/alpha-k2", Weight: 2},
		{Name: "tenant", SDS: "/etc/envoy/sds/alpha-tenant.yaml", Weight: 1, Accounts: []string{"acct_t"}},
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

type cluster struct {
	Name        string `yaml:"name"`
	ClusterType struct {
		TypedConfig struct {
			Clusters []string `yaml:"clusters"`
		} `yaml:"typed_config"`
	} `yaml:"cluster_type"`
	LoadAssignment struct {
		Endpoints []struct {
			LBEndpoints []struct {
				Metadata struct {
					FilterMetadata struct {
						Gateway map[string]string `yaml:"gateway"`
					} `yaml:"filter_metadata"`
				} `yaml:"metadata"`
			} `yaml:"lb_endpoints"`
		} `yaml:"endpoints"`
	} `yaml:"load_assignment"`
}

func clusters(t *testing.T, b []byte) map[string]cluster {
	var boot struct {
		StaticResources struct {
			Clusters []cluster `yaml:"clusters"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(b, &boot); err != nil {
		t.Fatal(err)
	}
	out := map[string]cluster{}
	for _, c := range boot.StaticResources.Clusters {
		out[c.Name] = c
	}
	return out
}

// A pool renders a cluster per key and endpoint, each host naming its key;
// an aggregate per key trying it first, then the keys of its group at the
// primary, then each at the reserve; a pinned key's aggregate never falls
// back to a shared key, nor a shared key's to a pinned one.
func TestRenderPool(t *testing.T) {
	b, err := envoy.Render(pooled(t), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := clusters(t, b)
	for _, k := range []string{"k1", "k2", "tenant"} {
		for _, ep := range []string{"primary", "reserve"} {
			c, ok := cs["alpha--"+k+"--"+ep]
			if !ok {
				t.Fatalf("no cluster alpha--%s--%s", k, ep)
			}
			for _, e := range c.LoadAssignment.Endpoints {
				for _, h := range e.LBEndpoints {
					if g := h.Metadata.FilterMetadata.Gateway; g["key"] != k || g["endpoint"] != ep {
						t.Errorf("a host of alpha--%s--%s has metadata %v", k, ep, g)
					}
				}
			}
		}
	}
	want := map[string]string{
		"alpha--k1":     "alpha--k1--primary alpha--k2--primary alpha--k1--reserve alpha--k2--reserve",
		"alpha--k2":     "alpha--k2--primary alpha--k1--primary alpha--k2--reserve alpha--k1--reserve",
		"alpha--tenant": "alpha--tenant--primary alpha--tenant--reserve",
		"alpha":         "alpha--k1--primary alpha--k2--primary alpha--k1--reserve alpha--k2--reserve",
	}
	for name, members := range want {
		if got := strings.Join(cs[name].ClusterType.TypedConfig.Clusters, " "); got != members {
			t.Errorf("aggregate %s: %s; want %s", name, got, members)
		}
	}
	s := string(b)
	for _, w := range []string{
		"cluster_header: x-gateway-key-cluster",
		"retriable_status_codes: [503, 529]",
		"retriable_headers: [{name: x-gateway-retry, present_match: true}]",
		"include_request_attempt_count: true",
		"response_headers_to_remove: [x-gateway-retry, x-gateway-vendor-error]",
		"secret: {environment_variable: ALPHA_KEY_1}",
		`secret: {filename: "/run/secrets/alpha-k2"}`,
		`sds_config: {path_config_source: {path: "/etc/envoy/sds/alpha-tenant.yaml"}`,
		"status_code_filter: {comparison: {op: EQ, value: {default_value: 429",
		"min_retry_concurrency: 30",
	} {
		if !strings.Contains(s, w) {
			t.Errorf("the rendering lacks %q", w)
		}
	}
	// Each aggregate maps every key of the pool to its credential.
	if n := len(regexp.MustCompile(`name: credential-tenant\n`).FindAllString(s, -1)); n != 4 {
		t.Errorf("%d aggregates map the tenant key to its credential; want 4", n)
	}
	// Each aggregate's upstream filter retries on at most max_keys (2) of
	// its keys: the pinned key's on none.
	if n := strings.Count(s, "local keys = 2\n"); n != 3 {
		t.Errorf("%d aggregates retry on 2 keys; want 3 (k1's, k2's, alpha's)", n)
	}
	if n := strings.Count(s, "local keys = 1\n"); n != 1 {
		t.Errorf("%d aggregates retry on 1 key; want the pinned key's", n)
	}
	// beta keeps its one key: one cluster, the credential injected there.
	if _, ok := cs["beta"]; !ok || strings.Contains(s, "beta--") {
		t.Error("beta, with one key, should keep its single cluster")
	}
}

// The reduced contract cannot express a pool: refused, naming the field.
func TestPoolNeedsTheFullContract(t *testing.T) {
	c := pooled(t)
	c.Envoy.Contract = config.ContractReduced
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "upstreams[0].keys") {
		t.Fatalf("a pool with the reduced contract: %v", err)
	}
}

// Bad pools are refused naming the field.
func TestPoolValidation(t *testing.T) {
	for name, edit := range map[string]func(u *config.Upstream){
		"keys[1].name":   func(u *config.Upstream) { u.VendorKeys[1].Name = "K-2" },
		"twice":          func(u *config.Upstream) { u.VendorKeys[1].Name = "k1" },
		"exactly one":    func(u *config.Upstream) { u.VendorKeys[0].File = "/x" },
		"credential_env": func(u *config.Upstream) { u.CredentialEnv = "ALPHA_API_KEY" },
		"every key is pinned": func(u *config.Upstream) {
			for i := range u.VendorKeys {
				u.VendorKeys[i].Accounts = []string{"acct_x"}
			}
		},
		"weight": func(u *config.Upstream) { u.VendorKeys[0].Weight = 0 },
	} {
		c := pooled(t)
		edit(&c.Upstreams[0])
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// A pool's listener runs the headroom filter between ext_proc and the
// router (so that a reply passes it before ext_proc), and ext_proc
// forwards its metadata namespace; without a pool, neither.
func TestRenderPoolHeadroom(t *testing.T) {
	filters := func(c *config.Config) (names []string, forwarded []string) {
		b, err := envoy.Render(c, envoy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var boot struct {
			StaticResources struct {
				Listeners []struct {
					Name         string `yaml:"name"`
					FilterChains []struct {
						Filters []struct {
							TypedConfig struct {
								HTTPFilters []struct {
									Name        string `yaml:"name"`
									TypedConfig struct {
										MetadataOptions struct {
											Forwarding struct {
												Untyped []string `yaml:"untyped"`
											} `yaml:"forwarding_namespaces"`
										} `yaml:"metadata_options"`
									} `yaml:"typed_config"`
								} `yaml:"http_filters"`
							} `yaml:"typed_config"`
						} `yaml:"filters"`
					} `yaml:"filter_chains"`
				} `yaml:"listeners"`
			} `yaml:"static_resources"`
		}
		if err := yaml.Unmarshal(b, &boot); err != nil {
			t.Fatal(err)
		}
		for _, l := range boot.StaticResources.Listeners {
			if l.Name != "public" {
				continue
			}
			for _, nf := range l.FilterChains[0].Filters {
				for _, f := range nf.TypedConfig.HTTPFilters {
					names = append(names, f.Name)
					forwarded = append(forwarded, f.TypedConfig.MetadataOptions.Forwarding.Untyped...)
				}
			}
		}
		return names, forwarded
	}
	names, forwarded := filters(pooled(t))
	if !slices.Equal(names, []string{"envoy.filters.http.ext_proc", "gateway.headroom", "envoy.filters.http.router"}) ||
		!slices.Equal(forwarded, []string{keypool.HeadroomNamespace}) {
		t.Errorf("pooled: filters %v, ext_proc forwards %v; want the headroom filter after ext_proc, its namespace forwarded", names, forwarded)
	}
	c, err := config.Load("../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if names, forwarded := filters(c); slices.Contains(names, "gateway.headroom") || len(forwarded) > 0 {
		t.Errorf("no pool: filters %v, ext_proc forwards %v; want neither", names, forwarded)
	}
}
