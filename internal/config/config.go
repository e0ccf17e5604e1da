// Package config loads gateway.yaml: the one file that describes listeners,
// upstreams with their endpoints and prices, and default account limits. The
// Envoy bootstrap is rendered from the same Config, so the two cannot drift.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole of gateway.yaml.
type Config struct {
	// Region is the region code of this node, reported by GET /health.
	Region    string    `yaml:"region"`
	Listeners Listeners `yaml:"listeners"`
	Store     Store     `yaml:"store"`
	Limits    Limits    `yaml:"limits"`
	Envoy     Envoy     `yaml:"envoy"`
	// Catalogue is the price catalogue file, in LiteLLM's
	// model_prices_and_context_window.json format. Load makes a relative
	// path relative to the directory of gateway.yaml; the GATEWAY_CATALOGUE
	// environment variable overrides it (the container image sets it).
	Catalogue string     `yaml:"catalogue"`
	Upstreams []Upstream `yaml:"upstreams"`
	// LedgerSink configures `gateway ledger-sink`, which copies the ledger
	// into PostgreSQL.
	LedgerSink LedgerSink `yaml:"ledger_sink"`
	// Tracing exports OpenTelemetry traces of model requests; off unless
	// an endpoint is set.
	Tracing Tracing `yaml:"tracing"`
	// Alerts configure the webhook events.
	Alerts Alerts `yaml:"alerts"`
}

// LedgerSink configures `gateway ledger-sink`. The database URL is not
// here: it carries a password and comes from the command line or the
// environment.
type LedgerSink struct {
	// Listen serves the sink's /metrics and /health. Default 127.0.0.1:9465.
	Listen string `yaml:"listen"`
	// Interval is the pause between passes once every entry is copied, and
	// between attempts to reach the database. Default 1s.
	Interval Duration `yaml:"interval"`
}

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

// Alerts configure the webhook events (docs/limits.md).
type Alerts struct {
	// Interval is how often each sidecar looks at every account's balance,
	// budgets and keys for a crossing.
	Interval Duration `yaml:"interval"`
	// StoreUnreachableAfter is how long the store must fail before
	// store.unreachable fires; 0 never fires it.
	StoreUnreachableAfter Duration `yaml:"store_unreachable_after"`
	// QueueSize bounds the deliveries waiting (retries included); more are
	// dropped and counted.
	QueueSize int       `yaml:"queue_size"`
	Webhooks  []Webhook `yaml:"webhooks"`
}

// Webhook is one receiver of alert events.
type Webhook struct {
	URL string `yaml:"url"`
	// SecretEnv names the environment variable holding the signing secret.
	SecretEnv string `yaml:"secret_env"`
	// Events are the event types sent; empty sends every type.
	Events []string `yaml:"events"`
}

// AlertEvents are the webhook event types.
var AlertEvents = []string{"balance.low", "budget.threshold", "key.expiring", "account.suspended", "account.resumed", "store.unreachable"}

// Listeners are the addresses the gateway's processes bind.
type Listeners struct {
	Public     string `yaml:"public"`      // Envoy: where clients connect
	EnvoyAdmin string `yaml:"envoy_admin"` // Envoy's admin interface; keep it on loopback
	ExtProc    string `yaml:"extproc"`     // sidecar gRPC: ext_proc and grpc.health.v1
	Control    string `yaml:"control"`     // sidecar HTTP: /health, /v1/usage, /metrics
	Admin      string `yaml:"admin"`       // sidecar admin gRPC; never routed by Envoy
	// Console is the operator console (HTTP, signed in with the admin
	// token); loopback only, like the admin API, and never routed by Envoy.
	Console string `yaml:"console"`
	// Probes is Envoy's read-only listener for readiness and metrics
	// (GET /ready, /stats/prometheus, /metrics); the only port besides the
	// public one that may listen beyond loopback.
	Probes string `yaml:"probes"`
	// Relay is Envoy's loopback listener for the sidecar's own requests to
	// the vendors (reading background responses to settle them); it adds
	// the vendor credential, so it never leaves loopback.
	Relay string `yaml:"relay"`
	// TLS is mutual TLS between Envoy and the sidecar's ext_proc and
	// control servers. The sidecar refuses to bind either beyond loopback
	// without it.
	TLS SidecarTLS `yaml:"tls"`
}

// SidecarTLS names PEM files. The sidecar reloads its own when they change;
// Envoy reads its client certificate at start.
type SidecarTLS struct {
	CA         string `yaml:"ca_file"`          // signs both certificates; each side trusts only it
	ServerCert string `yaml:"server_cert_file"` // the sidecar's
	ServerKey  string `yaml:"server_key_file"`
	ClientCert string `yaml:"client_cert_file"` // Envoy's
	ClientKey  string `yaml:"client_key_file"`
}

// Enabled reports whether mutual TLS is configured.
func (t SidecarTLS) Enabled() bool { return t != SidecarTLS{} }

// CheckSidecarBinds refuses sidecar listeners that other hosts could reach
// without mutual TLS: ext_proc answers any caller with a valid key, and the
// control server reads usage. The admin API never leaves loopback.
func (l Listeners) CheckSidecarBinds() error {
	t := l.TLS
	if t.Enabled() && (t.CA == "" || t.ServerCert == "" || t.ServerKey == "" || t.ClientCert == "" || t.ClientKey == "") {
		return errors.New("listeners.tls: ca_file, server_cert_file, server_key_file, client_cert_file and client_key_file are all required")
	}
	for field, addr := range map[string]string{"extproc": l.ExtProc, "control": l.Control, "admin": l.Admin, "console": l.Console} {
		if field == "console" && addr == "" {
			continue // not served
		}
		host, _, err := SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("listeners.%s: %w", field, err)
		}
		switch {
		case IsLoopback(host):
		case field == "console":
			return fmt.Errorf("listeners.console: %s is beyond loopback; the operator console listens on loopback only (reach it with kubectl port-forward)", addr)
		case field == "admin":
			return fmt.Errorf("listeners.admin: %s is beyond loopback; the admin API listens on loopback only (reach it with kubectl exec or port-forward)", addr)
		case !t.Enabled():
			return fmt.Errorf("listeners.%s: %s is beyond loopback; bind 127.0.0.1 (Envoy runs beside the sidecar) or configure listeners.tls for mutual TLS", field, addr)
		}
	}
	return nil
}

// Store says where state lives.
type Store struct {
	// RedisURL is a redis:// or rediss:// URL; the REDIS_URL environment
	// variable overrides it. Empty means in-memory (development only).
	RedisURL string `yaml:"redis_url"`
	// SpoolDir holds settlements that could not reach Redis until replayed.
	SpoolDir string `yaml:"spool_dir"`
	// LedgerRetention is how long a ledger entry is kept once exported
	// (gatewayctl ledger export); 0 keeps every entry. An entry that was
	// never exported is never trimmed, nor one the ledger sink has not
	// copied once the sink has started.
	LedgerRetention Duration `yaml:"ledger_retention"`
	// Timeout bounds each store call (dial, read, write, waiting for a
	// connection): a store that does not answer within it fails the request
	// with 503 and retry-after. Default 500ms.
	Timeout Duration `yaml:"timeout"`
}

// Limits are the request limits and the defaults given to new accounts.
type Limits struct {
	DailyUSD      float64 `yaml:"daily_usd"`
	RPM           int64   `yaml:"rpm"`
	WindowMinutes int64   `yaml:"window_minutes"`
	// MaxRequestBytes bounds a request body (Envoy answers 413 above it).
	MaxRequestBytes int64 `yaml:"max_request_bytes"`
	// MaxRequestDuration is the longest a model request is expected to run.
	// Holds do not depend on it: they are renewed while their request runs.
	MaxRequestDuration Duration `yaml:"max_request_duration"`
	// HoldLease is how long a hold lives without renewal. The sidecar renews
	// the holds of its running requests every third of it; once a sidecar
	// dies, its requests are settled as interrupted about one lease later.
	HoldLease Duration `yaml:"hold_lease"`
	// BackgroundPoll is how often the sidecars look at a background
	// response nobody has read to its end (to settle it, or renew its
	// hold); below the hold lease. Default 10s, or a third of the lease
	// when that is shorter.
	BackgroundPoll Duration `yaml:"background_poll"`
	// ConcurrencyWaiters bounds the requests one sidecar keeps waiting for
	// a concurrency slot (keys with a concurrency wait); beyond it they are
	// answered 429 at once. Default DefaultConcurrencyWaiters.
	ConcurrencyWaiters int `yaml:"concurrency_waiters"`
}

// BackgroundPollInterval is BackgroundPoll, or when it is not set its
// default: derived when used, so that it follows a lease changed after
// loading.
func (l Limits) BackgroundPollInterval() time.Duration {
	if l.BackgroundPoll > 0 {
		return l.BackgroundPoll.D()
	}
	return min(10*time.Second, l.HoldLease.D()/3)
}

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
}

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

// Upstream is one vendor route: /NAME/... is forwarded to its endpoints.
type Upstream struct {
	Name   string `yaml:"name"`
	Format string `yaml:"format"` // the vendor's API: "messages" or "chat_completions"
	// Operations are the metered operations served under /NAME/, each in
	// its own wire format (Operations lists them); default: Format alone.
	Operations []string `yaml:"operations"`
	// CredentialEnv names the environment variable holding the vendor key.
	// Envoy reads it and injects the key; the sidecar never sees it. Empty
	// forwards no credential (a self-hosted server).
	CredentialEnv string `yaml:"credential_env"`
	// FreePaths are read-only vendor paths forwarded without billing, as
	// "METHOD /path" (path after the route prefix).
	FreePaths   []string    `yaml:"free_paths"`
	Primary     Endpoint    `yaml:"primary"`
	Reserve     Endpoint    `yaml:"reserve"`
	HealthCheck HealthCheck `yaml:"health_check"`
	Failover    Failover    `yaml:"failover"`
	Models      Models      `yaml:"models"`
}

// Endpoint is one address of an upstream.
type Endpoint struct {
	// URL is the scheme, host and port: https://api.example.com or
	// http://127.0.0.1:9001. The path, if any, is ignored.
	URL string `yaml:"url"`
	// Region is informational: where the endpoint runs.
	Region string `yaml:"region"`
	// RegionalProcessing names the vendor's regional processing (data
	// residency) region this endpoint serves, such as "eu" or "us": replies
	// it serves are priced with the catalogue's
	// regional_processing_uplift_multiplier_<region>. Empty for a global
	// endpoint.
	RegionalProcessing string `yaml:"regional_processing"`
	// TrustedCA is a PEM file of CAs for https endpoints; empty uses the
	// system bundle.
	TrustedCA string `yaml:"trusted_ca"`
}

// HealthCheck configures Envoy's active probes of each endpoint. A probe
// slower than Timeout counts as a failure: that is how rising latency moves
// traffic to the reserve.
type HealthCheck struct {
	Path               string   `yaml:"path"`
	Interval           Duration `yaml:"interval"`
	Timeout            Duration `yaml:"timeout"`
	UnhealthyThreshold int      `yaml:"unhealthy_threshold"`
	HealthyThreshold   int      `yaml:"healthy_threshold"`
}

// Failover tunes passive outlier detection and retries.
//
// A request is retried (on the other endpoint) only while the vendor
// cannot have started on it: the connection failed or was refused, the
// stream was reset before the request was sent, or the vendor answered
// 503/529. A request the vendor received is never sent again by default,
// because the vendor may be generating (and billing) the reply: it fails
// with 504 at FirstByteTimeout. RetrySentRequests opts in to retrying such
// requests, which moves requests waiting on a hung endpoint to the other
// one after FirstByteTimeout.
type Failover struct {
	ConsecutiveErrors int      `yaml:"consecutive_errors"`
	BaseEjectionTime  Duration `yaml:"base_ejection_time"`
	Retries           int      `yaml:"retries"`
	// FirstByteTimeout bounds the wait for a reply's headers on one
	// attempt; the attempt then fails with 504, which clients retry (by
	// then the health checks have moved traffic off a hung endpoint). The
	// processor sets each metered request's bound from what it asked for:
	// FirstByteTimeout plus its input at PrefillTokensPerSecond, and, for a
	// non-streaming request (whose headers come only once the reply is
	// generated), its output bound (max_tokens × n) at
	// GenerationTokensPerSecond; at most limits.max_request_duration.
	// Streams are not bound by it once their headers arrived. Default 10s.
	FirstByteTimeout Duration `yaml:"first_byte_timeout"`
	// PrefillTokensPerSecond and GenerationTokensPerSecond are the slowest
	// rates a healthy vendor reads a prompt and generates output at, for
	// the bound above. Defaults 5,000 and 20.
	PrefillTokensPerSecond    int64 `yaml:"prefill_tokens_per_second"`
	GenerationTokensPerSecond int64 `yaml:"generation_tokens_per_second"`
	// PerTryIdleTimeout, when set, fails an attempt that receives nothing
	// for this long, before or after its headers. Zero (default) leaves idle
	// streams to envoy.stream_idle_timeout.
	PerTryIdleTimeout Duration `yaml:"per_try_idle_timeout"`
	// RetrySentRequests also retries attempts that failed after the request
	// reached the vendor (any 5xx, timeouts). The vendor may then generate,
	// and bill, the same reply more than once. Default false.
	RetrySentRequests bool `yaml:"retry_sent_requests"`
	// RetryBudgetPercent caps concurrent retries at this share of the
	// requests in flight to the upstream (at least 10), so that an outage of
	// both endpoints does not multiply the load on them. Default 20.
	RetryBudgetPercent float64 `yaml:"retry_budget_percent"`
}

// Models says which models an upstream serves and at what price: the
// catalogue's chat models of the given providers, with the operator's
// aliases and overrides.
type Models struct {
	// Providers are catalogue litellm_provider values ("anthropic", "openai");
	// their entries of mode "chat" are served.
	Providers []string `yaml:"providers"`
	// Aliases map an extra name to a served model.
	Aliases map[string]string `yaml:"aliases"`
	// Overrides replace catalogue prices (contract prices) or add a model the
	// catalogue lacks, by model name.
	Overrides map[string]Price `yaml:"overrides"`
	// UnknownModel is "reject" (the default: 400 naming the model) or
	// "fallback" (price it with Fallback and mark the ledger entry).
	UnknownModel string `yaml:"unknown_model"`
	Fallback     *Price `yaml:"fallback"`
}

// Unknown-model policies.
const (
	UnknownReject   = "reject"
	UnknownFallback = "fallback"
)

// Price is an operator's price. Token prices are USD per million tokens;
// the built-in tools' are USD per call (per session for the code
// interpreter). A price that is set replaces the catalogue's
// figure for that kind at every service tier and prompt length (a contract
// price is flat); an unset one keeps the catalogue's.
type Price struct {
	Input        *float64 `yaml:"input"`
	Output       *float64 `yaml:"output"`
	CacheRead    *float64 `yaml:"cache_read"`
	CacheWrite5m *float64 `yaml:"cache_write_5m"`
	CacheWrite1h *float64 `yaml:"cache_write_1h"`
	AudioInput   *float64 `yaml:"audio_input"`
	AudioOutput  *float64 `yaml:"audio_output"`
	WebSearch    *float64 `yaml:"web_search"`
	// The Responses API's other built-in tools.
	FileSearch             *float64 `yaml:"file_search"`
	CodeInterpreterSession *float64 `yaml:"code_interpreter_session"`
	ImageGeneration        *float64 `yaml:"image_generation"`
	// MaxOutput replaces the catalogue's max_output_tokens.
	MaxOutput int64 `yaml:"max_output"`
}

// Fields lists the price's set figures by the usage kind they price
// ("web_searches" for WebSearch, in USD per search, and so on).
func (p Price) Fields() map[string]float64 {
	out := map[string]float64{}
	for name, v := range map[string]*float64{
		"input": p.Input, "output": p.Output, "cache_read": p.CacheRead,
		"cache_write_5m": p.CacheWrite5m, "cache_write_1h": p.CacheWrite1h,
		"audio_input": p.AudioInput, "audio_output": p.AudioOutput, "web_searches": p.WebSearch,
		"file_searches": p.FileSearch, "code_interpreter_sessions": p.CodeInterpreterSession,
		"image_generations": p.ImageGeneration,
	} {
		if v != nil {
			out[name] = *v
		}
	}
	return out
}

func (p Price) validate(at string, complete bool) error {
	for name, v := range p.Fields() {
		if v < 0 || math.IsNaN(v) || v > 1e6 {
			return fmt.Errorf("%s: %s: %v is not a price in USD", at, name, v)
		}
	}
	if p.MaxOutput < 0 {
		return fmt.Errorf("%s.max_output: must be a positive number of tokens", at)
	}
	if complete && (p.Input == nil || p.Output == nil || p.MaxOutput == 0) {
		return fmt.Errorf("%s: input, output and max_output are required", at)
	}
	return nil
}

// Duration is a time.Duration written as "1.5s" or "2m" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration such as 1s or 500ms", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a Go duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// CatalogueEnv names the environment variable that overrides catalogue.
const CatalogueEnv = "GATEWAY_CATALOGUE"

// Formats known to the gateway.
const (
	FormatMessages        = "messages"
	FormatChatCompletions = "chat_completions"
)

// Operations are the metered operations an upstream may serve, each named
// for its wire format. The messages vendor serves messages; the chat
// completions vendor serves chat completions, responses and embeddings.
var Operations = map[string][]string{
	FormatMessages:        {FormatMessages},
	FormatChatCompletions: {FormatChatCompletions, "responses", "embeddings"},
}

// OperationNames returns the upstream's operations: Operations, or its
// format alone.
func (u *Upstream) OperationNames() []string {
	if len(u.Operations) == 0 {
		return []string{u.Format}
	}
	return u.Operations
}

// Load reads, defaults and validates a config file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if env := os.Getenv(CatalogueEnv); env != "" {
		c.Catalogue = env
	}
	if !filepath.IsAbs(c.Catalogue) {
		c.Catalogue = filepath.Join(filepath.Dir(path), c.Catalogue)
	}
	return c, nil
}

// Parse decodes YAML strictly: an unknown field is an error that names it.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file")
		}
		return nil, err
	}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// DefaultMaxConcurrent is the default of the circuit breakers: open model
// requests per Envoy, per cluster. An open stream costs the sidecar some
// 15 KB and Envoy a few tens of KB; file descriptors (two per request on
// Envoy) are the practical bound.
const DefaultMaxConcurrent = 50_000

// Defaults that other packages fall back on when given zero.
const (
	// DefaultHoldLease is limits.hold_lease's default and the store's.
	DefaultHoldLease = time.Minute
	// DefaultKeyCacheTTL bounds how long a revoked key keeps working: the
	// default of gateway serve's --key-cache-ttl and of the key cache.
	DefaultKeyCacheTTL = 2 * time.Second
	// MaxConcurrencyWait is the longest a key's concurrency wait may be:
	// how long a request over its concurrency limit may wait for a slot.
	MaxConcurrencyWait = 60 * time.Second
	// DefaultConcurrencyWaiters is limits.concurrency_waiters' default. A
	// waiter costs a goroutine and an admission attempt every 25 to 100 ms.
	DefaultConcurrencyWaiters = 500
	// ExtProcMessageTimeout is how long Envoy waits for the sidecar's answer
	// to one ext_proc message. A request waiting for a concurrency slot
	// extends it once by its wait (Envoy's max_message_timeout bounds that
	// extension at MaxConcurrencyWait + ExtProcMessageTimeout).
	ExtProcMessageTimeout = 5 * time.Second
)

// ConcurrencyWaitBound is the longest this gateway lets a request wait for
// a concurrency slot, whatever its key allows: MaxConcurrencyWait, or less
// when Envoy's stream idle timeout or maximum stream duration would end the
// waiting request first (with a margin for the admission after the wait).
func (c *Config) ConcurrencyWaitBound() time.Duration {
	b := min(MaxConcurrencyWait, c.Envoy.StreamIdleTimeout.D()-ExtProcMessageTimeout,
		c.Envoy.MaxStreamDuration.D()-ExtProcMessageTimeout)
	return max(b, 0)
}

func (c *Config) setDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defDur := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&c.Region, "local")
	def(&c.Listeners.Public, "127.0.0.1:8080")
	def(&c.Listeners.EnvoyAdmin, "127.0.0.1:9901")
	def(&c.Listeners.ExtProc, "127.0.0.1:50051")
	def(&c.Listeners.Control, "127.0.0.1:8081")
	def(&c.Listeners.Admin, "127.0.0.1:50052")
	def(&c.Listeners.Console, "127.0.0.1:8082")
	def(&c.Listeners.Probes, "127.0.0.1:9902")
	def(&c.Listeners.Relay, "127.0.0.1:9903")
	defDur(&c.Envoy.RequestHeadersTimeout, 10*time.Second)
	defDur(&c.Envoy.MaxConnectionDuration, time.Hour)
	if c.Envoy.MaxRequestHeadersKB == 0 {
		c.Envoy.MaxRequestHeadersKB = 60
	}
	if c.Envoy.MaxHeadersCount == 0 {
		c.Envoy.MaxHeadersCount = 100
	}
	if c.Envoy.MaxConnections == 0 {
		c.Envoy.MaxConnections = 10000
	}
	if c.Limits.MaxRequestBytes == 0 {
		c.Limits.MaxRequestBytes = 32 << 20
	}
	defDur(&c.Limits.MaxRequestDuration, 15*time.Minute)
	defDur(&c.Limits.HoldLease, DefaultHoldLease)
	if c.Limits.ConcurrencyWaiters == 0 {
		c.Limits.ConcurrencyWaiters = DefaultConcurrencyWaiters
	}
	if c.Limits.RPM > 0 && c.Limits.WindowMinutes == 0 {
		c.Limits.WindowMinutes = 1
	}
	defDur(&c.Store.Timeout, 500*time.Millisecond)
	defDur(&c.Alerts.Interval, 30*time.Second)
	if c.Alerts.QueueSize == 0 {
		c.Alerts.QueueSize = 1000
	}
	def(&c.LedgerSink.Listen, "127.0.0.1:9465")
	defDur(&c.LedgerSink.Interval, time.Second)
	def(&c.Tracing.Protocol, TracingGRPC)
	defDur(&c.Envoy.StreamIdleTimeout, 5*time.Minute)
	defDur(&c.Envoy.MaxStreamDuration, c.Limits.MaxRequestDuration.D())
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	cb := &c.Envoy.CircuitBreakers
	defInt(&cb.MaxConnections, DefaultMaxConcurrent)
	defInt(&cb.MaxPendingRequests, DefaultMaxConcurrent)
	defInt(&cb.MaxRequests, DefaultMaxConcurrent)
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		h := &u.HealthCheck
		def(&h.Path, "/v1/models")
		def(&u.Models.UnknownModel, UnknownReject)
		defDur(&h.Interval, time.Second)
		defDur(&h.Timeout, time.Second)
		if h.UnhealthyThreshold == 0 {
			h.UnhealthyThreshold = 2
		}
		if h.HealthyThreshold == 0 {
			h.HealthyThreshold = 2
		}
		f := &u.Failover
		if f.ConsecutiveErrors == 0 {
			f.ConsecutiveErrors = 3
		}
		defDur(&f.BaseEjectionTime, 10*time.Second)
		if f.Retries == 0 {
			f.Retries = 2
		}
		defDur(&f.FirstByteTimeout, 10*time.Second)
		if f.PrefillTokensPerSecond == 0 {
			f.PrefillTokensPerSecond = 5000
		}
		if f.GenerationTokensPerSecond == 0 {
			f.GenerationTokensPerSecond = 20
		}
		if f.RetryBudgetPercent == 0 {
			f.RetryBudgetPercent = 20
		}
	}
}

// Validate reports the first invalid setting, naming its field. It changes
// nothing: defaults are set by Parse before it.
func (c *Config) Validate() error {
	for field, addr := range map[string]string{
		"listeners.public": c.Listeners.Public, "listeners.envoy_admin": c.Listeners.EnvoyAdmin,
		"listeners.extproc": c.Listeners.ExtProc, "listeners.control": c.Listeners.Control,
		"listeners.admin": c.Listeners.Admin, "listeners.probes": c.Listeners.Probes,
		"listeners.relay": c.Listeners.Relay, "listeners.console": c.Listeners.Console,
	} {
		if _, _, err := SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	e := c.Envoy
	switch {
	case e.MaxRequestHeadersKB < 1 || e.MaxRequestHeadersKB > 8192:
		return errors.New("envoy.max_request_headers_kb: must be 1 to 8192")
	case e.MaxHeadersCount < 1:
		return errors.New("envoy.max_headers_count: must be positive")
	case e.MaxConnections < 1:
		return errors.New("envoy.max_connections: must be positive")
	case e.RequestHeadersTimeout < 0 || e.MaxConnectionDuration < 0:
		return errors.New("envoy.request_headers_timeout, envoy.max_connection_duration: must not be negative")
	}
	if cb := c.Envoy.CircuitBreakers; cb.MaxConnections < 0 || cb.MaxPendingRequests < 0 || cb.MaxRequests < 0 {
		return errors.New("envoy.circuit_breakers: limits must not be negative")
	}
	if c.Envoy.MaxStreamDuration < 0 {
		return errors.New("envoy.max_stream_duration: must not be negative")
	}
	if c.Limits.ConcurrencyWaiters < 0 {
		return errors.New("limits.concurrency_waiters: must not be negative")
	}
	if c.Limits.DailyUSD < 0 || c.Limits.RPM < 0 || c.Limits.WindowMinutes < 0 {
		return errors.New("limits: daily_usd, rpm and window_minutes must not be negative")
	}
	if bp := c.Limits.BackgroundPollInterval(); bp <= 0 || bp >= c.Limits.HoldLease.D() {
		return errors.New("limits.background_poll: must be positive and shorter than limits.hold_lease")
	}
	if c.Limits.HoldLease.D() < 100*time.Millisecond {
		return errors.New("limits.hold_lease: must be at least 100ms")
	}
	if c.Store.LedgerRetention < 0 {
		return errors.New("store.ledger_retention: must not be negative")
	}
	if _, _, err := SplitHostPort(c.LedgerSink.Listen); err != nil {
		return fmt.Errorf("ledger_sink.listen: %w", err)
	}
	if c.LedgerSink.Interval < 0 {
		return errors.New("ledger_sink.interval: must not be negative")
	}
	if t := c.Tracing; t.Enabled() {
		if _, _, err := SplitHostPort(t.Endpoint); err != nil {
			return fmt.Errorf("tracing.endpoint: %w", err)
		}
	}
	if p := c.Tracing.Protocol; p != TracingGRPC && p != TracingHTTP {
		return fmt.Errorf("tracing.protocol: %q is not %q or %q", p, TracingGRPC, TracingHTTP)
	}
	if p := c.Tracing.Sampling(); p < 0 || p > 100 {
		return errors.New("tracing.sampling_percent: must be 0 to 100")
	}
	if c.Alerts.Interval < 0 || c.Alerts.StoreUnreachableAfter < 0 || c.Alerts.QueueSize < 0 {
		return errors.New("alerts: interval, store_unreachable_after and queue_size must not be negative")
	}
	for i, w := range c.Alerts.Webhooks {
		p := fmt.Sprintf("alerts.webhooks[%d]", i)
		if u, err := url.Parse(w.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an http(s) URL", p, w.URL)
		}
		if !validEnvName(w.SecretEnv) {
			return fmt.Errorf("%s.secret_env: %q is not an environment variable name (the signing secret is required)", p, w.SecretEnv)
		}
		for j, ev := range w.Events {
			if !slices.Contains(AlertEvents, ev) {
				return fmt.Errorf("%s.events[%d]: %q is not one of %s", p, j, ev, strings.Join(AlertEvents, ", "))
			}
		}
	}
	if len(c.Upstreams) == 0 {
		return errors.New("upstreams: at least one upstream is required")
	}
	seen := map[string]bool{}
	for i, u := range c.Upstreams {
		p := fmt.Sprintf("upstreams[%d]", i)
		if u.Name == "" {
			return fmt.Errorf("%s.name: missing", p)
		}
		if !validName(u.Name) {
			return fmt.Errorf("%s.name: %q must be lowercase letters, digits or '-'", p, u.Name)
		}
		if seen[u.Name] {
			return fmt.Errorf("%s.name: %q is used twice", p, u.Name)
		}
		seen[u.Name] = true
		if u.Format != FormatMessages && u.Format != FormatChatCompletions {
			return fmt.Errorf("%s.format: %q is not %q or %q", p, u.Format, FormatMessages, FormatChatCompletions)
		}
		for j, op := range u.Operations {
			if !slices.Contains(Operations[u.Format], op) || slices.Index(u.Operations, op) != j {
				return fmt.Errorf("%s.operations[%d]: %q is not an operation of format %s (%s), or is listed twice", p, j, op, u.Format, strings.Join(Operations[u.Format], ", "))
			}
		}
		if u.CredentialEnv != "" && !validEnvName(u.CredentialEnv) {
			return fmt.Errorf("%s.credential_env: %q is not an environment variable name", p, u.CredentialEnv)
		}
		for j, fp := range u.FreePaths {
			if _, _, err := ParseFreePath(fp); err != nil {
				return fmt.Errorf("%s.free_paths[%d]: %w", p, j, err)
			}
		}
		if err := u.Primary.validate(); err != nil {
			return fmt.Errorf("%s.primary.%w", p, err)
		}
		if err := u.Reserve.validate(); err != nil {
			return fmt.Errorf("%s.reserve.%w", p, err)
		}
		if f := u.Failover; f.RetryBudgetPercent < 0 || f.RetryBudgetPercent > 100 || f.Retries < 0 {
			return fmt.Errorf("%s.failover: retries must not be negative and retry_budget_percent must be 0-100", p)
		}
		if !strings.HasPrefix(u.HealthCheck.Path, "/") {
			return fmt.Errorf("%s.health_check.path: must start with /", p)
		}
		if err := u.Models.validate(p + ".models"); err != nil {
			return err
		}
	}
	if c.Catalogue == "" {
		return errors.New("catalogue: missing (the price catalogue file)")
	}
	return nil
}

func (m *Models) validate(p string) error {
	if len(m.Providers) == 0 && len(m.Overrides) == 0 {
		return fmt.Errorf("%s.providers: at least one catalogue provider (or an override) is required", p)
	}
	for name, target := range m.Aliases {
		if name == "" || target == "" {
			return fmt.Errorf("%s.aliases: empty model name", p)
		}
	}
	for name, o := range m.Overrides {
		if name == "" {
			return fmt.Errorf("%s.overrides: empty model name", p)
		}
		if err := o.validate(fmt.Sprintf("%s.overrides[%s]", p, name), false); err != nil {
			return err
		}
	}
	switch m.UnknownModel {
	case UnknownReject, UnknownFallback:
	default:
		return fmt.Errorf("%s.unknown_model: %q is not %q or %q", p, m.UnknownModel, UnknownReject, UnknownFallback)
	}
	if m.UnknownModel == UnknownFallback && m.Fallback == nil {
		return fmt.Errorf("%s.fallback: required when unknown_model is fallback", p)
	}
	if m.Fallback != nil {
		if err := m.Fallback.validate(p+".fallback", true); err != nil {
			return err
		}
	}
	return nil
}

// IsLoopback reports whether host (an IP or "localhost") can only be reached
// from the same network namespace.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func validEnvName(s string) bool {
	for i, c := range s {
		if !(c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

func (e Endpoint) validate() error {
	if e.URL == "" {
		return errors.New("url: missing")
	}
	if _, err := e.Parse(); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	for _, r := range e.RegionalProcessing {
		if r < 'a' || r > 'z' {
			return fmt.Errorf("regional_processing: %q is not a region code such as eu or us", e.RegionalProcessing)
		}
	}
	return nil
}

// Target is an endpoint's parsed address.
type Target struct {
	TLS  bool
	Host string
	Port int
}

// Parse splits the endpoint URL into scheme, host and port.
func (e Endpoint) Parse() (Target, error) {
	u, err := url.Parse(e.URL)
	if err != nil {
		return Target{}, err
	}
	var t Target
	switch u.Scheme {
	case "https":
		t.TLS, t.Port = true, 443
	case "http":
		t.Port = 80
	default:
		return Target{}, fmt.Errorf("%q: scheme must be http or https", e.URL)
	}
	t.Host = u.Hostname()
	if t.Host == "" {
		return Target{}, fmt.Errorf("%q: no host", e.URL)
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return Target{}, fmt.Errorf("%q: bad port", e.URL)
		}
		t.Port = n
	}
	return t, nil
}

// SplitHostPort parses "host:port" with a numeric port.
func SplitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, n, nil
}

// ParseFreePath splits "GET /v1/models" into method and path.
func ParseFreePath(s string) (method, path string, err error) {
	method, path, ok := strings.Cut(strings.TrimSpace(s), " ")
	path = strings.TrimSpace(path)
	if !ok || method == "" || !strings.HasPrefix(path, "/") || method != strings.ToUpper(method) {
		return "", "", fmt.Errorf("%q must be \"METHOD /path\"", s)
	}
	return method, path, nil
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return s != ""
}

// Upstream returns the upstream with the given name.
func (c *Config) Upstream(name string) (*Upstream, bool) {
	for i := range c.Upstreams {
		if c.Upstreams[i].Name == name {
			return &c.Upstreams[i], true
		}
	}
	return nil, false
}

// UpstreamNames lists the configured upstreams in order.
func (c *Config) UpstreamNames() []string {
	names := make([]string, len(c.Upstreams))
	for i, u := range c.Upstreams {
		names[i] = u.Name
	}
	return names
}
