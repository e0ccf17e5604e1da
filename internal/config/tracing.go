package config

// Tracing protocols of the OTLP exporters.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http"
)

// Tracing configures OpenTelemetry traces: Envoy starts a trace for each
// model request, the sidecar adds its spans to it, and both export them by
// OTLP to one collector.
type Tracing struct {
	// Endpoint is the collector's host:port (4317 for gRPC, 4318 for HTTP
	// by convention). Empty turns tracing off.
	Endpoint string `yaml:"endpoint"`
	// Protocol is "grpc" (default) or "http" (OTLP/HTTP protobuf).
	Protocol string `yaml:"protocol"`
	// SamplingPercent is the share of requests traced, 0 to 100; a request
	// whose traceparent says sampled is traced whatever the share. Default
	// 100 (when an endpoint is set).
	SamplingPercent *float64 `yaml:"sampling_percent"`
}

// Enabled reports whether traces are exported.
func (t Tracing) Enabled() bool { return t.Endpoint != "" }

// Sampling is the share of requests traced, in percent.
func (t Tracing) Sampling() float64 {
	if t.SamplingPercent == nil {
		return 100
	}
	return *t.SamplingPercent
}
