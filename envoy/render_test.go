package envoy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
)

func load(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load("../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Envoy itself validates these renderings in test/integration
// (envoy --mode validate); the tests here read them.

// TLS goes only to the endpoints that use https.
func TestRenderTLSOnlyForHTTPS(t *testing.T) {
	c := load(t)
	// Plain-HTTP endpoints (local fakes) and a custom CA.
	c.Upstreams[0].Primary.URL = "http://127.0.0.1:9001"
	c.Upstreams[0].Reserve = config.Endpoint{URL: "https://reserve.example.com:8443", TrustedCA: "/etc/ssl/certs/ca-certificates.crt"}
	c.Upstreams[1].Primary.URL = "http://localhost:9002"
	c.Upstreams[1].Reserve.URL = "http://localhost:9003"
	b, err := envoy.Render(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "tls: reserve") || strings.Count(string(b), "envoy.transport_sockets.tls") != 1 {
		t.Fatalf("want TLS only for alpha's reserve endpoint:\n%s", b)
	}
}

// The checked-in compose bootstraps are exactly what the generator renders.
func TestCheckedInBootstrapIsCurrent(t *testing.T) {
	c := load(t)
	for _, f := range envoy.Compose {
		want, err := f.Render(c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join("..", f.Path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s has drifted from gateway.yaml: run `make envoy-config`", f.Path)
		}
	}
}

func TestRenderedRoutesAndFilters(t *testing.T) {
	b, err := envoy.Render(load(t), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		"prefix: /alpha/", "prefix: /beta/", "path: /health", "path: /v1/usage",
		// The response is processed only when the processor asks (metered
		// requests override the mode), so that Envoy's reply to a malformed
		// request is never held.
		"request_body_mode: BUFFERED", "response_header_mode: SKIP", "allow_mode_override: true", "failure_mode_allow: false",
		"request_headers_timeout: 10s", "max_request_headers_kb: 60", "max_headers_count: 100",
		"max_connection_duration: 3600s", "envoy.filters.network.connection_limit",
		"request_headers_to_remove: [x-forwarded-for, x-envoy-external-address, x-real-ip, forwarded]",
		"max_ejection_percent: 100", "enforcing_consecutive_gateway_failure: 100",
		// Only the ejection time returns an ejected host, not a passing probe.
		"successful_active_health_check_uneject_host: false",
		"envoy.retry_priorities.previous_priorities", "timeout: 0s",
		"path_with_escaped_slashes_action: REJECT_REQUEST", "headers_with_underscores_action: REJECT_REQUEST",
		"per_connection_buffer_limit_bytes: 33554432",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("bootstrap lacks %q", want)
		}
	}
	bare, _ := envoy.Render(load(t), envoy.Options{Bare: true})
	if strings.Contains(string(bare), "ext_proc") {
		t.Error("bare bootstrap still has the ext_proc filter")
	}
}

// With the sidecar behind mutual TLS, both sidecar clusters present Envoy's
// client certificate; the admin interface never leaves loopback.
func TestRenderSidecarTLSAndAdminLoopback(t *testing.T) {
	c := load(t)
	pki := mtlstest.Write(t, t.TempDir(), "gw")
	c.Listeners.TLS = config.SidecarTLS{CA: pki.CA, ServerCert: pki.ServerCert, ServerKey: pki.ServerKey,
		ClientCert: pki.ClientCert, ClientKey: pki.ClientKey}
	b, err := envoy.Render(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), pki.ClientCert); n != 2 {
		t.Fatalf("client certificate in %d clusters, want extproc and control", n)
	}
	for _, admin := range []string{"0.0.0.0:9901", "10.0.0.5:9901", "[::]:9901"} {
		if _, err := envoy.Render(c, envoy.Options{AdminAddr: admin}); err == nil {
			t.Errorf("admin on %s rendered", admin)
		}
	}
	// Vendor keys: one secret per upstream, read from Envoy's environment,
	// injected on the upstream cluster; none without credential_env.
	c.Upstreams[1].CredentialEnv = ""
	b, err = envoy.Render(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), "envoy.filters.http.credential_injector") != 1 || !strings.Contains(string(b), "environment_variable: ALPHA_API_KEY") || strings.Contains(string(b), "BETA_API_KEY") {
		t.Fatalf("credential injection not as configured:\n%s", b)
	}
}

// The circuit breakers and the stream duration come from gateway.yaml, on
// the processor's cluster and every upstream's: Envoy's defaults (1,024)
// would refuse long streams beyond that.
func TestCircuitBreakersFromConfig(t *testing.T) {
	c := load(t)
	c.Envoy.CircuitBreakers = config.CircuitBreakers{MaxConnections: 1111, MaxPendingRequests: 2222, MaxRequests: 3333}
	c.Envoy.MaxStreamDuration = config.Duration(7 * 60 * 1e9)
	boot, err := envoy.Render(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	clusters := 1 + len(c.Upstreams) // the processor and each upstream
	for _, want := range []string{"max_connections: 1111", "max_pending_requests: 2222", "max_requests: 3333"} {
		if n := strings.Count(string(boot), want); n != clusters {
			t.Errorf("%q appears %d times, want %d", want, n, clusters)
		}
	}
	if n := strings.Count(string(boot), "max_stream_duration: {max_stream_duration: 420s}"); n != len(c.Upstreams) {
		t.Errorf("max_stream_duration on %d routes, want %d", n, len(c.Upstreams))
	}
}
