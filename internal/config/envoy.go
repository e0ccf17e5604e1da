package config

// Envoy holds settings that exist only in the rendered Envoy bootstrap.
type Envoy struct {
	// StreamIdleTimeout ends a stream that sent nothing for this long. It
	// replaces the route timeout, which would cut long SSE replies.
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	// AccessLog is "stdout" or a file path; empty disables Envoy's access log.
	AccessLog string `yaml:"access_log"`
	// Hardening of the public listener.
	RequestHeadersTimeout Duration `yaml:"request_headers_timeout"` // all request headers within this
	MaxRequestHeadersKB   int      `yaml:"max_request_headers_kb"`  // larger header blocks get 431
	MaxHeadersCount       int      `yaml:"max_headers_count"`       // more headers get 431
	MaxConnectionDuration Duration `yaml:"max_connection_duration"` // a connection is drained after this
	MaxConnections        int      `yaml:"max_connections"`         // open client connections, all clients together
	// ForwardClientAddress sends the client's address (x-forwarded-for,
	// x-envoy-external-address) to the vendors; off by default.
	ForwardClientAddress bool `yaml:"forward_client_address"`
	// MaxStreamDuration ends a model request that has run this long, idle
	// or not; default limits.max_request_duration, the lifetime of its hold.
	MaxStreamDuration Duration `yaml:"max_stream_duration"`
	// CircuitBreakers bound the concurrent work Envoy sends to the processor
	// and to each upstream. Every open model request counts once on both.
	CircuitBreakers CircuitBreakers `yaml:"circuit_breakers"`
	// Contract is what the Envoy in front of the sidecar provides
	// (docs/envoy.md): ContractFull, the bootstrap `gateway envoy-config`
	// renders or its fragment, or ContractReduced, what control planes
	// such as Envoy Gateway can express.
	Contract string `yaml:"contract"`
}

// Envoy contracts.
const (
	// ContractFull: the ext_proc filter sends the serving host's metadata,
	// honours max_message_timeout and lets the processor set x-envoy-*
	// headers (the per-try timeout).
	ContractFull = "full"
	// ContractReduced: only response.code and upstream.address, no
	// max_message_timeout, no mutation of x-envoy-* headers. The serving
	// endpoint is found by its address, the concurrency wait is off and
	// each request waits for its reply headers for the route's per-try
	// timeout.
	ContractReduced = "reduced"
)

// Reduced reports whether the Envoy in front provides the reduced contract.
func (e Envoy) Reduced() bool { return e.Contract == ContractReduced }

// CircuitBreakers are Envoy's per-cluster concurrency limits. Envoy's own
// defaults (1,024 connections, pending and active requests, 3 retries)
// refuse the 1,025th concurrent request with a 503: with LLM replies that
// stream for tens of seconds, that is a few tens of requests per second.
type CircuitBreakers struct {
	// MaxConnections bounds the connections to one cluster. HTTP/1.1 to a
	// vendor uses one connection per open request.
	MaxConnections int `yaml:"max_connections"`
	// MaxPendingRequests bounds the requests waiting for a connection.
	MaxPendingRequests int `yaml:"max_pending_requests"`
	// MaxRequests bounds the requests (processor: gRPC streams) open at once.
	MaxRequests int `yaml:"max_requests"`
}
