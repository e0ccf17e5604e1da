package integration

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Every kind of bootstrap the gateway renders passes `envoy --mode
// validate`, which checks every typed config and field without opening a
// port: the defaults, the benchmark's bare reference, the docker-compose
// files, plain-HTTP endpoints beside one with a custom CA, the sidecar behind
// mutual TLS, a single vendor key, circuit breakers from the config,
// tracing over gRPC and HTTP, and pools of vendor keys.
func TestRenderingsPassEnvoyValidate(t *testing.T) {
	skipShort(t)
	load := func() *config.Config {
		c, err := config.Load(filepath.Join(launchtest.RepoRoot(t), "gateway.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	render := func(c *config.Config, o envoy.Options) []byte {
		b, err := envoy.Render(c, o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	boots := map[string][]byte{
		"default.yaml": render(load(), envoy.Options{}),
		"bare.yaml":    render(load(), envoy.Options{Bare: true}),
	}
	for _, f := range envoy.Compose {
		b, err := f.Render(load())
		if err != nil {
			t.Fatal(err)
		}
		boots[filepath.Base(f.Path)] = b
	}
	mixed := load()
	mixed.Upstreams[0].Primary.URL = "http://127.0.0.1:9001"
	mixed.Upstreams[0].Reserve = config.Endpoint{URL: "https://reserve.example.com:8443", TrustedCA: "/etc/ssl/certs/ca-certificates.crt"}
	mixed.Upstreams[1].Primary.URL = "http://localhost:9002"
	mixed.Upstreams[1].Reserve.URL = "http://localhost:9003"
	boots["mixed.yaml"] = render(mixed, envoy.Options{})

	tls := load()
	pki := mtlstest.Write(t, t.TempDir(), "gw")
	tls.Listeners.TLS = config.SidecarTLS{CA: pki.CA, ServerCert: pki.ServerCert, ServerKey: pki.ServerKey,
		ClientCert: pki.ClientCert, ClientKey: pki.ClientKey}
	boots["tls.yaml"] = render(tls, envoy.Options{})
	tls.Upstreams[1].CredentialEnv = ""
	boots["one-key.yaml"] = render(tls, envoy.Options{})

	breakers := load()
	breakers.Envoy.CircuitBreakers = config.CircuitBreakers{MaxConnections: 1111, MaxPendingRequests: 2222, MaxRequests: 3333}
	breakers.Envoy.MaxStreamDuration = config.Duration(7 * 60 * 1e9)
	boots["breakers.yaml"] = render(breakers, envoy.Options{})

	grpc, http := load(), load()
	one := 1.0
	grpc.Tracing = config.Tracing{Endpoint: "collector.internal:4317", Protocol: config.TracingGRPC, SamplingPercent: &one}
	boots["tracing-grpc.yaml"] = render(grpc, envoy.Options{})
	http.Tracing = config.Tracing{Endpoint: "127.0.0.1:4318", Protocol: config.TracingHTTP}
	boots["tracing-http.yaml"] = render(http, envoy.Options{})

	// The reduced contract (docs/envoy.md), with own cluster names and an
	// upstream without a reserve.
	reduced := load()
	reduced.Envoy.Contract = config.ContractReduced
	reduced.Upstreams[0].EnvoyCluster = "vendor-a-primary"
	reduced.Upstreams[0].Reserve = config.Endpoint{}
	boots["reduced.yaml"] = render(reduced, envoy.Options{})

	// A pool of keys from the environment, a file and file-based SDS, one
	// pinned to an account, beside an upstream without a reserve.
	pool := load()
	secretFile := filepath.Join(t.TempDir(), "alpha-k2")
	if err := os.WriteFile(secretFile, []byte("not-a-real-key"), 0o600); err != nil {
		t.Fatal(err)
	}
	sdsFile := filepath.Join(t.TempDir(), "alpha-tenant.yaml")
	if err := os.WriteFile(sdsFile, []byte(`resources:
- "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret
  name: alpha-vendor-key-tenant
  generic_secret: {secret: {inline_string: not-a-real-key}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"ALPHA_KEY_1", "BETA_KEY_A", "BETA_KEY_B"} {
		t.Setenv(env, "not-a-real-key")
	}
	pool.Upstreams[0].CredentialEnv = ""
	pool.Upstreams[0].VendorKeys = []config.VendorKey{{Name: "k1", Env: "ALPHA_KEY_1", Weight: 1},
		{Name: "k2", File: secretFile, Weight: 2},
		{Name: "tenant", SDS: sdsFile, Weight: 1, Accounts: []string{"acct_t"}}}
	pool.Upstreams[1].CredentialEnv = ""
	pool.Upstreams[1].Reserve = config.Endpoint{}
	pool.Upstreams[1].VendorKeys = []config.VendorKey{{Name: "a", Env: "BETA_KEY_A", Weight: 1}, {Name: "b", Env: "BETA_KEY_B", Weight: 1}}
	if err := pool.Validate(); err != nil {
		t.Fatal(err)
	}
	boots["pool.yaml"] = render(pool, envoy.Options{})
	boots["pool-bare.yaml"] = render(pool, envoy.Options{Bare: true})

	for name, boot := range boots {
		launchtest.EnvoyValidate(t, name, boot)
	}
}
