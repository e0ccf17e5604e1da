package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/modelgateway/gateway/internal/config"
)

// The W3C trace context of the ext_proc stream's metadata becomes the
// parent; without one, nothing changes.
func TestFromIncomingGRPC(t *testing.T) {
	md := metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	sc := trace.SpanContextFromContext(FromIncomingGRPC(metadata.NewIncomingContext(context.Background(), md)))
	if !sc.IsRemote() || !sc.IsSampled() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("span context %+v", sc)
	}
	if sc := trace.SpanContextFromContext(FromIncomingGRPC(context.Background())); sc.IsValid() {
		t.Fatalf("a context without metadata got %+v", sc)
	}
}

// Off, the tracer records nothing; on, spans of a sampled parent are
// recorded, and New does not need the collector to be up.
func TestProvider(t *testing.T) {
	off, err := New(config.Tracing{}, "test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := off.Tracer("x").Start(context.Background(), "s")
	if span.IsRecording() {
		t.Fatal("tracing off records spans")
	}
	zero := 0.0
	on, err := New(config.Tracing{Endpoint: "127.0.0.1:1", Protocol: config.TracingHTTP, SamplingPercent: &zero}, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer on.Shutdown(context.Background())
	md := metadata.Pairs("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	_, span = on.Tracer("x").Start(FromIncomingGRPC(metadata.NewIncomingContext(context.Background(), md)), "s")
	if !span.IsRecording() {
		t.Fatal("a sampled parent's child is not recorded")
	}
	span.End()
	_, span = on.Tracer("x").Start(context.Background(), "s")
	if span.IsRecording() {
		t.Fatal("a root span recorded at 0% sampling")
	}
}
