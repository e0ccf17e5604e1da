package config

import "time"

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
	// DefaultLeaseShare and DefaultLeaseMinHolds are limits.lease_share's
	// and limits.lease_min_holds' defaults.
	DefaultLeaseShare    = 8
	DefaultLeaseMinHolds = 16
	// DefaultSocketIdle is limits.socket_idle's default.
	DefaultSocketIdle = 5 * time.Minute
	// DefaultSocketsPerKey is limits.sockets_per_key's default.
	DefaultSocketsPerKey = 64
	// DefaultSocketPingsPerSecond is limits.socket_pings_per_second's
	// default: far above a client's keepalive pings, far below a flood
	// (73,000 pings in 3 s cost 36 % of a core).
	DefaultSocketPingsPerSecond = 10
	// RefusalMemory is how long a sidecar refuses a key or account at a
	// request's headers, before reading its body, after a limit refused it
	// whatever the request (its rate or budget spent); never past the
	// refusal's retry-after. A raised limit or a top-up is seen this much
	// later on each sidecar.
	RefusalMemory = 5 * time.Second
	// ReadBufferBytes is Envoy's buffer per client connection on the
	// public listener: what it reads from a client at once, and so what a
	// request's body costs it while the processor decides on the request's
	// headers. The model routes raise it to limits.max_request_bytes for
	// the body the processor reads.
	ReadBufferBytes = 1 << 20
)

// ConcurrencyWaitBound is the longest this gateway lets a request wait for
// a concurrency slot, whatever its key allows: MaxConcurrencyWait, or less
// when Envoy's stream idle timeout or maximum stream duration would end the
// waiting request first (with a margin for the admission after the wait).
//
// With the reduced Envoy contract it is zero: Envoy's max_message_timeout,
// which lets a waiting request's message outlast the message timeout, is
// not available, so no request waits.
func (c *Config) ConcurrencyWaitBound() time.Duration {
	if c.Envoy.Reduced() {
		return 0
	}
	b := min(MaxConcurrencyWait, c.Envoy.StreamIdleTimeout.D()-ExtProcMessageTimeout,
		c.Envoy.MaxStreamDuration.D()-ExtProcMessageTimeout)
	return max(b, 0)
}

// setDefaults fills every unset field. Limits come before Envoy: the
// maximum stream duration defaults to the maximum request duration.
func (c *Config) setDefaults() {
	def(&c.Region, "local")
	c.Listeners.setDefaults()
	c.Envoy.setListenerDefaults()
	c.Limits.setDefaults()
	defDur(&c.Store.Timeout, 500*time.Millisecond)
	defDur(&c.Alerts.Interval, 30*time.Second)
	def(&c.Alerts.QueueSize, 1000)
	c.SSO.defaults()
	c.Reconcile.setDefaults()
	def(&c.LedgerSink.Listen, "127.0.0.1:9465")
	defDur(&c.LedgerSink.Interval, time.Second)
	def(&c.Tracing.Protocol, TracingGRPC)
	def(&c.Envoy.Contract, ContractFull)
	defDur(&c.Envoy.StreamIdleTimeout, 5*time.Minute)
	defDur(&c.Envoy.MaxStreamDuration, c.Limits.MaxRequestDuration.D())
	cb := &c.Envoy.CircuitBreakers
	def(&cb.MaxConnections, DefaultMaxConcurrent)
	def(&cb.MaxPendingRequests, DefaultMaxConcurrent)
	def(&cb.MaxRequests, DefaultMaxConcurrent)
	for i := range c.Upstreams {
		c.Upstreams[i].setDefaults()
	}
}

func (l *Listeners) setDefaults() {
	def(&l.Public, "127.0.0.1:8080")
	def(&l.EnvoyAdmin, "127.0.0.1:9901")
	def(&l.ExtProc, "127.0.0.1:50051")
	def(&l.Control, "127.0.0.1:8081")
	def(&l.Admin, "127.0.0.1:50052")
	def(&l.Console, "127.0.0.1:8082")
	def(&l.Probes, "127.0.0.1:9902")
	def(&l.Relay, "127.0.0.1:9903")
}

// setListenerDefaults fills the hardening of the public listener.
func (e *Envoy) setListenerDefaults() {
	defDur(&e.RequestHeadersTimeout, 10*time.Second)
	defDur(&e.MaxConnectionDuration, time.Hour)
	def(&e.MaxRequestHeadersKB, 60)
	def(&e.MaxHeadersCount, 100)
	def(&e.MaxConnections, 10000)
}

func (l *Limits) setDefaults() {
	def(&l.MaxRequestBytes, 32<<20)
	defDur(&l.MaxRequestDuration, 15*time.Minute)
	defDur(&l.HoldLease, DefaultHoldLease)
	def(&l.ConcurrencyWaiters, DefaultConcurrencyWaiters)
	def(&l.Leases, "on")
	def(&l.LeaseShare, DefaultLeaseShare)
	def(&l.LeaseMinHolds, DefaultLeaseMinHolds)
	def(&l.ConcurrencyWaitersShare, max(l.ConcurrencyWaiters/10, 1))
	defDur(&l.SocketIdle, DefaultSocketIdle)
	def(&l.SocketsPerKey, DefaultSocketsPerKey)
	def(&l.SocketPingsPerSecond, DefaultSocketPingsPerSecond)
	if l.RPM > 0 && l.WindowMinutes == 0 {
		l.WindowMinutes = 1
	}
}

func (u *Upstream) setDefaults() {
	def(&u.EnvoyCluster, u.Name)
	if u.ForwardHeaders == nil {
		u.ForwardHeaders = DefaultForwardHeaders(u.Format)
	}
	u.Pool.setDefaults()
	for i := range u.VendorKeys {
		def(&u.VendorKeys[i].Weight, 1)
	}
	h := &u.HealthCheck
	def(&h.Path, "/v1/models")
	def(&u.Models.UnknownModel, UnknownReject)
	defDur(&h.Interval, time.Second)
	defDur(&h.Timeout, time.Second)
	def(&h.UnhealthyThreshold, 2)
	def(&h.HealthyThreshold, 2)
	f := &u.Failover
	def(&f.ConsecutiveErrors, 3)
	defDur(&f.BaseEjectionTime, 10*time.Second)
	def(&f.Retries, 2)
	defDur(&f.FirstByteTimeout, 10*time.Second)
	def(&f.PrefillTokensPerSecond, 5000)
	def(&f.GenerationTokensPerSecond, 20)
	def(&f.RetryBudgetPercent, 20)
}

// def sets *p to v when *p is its zero value (unset in the YAML).
func def[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

func defDur(d *Duration, v time.Duration) { def(d, Duration(v)) }
