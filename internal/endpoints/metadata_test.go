package endpoints

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// dumpSample is Envoy's /config_dump?include_eds, masked to the endpoints:
// alpha's hosts carry their endpoint names, beta's reserve does not, and
// gamma (no upstream's) has none.
const dumpSample = `{"configs":[{"@type":"type.googleapis.com/envoy.admin.v3.EndpointsConfigDump",
 "static_endpoint_configs":[
  {"endpoint_config":{"cluster_name":"alpha","endpoints":[
    {"lb_endpoints":[{"metadata":{"filter_metadata":{"gateway":{"endpoint":"primary","key":"default"}}}}]},
    {"priority":1,"lb_endpoints":[{"metadata":{"filter_metadata":{"gateway":{"endpoint":"reserve"}}}}]}]}},
  {"endpoint_config":{"cluster_name":"gamma","endpoints":[{"lb_endpoints":[{}]}]}}],
 "dynamic_endpoint_configs":[
  {"endpoint_config":{"cluster_name":"beta","endpoints":[
    {"lb_endpoints":[{"metadata":{"filter_metadata":{"gateway":{"endpoint":"primary"}}}}]},
    {"priority":1,"lb_endpoints":[{"metadata":{"filter_metadata":{"envoy.lb":{"canary":true}}}}]}]}}]}]}`

// With the full contract, a cluster whose hosts lack their endpoint
// metadata is named in one warning, once, as the watcher first finds it;
// clusters with the metadata, and clusters no upstream uses, are not.
func TestWarnsOnHostsWithoutEndpointMetadata(t *testing.T) {
	for _, require := range []bool{true, false} {
		var dumps atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Path == "/clusters":
				w.Write([]byte(sample))
			case r.URL.Path == "/config_dump" && r.URL.Query().Has("include_eds"):
				dumps.Add(1)
				w.Write([]byte(dumpSample))
			default:
				http.NotFound(w, r)
			}
		}))
		var logs bytes.Buffer
		w := NewWatcher(srv.URL, []Upstream{{Name: "alpha", Cluster: "alpha"}, {Name: "beta", Cluster: "beta"}, {Name: "delta", Cluster: "delta"}},
			nil, slog.New(slog.NewTextHandler(&logs, nil)))
		if require {
			w.RequireEndpointMetadata()
		}
		for range 3 {
			if err := w.Poll(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		srv.Close()
		warned := strings.Count(logs.String(), "without their gateway.endpoint metadata")
		switch {
		case !require && (warned != 0 || dumps.Load() != 0):
			t.Errorf("reduced contract: %d warnings, %d dumps read", warned, dumps.Load())
		case require && (warned != 1 || !strings.Contains(logs.String(), "Envoy cluster beta has 1 host(s)") || !strings.Contains(logs.String(), "upstream=beta")):
			t.Errorf("want one warning naming beta:\n%s", logs.String())
		case require && dumps.Load() != 1:
			// delta is absent from /clusters: never asked about.
			t.Errorf("%d config dumps read, want 1 (each cluster once, as it appears)", dumps.Load())
		}
	}
}
