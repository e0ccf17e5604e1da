package deploy_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	istionet "istio.io/api/networking/v1alpha3"
	sigsyaml "sigs.k8s.io/yaml"

	// The typed configs of an Istio-shaped listener, for protojson's Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/cors/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
)

// The EnvoyFilter applied to a listener in the shape an Istio ingress
// gateway has (an HTTP connection manager whose virtual host holds another
// application's route beside the upstreams' routes, named as the
// VirtualService's http[].name), and a real Envoy run with it: the other
// application's route never reaches ext_proc (a counting processor stands
// for the sidecar) and keeps the client's address; the upstreams' routes do
// reach it and drop the address; /health, /v1/usage and /console reach the
// sidecar's control port (a stub behind mutual TLS) without ext_proc.
// istiod's merge itself cannot run here: the test applies the patches as
// istiod's route, filter and cluster patching does (MERGE onto the routes
// of the matched name, INSERT_FIRST in a virtual host holding the matched
// route, INSERT_BEFORE the router, ADD), and fails on any other patch.
func TestIstioFilterStaysOnItsRoutes(t *testing.T) {
	bin := envoyBinary(t) // skips under -short
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pki := mtlstest.Write(t, t.TempDir(), "istio")
	proc := startProcessor(t, pki)
	control := startControl(t, pki)
	vendor := startRecorder(t)
	other := startRecorder(t)

	admin, public := freeAddr(t), freeAddr(t)
	boot := istioShapedBootstrap(t, cfg, admin, public, vendor.addr, other.addr)
	applyEnvoyFilter(t, boot, istioSpec(t, decodeDir(t, deploy.IstioDir)))
	pointAt(t, boot, deploy.ExtProcCluster, proc.addr)
	pointAt(t, boot, deploy.ControlCluster, control.addr)
	out, err := protojson.Marshal(boot)
	if err != nil {
		t.Fatal(err)
	}
	out = bytes.ReplaceAll(out, []byte("/etc/gateway-envoy-client/tls.crt"), []byte(pki.ClientCert))
	out = bytes.ReplaceAll(out, []byte("/etc/gateway-envoy-client/tls.key"), []byte(pki.ClientKey))
	out = bytes.ReplaceAll(out, []byte("/etc/gateway-tls/ca.crt"), []byte(pki.CA))
	envoyValidate(t, "istio-shaped.json", out)
	runEnvoy(t, bin, out, admin)

	client := &http.Client{Timeout: 30 * time.Second}
	send := func(method, path string, body io.Reader) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+public+path, body)
		if err != nil {
			t.Fatal(err)
		}
		// What a client may send about its address: none of it may reach
		// a vendor.
		req.Header.Set("x-forwarded-for", "203.0.113.7")
		req.Header.Set("x-real-ip", "203.0.113.7")
		req.Header.Set("forwarded", "for=203.0.113.7")
		req.Header.Set("x-envoy-external-address", "203.0.113.7")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	do := func(method, path string) (int, string) {
		t.Helper()
		return send(method, path, strings.NewReader(`{"model":"m","max_tokens":1}`))
	}

	// Another application's route: answered by it, never by the sidecar.
	for _, p := range []string{"/other-app/items", "/other-app/v1/messages"} {
		if code, body := do("POST", p); code != http.StatusOK || body != "recorded" {
			t.Errorf("POST %s: %d %q, want the other application's 200", p, code, body)
		}
	}
	if got := proc.paths(); len(got) != 0 {
		t.Fatalf("the other application's requests reached ext_proc: %v", got)
	}
	if h := other.last(); h.Get("x-forwarded-for") == "" {
		t.Error("the other application's route lost x-forwarded-for: the address removal must stay on the upstreams' routes")
	}

	// The control server's paths: served, without ext_proc.
	for _, p := range []string{"/health", "/v1/usage", "/v1/usage/keys", "/console/"} {
		if code, body := do("GET", p); code != http.StatusOK || body != "control "+p {
			t.Errorf("GET %s: %d %q, want the control server's 200", p, code, body)
		}
	}
	if got := proc.paths(); len(got) != 0 {
		t.Fatalf("the control paths reached ext_proc: %v", got)
	}

	// The upstreams' routes: through ext_proc to the vendor, without the
	// client's address.
	var want []string
	for _, u := range cfg.Upstreams {
		p := "/" + u.Name + "/v1/messages"
		want = append(want, p)
		if code, body := do("POST", p); code != http.StatusOK || body != "recorded" {
			t.Errorf("POST %s: %d %q, want the vendor's 200", p, code, body)
		}
		h := vendor.last()
		for _, k := range []string{"x-forwarded-for", "x-real-ip", "forwarded", "x-envoy-external-address"} {
			if v := h.Get(k); v != "" && !cfg.Envoy.ForwardClientAddress {
				t.Errorf("POST %s: the vendor received %s: %s", p, k, v)
			}
		}
	}
	// A body larger than the listener's buffer (the ingress gateway's own,
	// Envoy's default of 1 MiB, as the bootstrap's listener) and within
	// limits.max_request_bytes: buffered for ext_proc by the route's
	// request_body_buffer_limit, not refused with 413.
	big := fmt.Sprintf(`{"model":"m","max_tokens":1,"pad":"%s"}`, strings.Repeat("x", 2*config.ReadBufferBytes))
	if int64(len(big)) > cfg.Limits.MaxRequestBytes {
		t.Fatalf("a body of %d bytes is above limits.max_request_bytes", len(big))
	}
	p := "/" + cfg.Upstreams[0].Name + "/v1/messages"
	if code, body := send("POST", p, strings.NewReader(big)); code != http.StatusOK || body != "recorded" {
		t.Errorf("POST %s with %d bytes: %d %q, want the vendor's 200", p, len(big), code, body)
	}
	want = append(want, p)
	if got := proc.paths(); !slices.Equal(got, want) {
		t.Errorf("ext_proc saw %v, want the upstreams' requests %v", got, want)
	}

	// A path no route takes: Envoy's 404, still no ext_proc.
	if code, _ := do("GET", "/nowhere"); code != http.StatusNotFound {
		t.Errorf("GET /nowhere: %d, want 404", code)
	}
	if got := proc.paths(); len(got) != len(want) {
		t.Errorf("ext_proc saw %v after an unrouted request, want %v", got, want)
	}
	if n := other.count(); n != 2 {
		t.Errorf("the other application received %d requests, want 2", n)
	}
}

// istioShapedBootstrap is a static Envoy configuration in the shape of an
// Istio ingress gateway's: a listener whose connection manager has Istio's
// edge settings and a route configuration holding one virtual host, with
// another application's route first and a route per upstream named after
// it (what a VirtualService with http[].name NAME renders).
func istioShapedBootstrap(t *testing.T, cfg *config.Config, admin, public, vendor, other string) *bootstrapv3.Bootstrap {
	t.Helper()
	host := func(a string) string { h, _ := bootAddr(t, a); return h }
	portOf := func(a string) int { _, p := bootAddr(t, a); return p }
	var routes, clusters strings.Builder
	for _, u := range cfg.Upstreams {
		fmt.Fprintf(&routes, `
              - name: %[1]s
                match: {prefix: /%[1]s/}
                route: {cluster: "outbound|443||%[1]s.vendor.example", prefix_rewrite: /, timeout: 0s}`, u.Name)
		fmt.Fprintf(&clusters, `
  - name: "outbound|443||%s.vendor.example"
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: vendor
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %s, port_value: %d}}}}]}]`, u.Name, host(vendor), portOf(vendor))
	}
	doc := fmt.Sprintf(`
admin:
  address: {socket_address: {address: %s, port_value: %d}}
static_resources:
  listeners:
  - name: 0.0.0.0_8080
    address: {socket_address: {address: %s, port_value: %d}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: outbound_0.0.0.0_8080
          use_remote_address: true
          forward_client_cert_details: SANITIZE_SET
          normalize_path: true
          path_with_escaped_slashes_action: KEEP_UNCHANGED
          route_config:
            name: http.8080
            validate_clusters: false
            virtual_hosts:
            - name: "*:80"
              domains: ["*"]
              include_request_attempt_count: true
              routes:
              - name: other-app
                match: {prefix: /other-app/}
                route: {cluster: "outbound|80||other-app.apps.svc.cluster.local", timeout: 0s}%s
          http_filters:
          - name: envoy.filters.http.cors
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors}
          - name: envoy.filters.http.fault
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault}
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: "outbound|80||other-app.apps.svc.cluster.local"
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: other-app
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: %s, port_value: %d}}}}]}]%s
`, host(admin), portOf(admin), host(public), portOf(public), routes.String(), host(other), portOf(other), clusters.String())
	js, err := sigsyaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("the Istio-shaped bootstrap: %v", err)
	}
	return &b
}

// applyEnvoyFilter applies the EnvoyFilter's patches to b as istiod
// patches a gateway's configuration: route merges first, then the route
// inserts in order, each in every virtual host that holds a route of the
// matched name; the HTTP filter before the named sub-filter of every HTTP
// connection manager; clusters added. Anything else fails the test rather
// than being applied wrongly.
func applyEnvoyFilter(t *testing.T, b *bootstrapv3.Bootstrap, spec *istionet.EnvoyFilter) {
	t.Helper()
	hcms := connectionManagers(t, b)
	decode := func(p *istionet.EnvoyFilter_EnvoyConfigObjectPatch, m proto.Message) {
		js, err := protojson.Marshal(p.Patch.GetValue())
		if err != nil {
			t.Fatal(err)
		}
		if err := protojson.Unmarshal(js, m); err != nil {
			t.Fatalf("patch %s: %v", p.ApplyTo, err)
		}
	}
	vhosts := func() []*routev3.VirtualHost {
		var out []*routev3.VirtualHost
		for _, h := range hcms {
			out = append(out, h.m.GetRouteConfig().GetVirtualHosts()...)
		}
		return out
	}
	holds := func(vh *routev3.VirtualHost, name string) bool {
		return slices.ContainsFunc(vh.Routes, func(r *routev3.Route) bool { return r.Name == name })
	}
	var inserts []*istionet.EnvoyFilter_EnvoyConfigObjectPatch
	for _, p := range spec.ConfigPatches {
		if p.Match.GetContext() != istionet.EnvoyFilter_GATEWAY {
			t.Fatalf("patch %s: context %s", p.ApplyTo, p.Match.GetContext())
		}
		op := p.Patch.Operation
		switch {
		case p.ApplyTo == istionet.EnvoyFilter_HTTP_ROUTE && op == istionet.EnvoyFilter_Patch_MERGE:
			name := p.Match.GetRouteConfiguration().GetVhost().GetRoute().GetName()
			var v routev3.Route
			decode(p, &v)
			merged := 0
			for _, vh := range vhosts() {
				for _, r := range vh.Routes {
					if r.Name == name {
						proto.Merge(r, &v)
						merged++
					}
				}
			}
			if merged != 1 {
				t.Fatalf("route patch MERGE %s: merged onto %d routes, want 1", name, merged)
			}
		case p.ApplyTo == istionet.EnvoyFilter_HTTP_ROUTE && op == istionet.EnvoyFilter_Patch_INSERT_FIRST:
			inserts = append(inserts, p) // after the merges, as istiod does
		case p.ApplyTo == istionet.EnvoyFilter_HTTP_FILTER && op == istionet.EnvoyFilter_Patch_INSERT_BEFORE:
			if p.Match.GetListener().GetFilterChain().GetFilter().GetName() != "envoy.filters.network.http_connection_manager" {
				t.Fatalf("filter patch: matches %v", p.Match.GetListener())
			}
			sub := p.Match.GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
			var f hcmv3.HttpFilter
			decode(p, &f)
			for _, h := range hcms {
				i := slices.IndexFunc(h.m.HttpFilters, func(x *hcmv3.HttpFilter) bool { return x.Name == sub })
				if i < 0 {
					t.Fatalf("filter patch: no %s in the connection manager", sub)
				}
				h.m.HttpFilters = slices.Insert(h.m.HttpFilters, i, proto.Clone(&f).(*hcmv3.HttpFilter))
			}
		case p.ApplyTo == istionet.EnvoyFilter_CLUSTER && op == istionet.EnvoyFilter_Patch_ADD:
			c := &clusterv3.Cluster{}
			decode(p, c)
			b.StaticResources.Clusters = append(b.StaticResources.Clusters, c)
		default:
			t.Fatalf("patch %s %s: not applied by this test", p.ApplyTo, op)
		}
	}
	for _, p := range inserts {
		name := p.Match.GetRouteConfiguration().GetVhost().GetRoute().GetName()
		var v routev3.Route
		decode(p, &v)
		for _, vh := range vhosts() {
			if holds(vh, name) {
				vh.Routes = slices.Insert(vh.Routes, 0, proto.Clone(&v).(*routev3.Route))
			}
		}
	}
	for _, h := range hcms {
		h.store()
	}
}

// hcm is an HTTP connection manager of the bootstrap, decoded; store
// writes it back into its listener.
type hcm struct {
	m     *hcmv3.HttpConnectionManager
	store func()
}

func connectionManagers(t *testing.T, b *bootstrapv3.Bootstrap) []hcm {
	t.Helper()
	var out []hcm
	for _, l := range b.StaticResources.Listeners {
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				if f.Name != "envoy.filters.network.http_connection_manager" {
					continue
				}
				m := &hcmv3.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
					t.Fatal(err)
				}
				out = append(out, hcm{m: m, store: storeFilter(t, f, m)})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no HTTP connection manager")
	}
	return out
}

func storeFilter(t *testing.T, f *listenerv3.Filter, m proto.Message) func() {
	return func() {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		f.ConfigType = &listenerv3.Filter_TypedConfig{TypedConfig: a}
	}
}

// pointAt makes the cluster name reach addr (the sidecar's Service name
// resolves nowhere here).
func pointAt(t *testing.T, b *bootstrapv3.Bootstrap, name, addr string) {
	t.Helper()
	h, p := bootAddr(t, addr)
	for _, c := range b.StaticResources.Clusters {
		if c.Name != name {
			continue
		}
		for _, le := range c.GetLoadAssignment().GetEndpoints() {
			for _, ep := range le.LbEndpoints {
				ep.GetEndpoint().Address = &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: h, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
				}}}
			}
		}
		return
	}
	t.Fatalf("no cluster %s", name)
}

// runEnvoy starts Envoy on the configuration and waits until it is ready.
func runEnvoy(t *testing.T, bin string, boot []byte, admin string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "envoy.json")
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-c", path, "--disable-hot-restart", "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait(); cancel() })
	eventually.True(t, 60*time.Second, "Envoy is ready", func() bool {
		resp, err := http.Get("http://" + admin + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// serverTLS is the sidecar's side of the mutual TLS: its certificate, and
// Envoy's client certificate required and checked against the CA.
func serverTLS(t *testing.T, pki mtlstest.PKI, alpn string) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(pki.ServerCert, pki.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{alpn}}
}

// processor is an ext_proc server that records the path of each request
// it is asked about and lets it through unchanged.
type processor struct {
	extprocsvc.UnimplementedExternalProcessorServer
	addr string
	mu   sync.Mutex
	seen []string
}

func (p *processor) paths() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.seen)
}

func (p *processor) Process(s extprocsvc.ExternalProcessor_ProcessServer) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return nil // the request is over
		}
		resp := &extprocsvc.ProcessingResponse{}
		switch r := req.Request.(type) {
		case *extprocsvc.ProcessingRequest_RequestHeaders:
			for _, h := range r.RequestHeaders.GetHeaders().GetHeaders() {
				if h.Key == ":path" {
					p.mu.Lock()
					p.seen = append(p.seen, h.Value+string(h.RawValue))
					p.mu.Unlock()
				}
			}
			resp.Response = &extprocsvc.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocsvc.HeadersResponse{}}
		case *extprocsvc.ProcessingRequest_RequestBody:
			resp.Response = &extprocsvc.ProcessingResponse_RequestBody{RequestBody: &extprocsvc.BodyResponse{}}
		case *extprocsvc.ProcessingRequest_RequestTrailers:
			resp.Response = &extprocsvc.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocsvc.TrailersResponse{}}
		case *extprocsvc.ProcessingRequest_ResponseHeaders:
			resp.Response = &extprocsvc.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocsvc.HeadersResponse{}}
		case *extprocsvc.ProcessingRequest_ResponseBody:
			resp.Response = &extprocsvc.ProcessingResponse_ResponseBody{ResponseBody: &extprocsvc.BodyResponse{}}
		default:
			return fmt.Errorf("unexpected ext_proc message %T", r)
		}
		if err := s.Send(resp); err != nil {
			return nil
		}
	}
}

func startProcessor(t *testing.T, pki mtlstest.PKI) *processor {
	t.Helper()
	l := listen(t)
	p := &processor{addr: l.Addr().String()}
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS(t, pki, "h2"))))
	extprocsvc.RegisterExternalProcessorServer(srv, p)
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return p
}

// control stands for the sidecar's control server: it answers every path
// with "control PATH", behind mutual TLS.
type control struct{ addr string }

func startControl(t *testing.T, pki mtlstest.PKI) control {
	t.Helper()
	l := tls.NewListener(listen(t), serverTLS(t, pki, "http/1.1"))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "control "+r.URL.Path)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return control{addr: l.Addr().String()}
}

// recorder is a plain HTTP upstream that keeps the headers of each request
// and answers "recorded".
type recorder struct {
	addr    string
	mu      sync.Mutex
	headers []http.Header
}

func (r *recorder) last() http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.headers) == 0 {
		return http.Header{}
	}
	return r.headers[len(r.headers)-1]
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.headers)
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	l := listen(t)
	rec := &recorder{addr: l.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		rec.mu.Lock()
		rec.headers = append(rec.headers, r.Header.Clone())
		rec.mu.Unlock()
		io.WriteString(w, "recorded")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return rec
}
