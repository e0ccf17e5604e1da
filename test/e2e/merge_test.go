package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// A platform team's Envoy (its own listener and routes, its own cluster
// named control to its own service) with the gateway merged in by
// `gateway envoy-config --merge-into` (envoy.Merge): the team's route
// reaches its backend and never the sidecar (no ext_proc stream, the
// sidecar's counts unchanged), while the gateway's route is metered,
// billed and names its endpoint; the sidecar finds every host's endpoint
// metadata and warns of nothing.
func TestMergedOwnEnvoy(t *testing.T) {
	var backendHits atomic.Int32
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		backendHits.Add(1)
		io.WriteString(w, "orders: "+r.URL.Path)
	}))
	defer backend.Close()
	bu, err := url.Parse(backend.URL)
	if err != nil {
		t.Fatal(err)
	}
	s := launchtest.Start(t, launch.Options{
		Bootstrap: func(c *config.Config) ([]byte, error) {
			pub, admin, be := hostPort(c.Listeners.Public), hostPort(c.Listeners.EnvoyAdmin), hostPort(bu.Host)
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
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: /orders/}
                route: {cluster: control}
              - match: {prefix: /}
                direct_response: {status: 404, body: {inline_string: "platform: not here"}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: control
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: control
      endpoints:
      - lb_endpoints:
        - endpoint: {address: {socket_address: {address: %s, port_value: %s}}}
`, admin[0], admin[1], pub[0], pub[1], be[0], be[1])
			m, err := envoy.Merge([]byte(own), c, envoy.Options{}, envoy.MergeOptions{NamePrefix: envoy.DefaultNamePrefix})
			if err != nil {
				return nil, err
			}
			if len(m.Notes) != 0 {
				t.Errorf("notes %v", m.Notes)
			}
			launchtest.EnvoyValidate(t, "merged.yaml", m.Bootstrap)
			return m.Bootstrap, nil
		},
	})
	streams := func() int { return envoyCounter(t, s, "http.ingress.ext_proc.streams_started") }
	sidecarCounts := func() float64 {
		return sidecarMetric(t, s, "gateway_requests_total") + sidecarMetric(t, s, "gateway_rejections_total")
	}
	streams0, counts0 := streams(), sidecarCounts()
	for i := range 5 {
		path := fmt.Sprintf("/orders/%d", i)
		resp, b := s.Do("GET", path, nil, nil)
		if resp.StatusCode != 200 || string(b) != "orders: "+path {
			t.Fatalf("the team's route: %d %q", resp.StatusCode, b)
		}
	}
	if resp, b := s.Do("GET", "/elsewhere", nil, nil); resp.StatusCode != 404 || string(b) != "platform: not here" {
		t.Errorf("the team's catch-all: %d %q", resp.StatusCode, b)
	}
	if n, c := streams(), sidecarCounts(); backendHits.Load() != 5 || n != streams0 || c != counts0 {
		t.Errorf("the team's routes: backend %d of 5, ext_proc streams %d → %d, sidecar counts %v → %v; want none reaching the sidecar",
			backendHits.Load(), streams0, n, counts0, c)
	}

	acct := s.NewAccount(10, noLimits)
	ap := priceOf(t, s, "alpha", alphaModel)
	resp, body := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("metered request: %d %s\n%s", resp.StatusCode, body, s.Logs())
	}
	if ep := resp.Header.Get("x-gateway-endpoint"); ep != "primary" {
		t.Errorf("x-gateway-endpoint %q, want primary (the hosts' metadata)", ep)
	}
	want := cost(ap, messagesUsage(t, body, nil))
	s.WaitSettled()
	e := onlyLedgerEntry(t, s, acct.ID)
	if e.Cost != want || e.Cost == 0 || e.Endpoint != "primary" || e.Status != 200 {
		t.Errorf("ledger entry cost %d endpoint %q status %d; want cost %d, endpoint primary", e.Cost, e.Endpoint, e.Status, want)
	}
	t.Logf("ext_proc streams: %d before, %d after the gateway's route", streams0, streams())
	if n := streams(); n != streams0+1 || sidecarMetric(t, s, "gateway_requests_total") < 1 {
		t.Errorf("ext_proc streams %d → %d, want one more for the gateway's route", streams0, n)
	}
	if code, b := get(t, s.URL+"/health"); code != 200 {
		t.Errorf("/health: %d %s", code, b)
	}
	if strings.Contains(s.Sidecar.Log(), "gateway.endpoint metadata") {
		t.Errorf("the sidecar warns of missing metadata:\n%s", s.Sidecar.Tail(20))
	}
}

// envoyCounter reads one of Envoy's counters from its admin; 0 while
// Envoy has not created it.
func envoyCounter(t *testing.T, s *launch.Stack, name string) int {
	t.Helper()
	resp, err := http.Get(s.AdminURL + "/stats?filter=^" + strings.ReplaceAll(name, ".", `\.`) + "$")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+": "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return n
		}
	}
	return 0
}
