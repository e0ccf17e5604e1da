package config

import (
	"time"
)

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
	// ConcurrencyWaitersShare bounds the requests of one key, and of one
	// account, among a sidecar's ConcurrencyWaiters: beyond it they are
	// answered 429 at once while other keys still wait, so that one key
	// cannot fill the room. Default a tenth of ConcurrencyWaiters, at
	// least 1.
	ConcurrencyWaitersShare int `yaml:"concurrency_waiters_share"`
	// SocketIdle closes a Responses API WebSocket on which no response was
	// admitted for this long (pings and refused messages do not count).
	// Default 5m.
	SocketIdle Duration `yaml:"socket_idle"`
	// SocketsPerKey bounds the Responses API WebSockets one key may hold
	// open on one sidecar: each holds a vendor socket and the sidecar's
	// memory until it closes, so one key must not take them all. Beyond it
	// the upgrade is answered 429. Default 64.
	SocketsPerKey int `yaml:"sockets_per_key"`
	// SocketPingsPerSecond bounds the pings and refused messages (those
	// answered with an error event, nothing admitted) of one Responses API
	// WebSocket: that many at once and that many a second after; beyond
	// it the socket is closed with 1008. Default
	// DefaultSocketPingsPerSecond.
	SocketPingsPerSecond int `yaml:"socket_pings_per_second"`
	// Leases: "on" (the default) admits most requests from escrow leases
	// in memory (docs/billing.md, Leases), "off" admits each request with
	// the store's admission script.
	Leases string `yaml:"leases"`
	// LeaseInterval is how often a sidecar renews its leases (re-reading
	// the account's limits, balance and suspension). Default 1s, or a
	// quarter of the hold lease when that is shorter.
	LeaseInterval Duration `yaml:"lease_interval"`
	// LeaseShare: a lease is at most the room left ÷ LeaseShare. Default 8.
	LeaseShare int64 `yaml:"lease_share"`
	// LeaseMinHolds: no lease smaller than this many of the largest
	// recent hold; below it requests are admitted one by one. Default 16.
	LeaseMinHolds int64 `yaml:"lease_min_holds"`
}

// LeaseRenewInterval is LeaseInterval, or when it is not set its default.
func (l Limits) LeaseRenewInterval() time.Duration {
	if l.LeaseInterval > 0 {
		return l.LeaseInterval.D()
	}
	return min(time.Second, l.HoldLease.D()/4)
}

// LeasesOn reports whether requests are admitted from leases.
func (l Limits) LeasesOn() bool { return l.Leases == "on" }

// BackgroundPollInterval is BackgroundPoll, or when it is not set its
// default: derived when used, so that it follows a lease changed after
// loading.
func (l Limits) BackgroundPollInterval() time.Duration {
	if l.BackgroundPoll > 0 {
		return l.BackgroundPoll.D()
	}
	return min(10*time.Second, l.HoldLease.D()/3)
}
