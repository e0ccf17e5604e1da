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
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is the whole of gateway.yaml.
type Config struct {
	// Region is the region code of this node, reported by GET /health.
	Region    string     `yaml:"region"`
	Listeners Listeners  `yaml:"listeners"`
	Store     Store      `yaml:"store"`
	Limits    Limits     `yaml:"limits"`
	Envoy     Envoy      `yaml:"envoy"`
	Upstreams []Upstream `yaml:"upstreams"`
}

// Listeners are the addresses the gateway's processes bind.
type Listeners struct {
	Public     string `yaml:"public"`      // Envoy: where clients connect
	EnvoyAdmin string `yaml:"envoy_admin"` // Envoy's admin interface; keep it on loopback
	ExtProc    string `yaml:"extproc"`     // sidecar gRPC: ext_proc and grpc.health.v1
	Control    string `yaml:"control"`     // sidecar HTTP: /health, /v1/usage, /metrics
	Admin      string `yaml:"admin"`       // sidecar admin gRPC; never routed by Envoy
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
	// never exported is never trimmed.
	LedgerRetention Duration `yaml:"ledger_retention"`
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
}

// Envoy holds settings that exist only in the rendered Envoy bootstrap.
type Envoy struct {
	// StreamIdleTimeout ends a stream that sent nothing for this long. It
	// replaces the route timeout, which would cut long SSE replies.
	StreamIdleTimeout Duration `yaml:"stream_idle_timeout"`
	// AccessLog is "stdout" or a file path; empty disables Envoy's access log.
	AccessLog string `yaml:"access_log"`
}

// Upstream is one vendor route: /NAME/... is forwarded to its endpoints.
type Upstream struct {
	Name   string `yaml:"name"`
	Format string `yaml:"format"` // "messages" or "chat_completions"
	// CredentialEnv names the environment variable holding the vendor key.
	CredentialEnv string `yaml:"credential_env"`
	// FreePaths are read-only vendor paths forwarded without billing, as
	// "METHOD /path" (path after the route prefix).
	FreePaths   []string    `yaml:"free_paths"`
	Primary     Endpoint    `yaml:"primary"`
	Reserve     Endpoint    `yaml:"reserve"`
	HealthCheck HealthCheck `yaml:"health_check"`
	Failover    Failover    `yaml:"failover"`
	Models      []Model     `yaml:"models"`
}

// Endpoint is one address of an upstream.
type Endpoint struct {
	// URL is the scheme, host and port: https://api.example.com or
	// http://127.0.0.1:9001. The path, if any, is ignored.
	URL string `yaml:"url"`
	// Region is informational: where the endpoint runs.
	Region string `yaml:"region"`
	// TrustedCA is a PEM file of CAs for https endpoints; empty uses the
	// system bundle.
	TrustedCA string `yaml:"trusted_ca"`
	// CredentialEnv overrides the upstream's credential for this endpoint.
	CredentialEnv string `yaml:"credential_env"`
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
type Failover struct {
	ConsecutiveErrors int      `yaml:"consecutive_errors"`
	BaseEjectionTime  Duration `yaml:"base_ejection_time"`
	Retries           int      `yaml:"retries"`
	// PerTryIdleTimeout fails an attempt that receives nothing for this long.
	// It is an idle timeout, not a total one, so long streams are never cut.
	PerTryIdleTimeout Duration `yaml:"per_try_idle_timeout"`
}

// Model is a priced model. Prices are USD per million tokens.
type Model struct {
	Name       string   `yaml:"name"`
	Aliases    []string `yaml:"aliases"`
	Input      float64  `yaml:"input"`
	Output     float64  `yaml:"output"`
	CacheWrite float64  `yaml:"cache_write"`
	CacheRead  float64  `yaml:"cache_read"`
	// MaxOutput bounds the reply when the request sets no max_tokens.
	MaxOutput int64 `yaml:"max_output"`
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

// Formats known to the gateway.
const (
	FormatMessages        = "messages"
	FormatChatCompletions = "chat_completions"
)

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
	if c.Limits.MaxRequestBytes == 0 {
		c.Limits.MaxRequestBytes = 32 << 20
	}
	defDur(&c.Limits.MaxRequestDuration, 15*time.Minute)
	defDur(&c.Limits.HoldLease, time.Minute)
	defDur(&c.Envoy.StreamIdleTimeout, 5*time.Minute)
	for i := range c.Upstreams {
		u := &c.Upstreams[i]
		h := &u.HealthCheck
		def(&h.Path, "/v1/models")
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
		defDur(&f.PerTryIdleTimeout, 2*time.Minute)
	}
}

// Validate reports the first invalid setting, naming its field.
func (c *Config) Validate() error {
	for field, addr := range map[string]string{
		"listeners.public": c.Listeners.Public, "listeners.envoy_admin": c.Listeners.EnvoyAdmin,
		"listeners.extproc": c.Listeners.ExtProc, "listeners.control": c.Listeners.Control,
		"listeners.admin": c.Listeners.Admin,
	} {
		if _, _, err := SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	if c.Limits.DailyUSD < 0 || c.Limits.RPM < 0 || c.Limits.WindowMinutes < 0 {
		return errors.New("limits: daily_usd, rpm and window_minutes must not be negative")
	}
	if c.Limits.HoldLease.D() < 100*time.Millisecond {
		return errors.New("limits.hold_lease: must be at least 100ms")
	}
	if c.Store.LedgerRetention < 0 {
		return errors.New("store.ledger_retention: must not be negative")
	}
	if c.Limits.RPM > 0 && c.Limits.WindowMinutes == 0 {
		c.Limits.WindowMinutes = 1
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
		if u.CredentialEnv == "" {
			return fmt.Errorf("%s.credential_env: missing", p)
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
		if !strings.HasPrefix(u.HealthCheck.Path, "/") {
			return fmt.Errorf("%s.health_check.path: must start with /", p)
		}
		if len(u.Models) == 0 {
			return fmt.Errorf("%s.models: at least one priced model is required", p)
		}
		names := map[string]bool{}
		for j, m := range u.Models {
			mp := fmt.Sprintf("%s.models[%d]", p, j)
			if m.Name == "" {
				return fmt.Errorf("%s.name: missing", mp)
			}
			for _, n := range append([]string{m.Name}, m.Aliases...) {
				if names[n] {
					return fmt.Errorf("%s: model name %q is listed twice", mp, n)
				}
				names[n] = true
			}
			for field, v := range map[string]float64{"input": m.Input, "output": m.Output, "cache_write": m.CacheWrite, "cache_read": m.CacheRead} {
				if v < 0 || math.IsNaN(v) || v > 1e6 {
					return fmt.Errorf("%s.%s: %v is not a price in USD per million tokens", mp, field, v)
				}
			}
			if m.MaxOutput <= 0 {
				return fmt.Errorf("%s.max_output: must be a positive number of tokens", mp)
			}
		}
	}
	return nil
}

func (e Endpoint) validate() error {
	if e.URL == "" {
		return errors.New("url: missing")
	}
	if _, err := e.Parse(); err != nil {
		return fmt.Errorf("url: %w", err)
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
