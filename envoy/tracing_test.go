package envoy_test

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

// Tracing is off by default; on, the public listener traces with the
// configured sampling to a collector over gRPC or HTTP (Envoy validates
// both renderings in test/integration).
func TestRenderTracing(t *testing.T) {
	c := load(t)
	b, err := envoy.Render(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "opentelemetry") || strings.Contains(string(b), "otel_collector") {
		t.Fatal("tracing rendered while tracing.endpoint is empty")
	}
	one := 1.0
	c.Tracing = config.Tracing{Endpoint: "collector.internal:4317", Protocol: config.TracingGRPC, SamplingPercent: &one}
	b, err = envoy.Render(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{"random_sampling: {value: 1}", "envoy_grpc: {cluster_name: otel_collector}", "address: collector.internal, port_value: 4317"} {
		if !strings.Contains(s, want) {
			t.Fatalf("gRPC tracing: no %q in\n%s", want, s)
		}
	}
	c.Tracing = config.Tracing{Endpoint: "127.0.0.1:4318", Protocol: config.TracingHTTP}
	b, err = envoy.Render(c, envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.Contains(s, `uri: "http://127.0.0.1:4318/v1/traces"`) || !strings.Contains(s, "random_sampling: {value: 100}") {
		t.Fatalf("HTTP tracing:\n%s", s)
	}
}
