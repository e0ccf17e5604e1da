package config

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

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
	// VendorKeys is a pool of vendor keys instead of credential_env: Envoy
	// holds each secret, the sidecar steers each session to one key by name
	// and Envoy retries a key's 429, 529 and refusals on another (see
	// docs/failover.md#key-pools).
	VendorKeys []VendorKey `yaml:"keys"`
	// Pool tunes the pool's cool-downs.
	Pool Pool `yaml:"pool"`
	// VendorKeyID is the vendor's id of credential_env's key (see
	// VendorKey.VendorKeyID); a pool names each key's in keys.
	VendorKeyID string `yaml:"vendor_key_id"`
	// AdminCredentialEnv names the environment variable holding the
	// vendor's admin key, which reads its usage reports. Envoy injects it on
	// the relay's usage-report route; the sidecar never sees it. Empty: the
	// upstream's usage reports are not read.
	AdminCredentialEnv string `yaml:"admin_credential_env"`
	// FreePaths are read-only vendor paths forwarded without billing, as
	// "METHOD /path" (path after the route prefix).
	FreePaths []string `yaml:"free_paths"`
	// EnvoyCluster is the Envoy cluster serving the upstream, whose health
	// the sidecar reads from Envoy's admin /clusters; default Name.
	EnvoyCluster string   `yaml:"envoy_cluster"`
	Primary      Endpoint `yaml:"primary"`
	// Reserve is optional: without one the upstream has no failover.
	Reserve     Endpoint    `yaml:"reserve"`
	HealthCheck HealthCheck `yaml:"health_check"`
	Failover    Failover    `yaml:"failover"`
	Models      Models      `yaml:"models"`
	// WebSocket false: the endpoints speak HTTP only, and the Responses
	// API's WebSocket upgrade is answered 426 so that clients use HTTP at
	// once (default true: the upgrade is tried on the vendor).
	WebSocket *bool `yaml:"websocket"`
	// ForwardHeaders are the client's request headers the vendor hears
	// (a name ending in "*" is a prefix); every other header the client
	// sent is removed. Default: DefaultForwardHeaders(Format).
	ForwardHeaders []string `yaml:"forward_headers"`
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
// A request is retried (on the other endpoint) while no byte of a reply
// has reached Envoy: the connection failed or was refused, the stream was
// reset (before or after the request was sent), its reply's headers did
// not come within its first-byte bound, or the vendor answered 503/529.
// The abandoned attempt may still be billed by the vendor
// (docs/failover.md). Once a reply's headers went to the client nothing is
// retried. RetrySentRequests also retries any other 5xx.
type Failover struct {
	ConsecutiveErrors int      `yaml:"consecutive_errors"`
	BaseEjectionTime  Duration `yaml:"base_ejection_time"`
	Retries           int      `yaml:"retries"`
	// FirstByteTimeout bounds the wait for a reply's headers on one
	// attempt; the attempt is then retried on the reserve (504 when no
	// retry is left). The
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
	// RetrySentRequests also retries attempts the vendor answered with any
	// 5xx. The vendor may then generate, and bill, the same reply more than
	// once. Default false.
	RetrySentRequests bool `yaml:"retry_sent_requests"`
	// RetryBudgetPercent caps concurrent retries at this share of the
	// requests in flight to the upstream (at least 10), so that an outage of
	// both endpoints does not multiply the load on them. Default 20.
	RetryBudgetPercent float64 `yaml:"retry_budget_percent"`
}

// HasReserve reports whether the upstream has a reserve endpoint.
func (u *Upstream) HasReserve() bool { return u.Reserve != (Endpoint{}) }

// Endpoints are the upstream's configured endpoints by priority: the
// primary, then the reserve when there is one.
func (u *Upstream) Endpoints() []Endpoint {
	if u.HasReserve() {
		return []Endpoint{u.Primary, u.Reserve}
	}
	return []Endpoint{u.Primary}
}

// Formats known to the gateway.
const (
	FormatMessages        = "messages"
	FormatChatCompletions = "chat_completions"
)

// OperationNames returns the upstream's operations: those listed, or its
// format alone. Which names exist, and which vendor API serves each, is
// the processor's registry's to say (extproc/operations): the sidecar
// refuses to start on a name it does not know.
func (u *Upstream) OperationNames() []string {
	if len(u.Operations) == 0 {
		return []string{u.Format}
	}
	return u.Operations
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

// ParseFreePath splits "GET /v1/models" into method and path.
func ParseFreePath(s string) (method, path string, err error) {
	method, path, ok := strings.Cut(strings.TrimSpace(s), " ")
	path = strings.TrimSpace(path)
	if !ok || method == "" || !strings.HasPrefix(path, "/") || method != strings.ToUpper(method) {
		return "", "", fmt.Errorf("%q must be \"METHOD /path\"", s)
	}
	return method, path, nil
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

// WebSocketDisabled names the upstreams configured with websocket: false.
func (c *Config) WebSocketDisabled() map[string]bool {
	m := map[string]bool{}
	for _, u := range c.Upstreams {
		if u.WebSocket != nil && !*u.WebSocket {
			m[u.Name] = true
		}
	}
	return m
}
