// Package store keeps the gateway's state in Redis: accounts, credentials,
// balances, limits, holds, usage counters and the ledger.
//
// Money is integer nano-USD throughout. Every key of one account shares the
// hash tag {acct:ID}, so each Lua script touches a single slot and runs
// unchanged on Redis Cluster. The credential index (hash of secret → key) lives
// outside the tag and is read before the account's scripts run.
//
// The values it keeps and returns are the domain's: package account's
// (accounts, keys, admissions, settlements, leases, parked responses),
// package ledger's (ledger entries, settlement outcomes, usage reports)
// and package audit's; store exports only the adapter (Store, its
// Options, its errors and the sign-in limits of its counters).
package store

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotFound is returned for unknown accounts and credentials.
var ErrNotFound = errors.New("not found")

// ErrDuplicateRequest is returned by Admit for a request id that is already
// held or settled. Request ids must be unique per account; the gateway makes
// them and never takes them from the client.
var ErrDuplicateRequest = errors.New("duplicate request id")

// ErrRevoked is returned by RotateKey for a revoked credential.
var ErrRevoked = errors.New("key is revoked")

// ErrIdempotencyConflict is returned by TopUp when an idempotency key is
// reused with a different amount.
var ErrIdempotencyConflict = errors.New("idempotency key reused with a different amount")

// Options tune a Store. Zero values pick the defaults.
type Options struct {
	// Now is the clock; tests inject one to cross day and month boundaries.
	Now func() time.Time
	// HoldTTL is a hold's lease. The sidecar running the request renews it
	// while the request runs; a hold not renewed for this long belongs to a
	// request whose sidecar died, and the sweeper settles it as interrupted.
	HoldTTL time.Duration // default config.DefaultHoldLease
	// SweptRecordTTL is how long a sweep's record of what it charged is
	// kept for a later settlement of the same request to be reconciled
	// with (a spool replays after an outage); default 7 days.
	SweptRecordTTL time.Duration
	// LedgerRetention is how long an exported ledger entry is kept; zero
	// keeps every entry. Entries not yet exported are never trimmed.
	LedgerRetention time.Duration
	// AuditMaxLen caps the audit stream (approximate trimming).
	AuditMaxLen int64 // default 100,000
	// AuditRetention, when set, also trims audit entries older than it at
	// each append; zero keeps them up to AuditMaxLen.
	AuditRetention time.Duration
	// ResponseTTL is how long the owner of a stored response is
	// remembered (see Bind); default DefaultResponseTTL.
	ResponseTTL time.Duration
}

// Store is the gateway's Redis-backed state.
type Store struct {
	rdb  redis.UniversalClient
	opts Options
	// lastUsed keeps settlement from rewriting a credential's last_used
	// more than once a minute.
	lastUsed usedMinutes
}
