// Package account holds the gateway's domain types: an account, its keys
// and their limits, and what happens to its money: an admission asks to
// start a request and a decision answers it; a renewal keeps the
// request's hold while it runs; a settlement ends it, and a checkpoint is
// what a settlement would be if the request ended now. A lease is escrow
// that a sidecar admits requests from in memory; a parked request waits
// for its background response's final state; a binding says which account
// created stored responses. They are plain values; package store keeps
// them in Redis, and package ledger holds what settlement records.
package account

import "time"

// Limits are the spending and rate limits of an account, a project or one
// key; zero means none. Every limit set at any level must pass (the strictest wins;
// see internal/store/lua/admit.lua).
type Limits struct {
	DailyNanoUSD  int64 // spend per UTC day, open holds included
	RPM           int64 // requests per minute
	WindowMinutes int64 // sliding window length; at most RPM×WindowMinutes requests per window
	TPM           int64 // tokens (input + output) per UTC minute, open requests counted at their bound
	Concurrency   int64 // requests in flight (open holds)
	// MonthlyNanoUSD is spend per UTC calendar month, open holds included.
	MonthlyNanoUSD int64
	// TotalNanoUSD is a key's lifetime spend cap, open holds included; it
	// never resets. Accounts have none (their balance is theirs).
	TotalNanoUSD int64
	// ConcurrencyWaitSeconds is how long a key's request over a concurrency
	// limit (the key's, its project's or the account's) may wait for a slot before it is
	// refused; 0: refused at once. At most config.MaxConcurrencyWait. Keys
	// only: waiting is how one client prefers to be treated.
	ConcurrencyWaitSeconds int64
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

// CountsInFlight reports whether a key's or a project's limits need its
// in-flight counts (held, open): a spend budget, a concurrency or a
// tokens-per-minute limit (the admission script's kcount and pcount).
func (l Limits) CountsInFlight() bool {
	return l.DailyNanoUSD > 0 || l.MonthlyNanoUSD > 0 || l.TotalNanoUSD > 0 || l.Concurrency > 0 || l.TPM > 0
}

// Account is a customer account.
type Account struct {
	ID        string
	Name      string
	Limits    Limits
	CreatedAt time.Time
	// Suspended accounts cannot make model requests; their usage stays
	// readable and their keys stay as they are.
	Suspended bool
	// BalanceAlert is the balance (nano-USD) below which a balance alert
	// fires; zero: none.
	BalanceAlert int64
}

// KeyKind tells model keys from read-only tokens.
type KeyKind string

const (
	ModelKey      KeyKind = "cr" // spends balance through the model routes
	ReadOnlyToken KeyKind = "ro" // reads GET /v1/usage only
)

// Prefix is how the secrets of a kind begin: "cr_" or "ro_".
func (k KeyKind) Prefix() string { return string(k) + "_" }

// Key is a stored credential. The secret itself is never stored, only its
// SHA-256.
type Key struct {
	ID         string
	AccountID  string
	Kind       KeyKind
	Label      string
	Prefix     string // the first characters of the secret, for recognition
	CreatedAt  time.Time
	ExpiresAt  time.Time // zero: never
	LastUsedAt time.Time // zero: never used
	RevokedAt  time.Time // zero: not revoked
	Models     []string  // allow-list; empty allows every model
	// AccountSuspended is the account's state when the key was looked up.
	AccountSuspended bool
	// Limits are the key's own limits, on top of its account's.
	Limits Limits
	// ProjectID is the project the key's spend counts against; "" for
	// the account's default project (keys made before projects).
	ProjectID string
	// ProjectName and ProjectLimits are the name and limits of the key's
	// project when the key was looked up, as AccountSuspended is the
	// account's state.
	ProjectName   string
	ProjectLimits Limits
	// Standing is what the account and the key had left when the key
	// was looked up: the request headers' pre-check; nil when not read.
	// A pointer: a key is copied down the request path, whose stack is
	// bounded (the stream stack test).
	Standing *Standing
}

// DefaultProject is the id of the project every account has implicitly:
// the project of keys that name none.
const DefaultProject = "default"

// Project returns the id of the project the key belongs to.
func (k Key) Project() string {
	if k.ProjectID == "" {
		return DefaultProject
	}
	return k.ProjectID
}

// Project groups keys of one account under limits of their own: every
// request counts against its key, its project and its account.
type Project struct {
	ID        string
	AccountID string
	Name      string
	Limits    Limits
	CreatedAt time.Time
}

// KeyOptions are the optional settings of a new credential.
type KeyOptions struct {
	Label     string
	ExpiresAt time.Time
	Models    []string
	Limits    Limits
	// ProjectID is the project the key belongs to; "" for the default.
	ProjectID string
}
