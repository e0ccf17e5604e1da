// Package tracing exports the sidecar's OpenTelemetry spans by OTLP (gRPC or
// HTTP) to the collector gateway.yaml names. Spans are queued and exported
// in batches by a background goroutine; when the queue is full (a collector
// that is slow or gone) new spans are dropped, so tracing never waits on the
// request path.
package tracing

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc/metadata"

	"github.com/modelgateway/gateway/internal/config"
)

// Bounds of the export queue and of one export.
const (
	queueSize     = 4096
	batchSize     = 512
	batchInterval = time.Second
	exportTimeout = 5 * time.Second
)

// Provider makes the sidecar's tracer.
type Provider struct {
	tp *sdktrace.TracerProvider // nil when tracing is off
}

// New starts exporting spans as cfg says; with tracing off it returns a
// provider whose tracer records nothing. service names the process in the
// spans' resource.
func New(cfg config.Tracing, service string) (*Provider, error) {
	if !cfg.Enabled() {
		return &Provider{}, nil
	}
	var (
		client otlptrace.Client
	)
	switch cfg.Protocol {
	case config.TracingHTTP:
		client = otlptracehttp.NewClient(otlptracehttp.WithEndpoint(cfg.Endpoint), otlptracehttp.WithInsecure(),
			otlptracehttp.WithTimeout(exportTimeout), otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	default:
		client = otlptracegrpc.NewClient(otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure(),
			otlptracegrpc.WithTimeout(exportTimeout), otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false}))
	}
	// New does not dial: a collector that is not there yet only costs the
	// batches sent to it.
	exp, err := otlptrace.New(context.Background(), client)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		// Envoy decides for the requests it traces; the share applies to
		// requests that arrive without a trace context.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.Sampling()/100))),
		sdktrace.WithBatcher(exp,
			sdktrace.WithMaxQueueSize(queueSize), sdktrace.WithMaxExportBatchSize(batchSize),
			sdktrace.WithBatchTimeout(batchInterval), sdktrace.WithExportTimeout(exportTimeout)),
	)
	return &Provider{tp: tp}, nil
}

// Tracer is the tracer of the named component.
func (p *Provider) Tracer(name string) trace.Tracer {
	if p == nil || p.tp == nil {
		return noop.NewTracerProvider().Tracer(name)
	}
	return p.tp.Tracer(name)
}

// Shutdown exports the spans still queued, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.tp == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

var propagator = propagation.TraceContext{}

// FromIncomingGRPC returns ctx carrying the remote span named by the W3C
// traceparent (and tracestate) of the gRPC call's metadata, as Envoy sends
// it on the ext_proc stream; ctx as it is without one.
func FromIncomingGRPC(ctx context.Context) context.Context {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok || len(md.Get("traceparent")) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, mdCarrier(md))
}

// mdCarrier reads gRPC metadata as a propagation carrier.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
