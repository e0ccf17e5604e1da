package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// ownCluster is the vendor cluster of the platform team's own Envoy: its
// own name, no gateway metadata, no reserve.
const ownCluster = "vendor-a-primary"

// ownBootstrap is a minimal Envoy of a platform team's own (one listener
// with its own catch-all, one cluster for the vendor, named its way), with
// the fragment of c (`gateway envoy-config --fragment`) merged in as
// docs/envoy.md says.
func ownBootstrap(c *config.Config) ([]byte, error) {
	pub, admin := hostPort(c.Listeners.Public), hostPort(c.Listeners.EnvoyAdmin)
	vendor, err := c.Upstreams[0].Primary.Parse()
	if err != nil {
		return nil, err
	}
	own := fmt.Sprintf(`
admin: {address: {socket_address: {address: %s, port_value: %s}}}
static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: %s, port_value: %s}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /}
                direct_response: {status: 404, body: {inline_string: "platform: not here"}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: %s
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: %s
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: %s, port_value: %d}}}
`, admin[0], admin[1], pub[0], pub[1], ownCluster, ownCluster, vendor.Host, vendor.Port)
	var boot map[string]any
	if err := yaml.Unmarshal([]byte(own), &boot); err != nil {
		return nil, err
	}
	raw, err := envoy.RenderFragment(c, envoy.Options{})
	if err != nil {
		return nil, err
	}
	var frag map[string]any
	if err := yaml.Unmarshal(raw, &frag); err != nil {
		return nil, err
	}
	// The merge, piece by piece.
	sr := boot["static_resources"].(map[string]any)
	listener := sr["listeners"].([]any)[0].(map[string]any)
	for k, v := range frag["listener"].(map[string]any) {
		listener[k] = v
	}
	hcm := listener["filter_chains"].([]any)[0].(map[string]any)["filters"].([]any)[0].(map[string]any)["typed_config"].(map[string]any)
	for k, v := range frag["http_connection_manager"].(map[string]any) {
		hcm[k] = v
	}
	vh := hcm["route_config"].(map[string]any)["virtual_hosts"].([]any)[0].(map[string]any)
	vh["routes"] = append(frag["routes"].([]any), vh["routes"].([]any)...)
	hcm["http_filters"] = append([]any{frag["http_filter"]}, hcm["http_filters"].([]any)...)
	if s, ok := frag["secrets"]; ok {
		sr["secrets"] = s
	}
	sr["listeners"] = append(sr["listeners"].([]any), frag["listeners"].([]any)...)
	clusters := sr["clusters"].([]any)
	for _, fc := range frag["clusters"].([]any) {
		fc := fc.(map[string]any)
		if fc["name"] != ownCluster {
			clusters = append(clusters, fc)
			continue
		}
		// The vendor cluster is ours: keep its name and endpoints, take
		// the rest.
		mine := clusters[0].(map[string]any)
		for k, v := range fc {
			if k != "name" && k != "load_assignment" && k != "type" {
				mine[k] = v
			}
		}
	}
	sr["clusters"] = clusters
	return yaml.Marshal(boot)
}

func hostPort(addr string) [2]string {
	h, p, _ := net.SplitHostPort(addr)
	return [2]string{h, p}
}

// A platform team's own minimal Envoy (one listener, its own cluster name,
// no reserve) with the fragment merged: a metered request is billed
// exactly, the ledger names the endpoint, /health and /readyz are ok, its
// own routes still answer, the sidecar warns that the cluster's hosts lack
// their endpoint metadata, and a frozen sidecar gets a 504 in the vendor's
// error format. A sidecar expecting another cluster name says so in one
// line on /health and in its log.
func TestOwnEnvoyWithFragment(t *testing.T) {
	s := launchtest.Start(t, launch.Options{
		Configure: func(c *config.Config) {
			c.Upstreams = c.Upstreams[:1]
			c.Upstreams[0].EnvoyCluster = ownCluster
			c.Upstreams[0].Reserve = config.Endpoint{}
		},
		Bootstrap: func(c *config.Config) ([]byte, error) {
			boot, err := ownBootstrap(c)
			if err == nil {
				launchtest.EnvoyValidate(t, "own-envoy.yaml", boot)
			}
			return boot, err
		},
	})
	acct := s.NewAccount(10, noLimits)
	ap := priceOf(t, s, "alpha", alphaModel)
	resp, body := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("metered request: %d %s\n%s", resp.StatusCode, body, s.Logs())
	}
	want := cost(ap, messagesUsage(t, body, nil))
	s.WaitSettled()
	e := onlyLedgerEntry(t, s, acct.ID)
	if e.Cost != want || e.Cost == 0 || e.Endpoint != "primary" || e.Status != 200 {
		t.Errorf("ledger entry cost %d endpoint %q status %d; want cost %d from the catalogue, endpoint primary", e.Cost, e.Endpoint, e.Status, want)
	}
	for _, url := range []string{s.URL + "/health", s.ControlURL + "/readyz"} {
		code, b := get(t, url)
		if code != 200 {
			t.Errorf("%s: %d %s", url, code, b)
		}
	}
	if resp, b := s.Do("GET", "/elsewhere", nil, nil); resp.StatusCode != 404 || string(b) != "platform: not here" {
		t.Errorf("the platform's own route: %d %q", resp.StatusCode, b)
	}
	// Its own vendor cluster kept its endpoints, without their metadata:
	// the sidecar says so once, naming the cluster.
	warning := "Envoy cluster " + ownCluster + " has 1 host(s) without their gateway.endpoint metadata"
	eventually.That(t, 10*time.Second, "the sidecar warns of the missing metadata", func() (bool, string) {
		return strings.Count(s.Sidecar.Log(), warning) == 1, s.Sidecar.Tail(10)
	})

	// A sidecar whose gateway.yaml names no cluster this Envoy has.
	bad := *s.Config
	bad.Upstreams = []config.Upstream{s.Config.Upstreams[0]}
	bad.Upstreams[0].EnvoyCluster = "alpha"
	addrs, err := launch.FreeAddrs(4)
	if err != nil {
		t.Fatal(err)
	}
	bad.Listeners.ExtProc, bad.Listeners.Control, bad.Listeners.Admin, bad.Listeners.Console = addrs[0], addrs[1], addrs[2], addrs[3]
	bad.Store.SpoolDir = filepath.Join(s.Dir, "spool-misnamed")
	cfgPath := filepath.Join(s.Dir, "misnamed.yaml")
	b, err := yaml.Marshal(&bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	side, err := launch.StartProcess("sidecar-misnamed", launchtest.Binary(t, "gateway"), []string{"serve", "--config", cfgPath},
		[]string{"REDIS_URL=redis://" + s.RedisAddr}, filepath.Join(s.Dir, "sidecar-misnamed.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(side.Stop)
	cause := "no Envoy cluster for upstream alpha: expected cluster named alpha, or set upstreams[].envoy_cluster"
	for _, path := range []string{"/health", "/readyz"} {
		eventually.That(t, 10*time.Second, path+" names the missing cluster", func() (bool, string) {
			code, b := get(t, "http://"+bad.Listeners.Control+path)
			return code == 503 && strings.Contains(b, `"problems":["`+cause+`"]`), fmt.Sprint(code, " ", b)
		})
	}
	if n := strings.Count(side.Log(), cause); n != 1 {
		t.Errorf("the sidecar logged the cause %d times, want once:\n%s", n, side.Tail(20))
	}

	// A frozen sidecar: Envoy's message timeout answers, in the vendor's
	// error format, not with an empty body.
	launchtest.Freeze(t, s.Sidecar)
	resp, body = s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	if resp.StatusCode < 500 || !strings.Contains(string(body), `"type":"error"`) || !strings.Contains(string(body), `"error":{`) {
		t.Errorf("frozen sidecar: %d %q; want a 5xx in the messages error format", resp.StatusCode, body)
	}
	t.Logf("frozen sidecar: %d %s", resp.StatusCode, body)
}

// get answers a GET of url: status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
