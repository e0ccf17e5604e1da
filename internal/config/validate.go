package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Validate reports the first invalid setting, naming its field. It changes
// nothing: defaults are set by Parse before it.
func (c *Config) Validate() error {
	for _, check := range []func() error{
		c.Listeners.validate,
		c.Envoy.validate,
		c.Limits.validate,
		c.Store.validate,
		c.LedgerSink.validate,
		c.Tracing.validate,
		c.Alerts.validate,
		c.SSO.validate,
		c.Reconcile.validate,
		c.validateUpstreams,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	if c.Catalogue == "" {
		return errors.New("catalogue: missing (the price catalogue file)")
	}
	return nil
}

func (l Listeners) validate() error {
	for field, addr := range map[string]string{
		"listeners.public": l.Public, "listeners.envoy_admin": l.EnvoyAdmin,
		"listeners.extproc": l.ExtProc, "listeners.control": l.Control,
		"listeners.admin": l.Admin, "listeners.probes": l.Probes,
		"listeners.relay": l.Relay, "listeners.console": l.Console,
	} {
		if _, _, err := SplitHostPort(addr); err != nil {
			return fmt.Errorf("%s: %w", field, err)
		}
	}
	if l.Health != "" {
		if _, _, err := SplitHostPort(l.Health); err != nil {
			return fmt.Errorf("listeners.health: %w", err)
		}
	}
	return nil
}

func (e Envoy) validate() error {
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
	if cb := e.CircuitBreakers; cb.MaxConnections < 0 || cb.MaxPendingRequests < 0 || cb.MaxRequests < 0 {
		return errors.New("envoy.circuit_breakers: limits must not be negative")
	}
	if e.MaxStreamDuration < 0 {
		return errors.New("envoy.max_stream_duration: must not be negative")
	}
	if e.Contract != ContractFull && e.Contract != ContractReduced {
		return fmt.Errorf("envoy.contract: %q is not %q or %q", e.Contract, ContractFull, ContractReduced)
	}
	return nil
}

func (l Limits) validate() error {
	if l.ConcurrencyWaiters < 0 {
		return errors.New("limits.concurrency_waiters: must not be negative")
	}
	if l.ConcurrencyWaitersShare < 0 || l.ConcurrencyWaitersShare > max(l.ConcurrencyWaiters, 1) {
		return errors.New("limits.concurrency_waiters_share: must be between 1 and limits.concurrency_waiters")
	}
	if l.DailyUSD < 0 || l.RPM < 0 || l.WindowMinutes < 0 {
		return errors.New("limits: daily_usd, rpm and window_minutes must not be negative")
	}
	if bp := l.BackgroundPollInterval(); bp <= 0 || bp >= l.HoldLease.D() {
		return errors.New("limits.background_poll: must be positive and shorter than limits.hold_lease")
	}
	if l.Leases != "on" && l.Leases != "off" {
		return errors.New("limits.leases: must be on or off")
	}
	if d := l.LeaseRenewInterval(); d < 10*time.Millisecond || d >= l.HoldLease.D()/2 {
		return errors.New("limits.lease_interval: must be at least 10ms and under half of limits.hold_lease")
	}
	if l.LeaseShare < 1 || l.LeaseMinHolds < 1 {
		return errors.New("limits.lease_share, limits.lease_min_holds: must be at least 1")
	}
	if l.HoldLease.D() < 100*time.Millisecond {
		return errors.New("limits.hold_lease: must be at least 100ms")
	}
	return nil
}

func (s Store) validate() error {
	if s.LedgerRetention < 0 {
		return errors.New("store.ledger_retention: must not be negative")
	}
	if s.AuditRetention < 0 {
		return errors.New("store.audit_retention: must not be negative")
	}
	return nil
}

func (s LedgerSink) validate() error {
	if _, _, err := SplitHostPort(s.Listen); err != nil {
		return fmt.Errorf("ledger_sink.listen: %w", err)
	}
	if s.Interval < 0 {
		return errors.New("ledger_sink.interval: must not be negative")
	}
	return nil
}

func (t Tracing) validate() error {
	if t.Enabled() {
		if _, _, err := SplitHostPort(t.Endpoint); err != nil {
			return fmt.Errorf("tracing.endpoint: %w", err)
		}
	}
	if p := t.Protocol; p != TracingGRPC && p != TracingHTTP {
		return fmt.Errorf("tracing.protocol: %q is not %q or %q", p, TracingGRPC, TracingHTTP)
	}
	if p := t.Sampling(); p < 0 || p > 100 {
		return errors.New("tracing.sampling_percent: must be 0 to 100")
	}
	return nil
}

func (a Alerts) validate() error {
	if a.Interval < 0 || a.StoreUnreachableAfter < 0 || a.QueueSize < 0 {
		return errors.New("alerts: interval, store_unreachable_after and queue_size must not be negative")
	}
	for i, w := range a.Webhooks {
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
	return nil
}

func (c *Config) validateUpstreams() error {
	if len(c.Upstreams) == 0 {
		return errors.New("upstreams: at least one upstream is required")
	}
	seen, clusters := map[string]bool{}, map[string]bool{}
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
		if u.Pooled() && c.Envoy.Reduced() {
			return fmt.Errorf("%s.keys: a pool of keys needs envoy.contract full (the serving key is read from the host's metadata)", p)
		}
		if clusters[u.EnvoyCluster] {
			return fmt.Errorf("%s.envoy_cluster: %q serves two upstreams", p, u.EnvoyCluster)
		}
		clusters[u.EnvoyCluster] = true
		if err := u.validate(p); err != nil {
			return err
		}
	}
	return nil
}

// validate checks one upstream but its name, which validateUpstreams checks
// against the others; p is its path in the file ("upstreams[0]").
func (u *Upstream) validate(p string) error {
	if u.Format != FormatMessages && u.Format != FormatChatCompletions {
		return fmt.Errorf("%s.format: %q is not %q or %q", p, u.Format, FormatMessages, FormatChatCompletions)
	}
	for j, op := range u.Operations {
		if !validOperation(op) || slices.Index(u.Operations, op) != j {
			return fmt.Errorf("%s.operations[%d]: %q is not an operation name, or is listed twice", p, j, op)
		}
	}
	if u.CredentialEnv != "" && !validEnvName(u.CredentialEnv) {
		return fmt.Errorf("%s.credential_env: %q is not an environment variable name", p, u.CredentialEnv)
	}
	if err := u.validateKeys(p); err != nil {
		return err
	}
	if err := validateForwardHeaders(p, u.ForwardHeaders); err != nil {
		return err
	}
	for j, fp := range u.FreePaths {
		if _, _, err := ParseFreePath(fp); err != nil {
			return fmt.Errorf("%s.free_paths[%d]: %w", p, j, err)
		}
	}
	if err := u.Primary.validate(); err != nil {
		return fmt.Errorf("%s.primary.%w", p, err)
	}
	if u.HasReserve() {
		if err := u.Reserve.validate(); err != nil {
			return fmt.Errorf("%s.reserve.%w", p, err)
		}
	}
	if !validClusterName(u.EnvoyCluster) {
		return fmt.Errorf("%s.envoy_cluster: %q must be letters, digits, '-', '_' or '.'", p, u.EnvoyCluster)
	}
	if f := u.Failover; f.RetryBudgetPercent < 0 || f.RetryBudgetPercent > 100 || f.Retries < 0 {
		return fmt.Errorf("%s.failover: retries must not be negative and retry_budget_percent must be 0-100", p)
	}
	if !strings.HasPrefix(u.HealthCheck.Path, "/") {
		return fmt.Errorf("%s.health_check.path: must start with /", p)
	}
	return u.Models.validate(p + ".models")
}

func validEnvName(s string) bool {
	for i, c := range s {
		if !(c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// validOperation reports whether s can name an operation: lower-case
// letters, digits and "_".
func validOperation(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return s != ""
}

func validName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return s != ""
}

// validClusterName reports whether s can name an Envoy cluster in the
// rendered YAML and in the admin's /clusters without quoting.
func validClusterName(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return s != ""
}

// Warnings are what the sidecar logs at start about a valid configuration
// that gives something up: with the reduced contract, the concurrency wait
// is off and the endpoints of an upstream must be told apart by address.
func (c *Config) Warnings() []string {
	if !c.Envoy.Reduced() {
		return nil
	}
	ws := []string{"envoy.contract is reduced: the concurrency wait is off (Envoy's max_message_timeout is not available), " +
		"so a request over a key's concurrency limit gets 429 at once; each request waits for its reply headers " +
		"for the route's per-try timeout (failover.first_byte_timeout), not a bound scaled from the request"}
	for _, u := range c.Upstreams {
		if !u.HasReserve() {
			continue
		}
		p, errP := u.Primary.Parse()
		r, errR := u.Reserve.Parse()
		if errP == nil && errR == nil && p.Host == r.Host && p.Port == r.Port {
			ws = append(ws, fmt.Sprintf("upstream %s: primary and reserve have the same address %s:%d; "+
				"with envoy.contract reduced the ledger names every reply's endpoint primary", u.Name, p.Host, p.Port))
		}
	}
	return ws
}
