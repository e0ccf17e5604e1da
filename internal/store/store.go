// Package store keeps the gateway's state in Redis: accounts, credentials,
// balances, limits, holds, usage counters and the ledger.
//
// Money is integer nano-USD throughout. Every key of one account shares the
// hash tag {acct:ID}, so each Lua script touches a single slot and runs
// unchanged on Redis Cluster. The credential index (hash of secret → key) lives
// outside the tag and is read before the account's scripts run.
package store

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/usage"
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
	// ResponseTTL is how long the owner of a stored response is
	// remembered (see BindResponse); default DefaultResponseTTL.
	ResponseTTL time.Duration
}

// Limits are the spending and rate limits of an account or of one key; zero
// means none. Every limit set at either level must pass (the strictest wins;
// see lua/admit.lua).
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
	// limit (the key's or the account's) may wait for a slot before it is
	// refused; 0: refused at once. At most config.MaxConcurrencyWait. Keys
	// only: waiting is how one client prefers to be treated.
	ConcurrencyWaitSeconds int64
}

// IsZero reports whether no limit is set.
func (l Limits) IsZero() bool { return l == Limits{} }

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
}

// KeyOptions are the optional settings of a new credential.
type KeyOptions struct {
	Label     string
	ExpiresAt time.Time
	Models    []string
	Limits    Limits
}

// Admission asks to start one metered request.
type Admission struct {
	RequestID string
	AccountID string
	KeyID     string
	// Priced is the catalogue entry the request is priced under, and
	// Requested the name the client sent (an alias, say): a request whose
	// sidecar dies is settled under them by the sweeper.
	Priced    usage.PricedModel
	Requested usage.RequestedModel
	Hold      int64 // worst-case cost of the request, nano-USD
	// Tokens is the most tokens (input + output) the request can use: what
	// it counts towards a tokens-per-minute limit until it settles.
	Tokens    int64
	Stream    bool
	StartedAt time.Time // zero: the store's clock at admission
	// KeyLimits are the limits of the key KeyID as the caller knows them
	// (its key cache): a change is seen within the cache's lifetime.
	KeyLimits Limits
}

// Outcome is the result of an admission.
type Outcome int

const (
	Admitted Outcome = iota
	RateLimited
	DailyLimited
	InsufficientBalance
	TokenLimited       // tokens per minute
	ConcurrencyLimited // requests in flight
	MonthlyLimited     // spend of the UTC month
	TotalLimited       // a key's lifetime spend; never resets
)

// String names the outcome by the kind of limit that refused: the label of
// the refusal metrics and the word of the refusal messages.
func (o Outcome) String() string {
	switch o {
	case Admitted:
		return "admitted"
	case RateLimited:
		return "rpm"
	case DailyLimited:
		return "daily"
	case InsufficientBalance:
		return "balance"
	case TokenLimited:
		return "tpm"
	case ConcurrencyLimited:
		return "concurrency"
	case MonthlyLimited:
		return "monthly"
	case TotalLimited:
		return "total"
	}
	return "unknown"
}

// Level is where a refusing limit is set.
type Level int

const (
	AccountLevel Level = iota + 1
	KeyLevel
)

func (l Level) String() string {
	switch l {
	case AccountLevel:
		return "account"
	case KeyLevel:
		return "key"
	}
	return ""
}

// Decision is the store's answer to an Admission.
type Decision struct {
	Outcome Outcome
	// Level is the level of the limit that refused (the balance is the
	// account's); zero when admitted.
	Level Level
	// RetryAfter is when waiting may help; zero when it cannot (the
	// balance, a lifetime cap, a token bound above the limit itself).
	RetryAfter time.Duration
}

// Settlement ends one admitted request. Applying the same RequestID twice has
// no further effect.
type Settlement struct {
	RequestID string
	AccountID string
	KeyID     string
	// The three models of the request: usage is counted under Priced; the
	// ledger keeps all three.
	Requested usage.RequestedModel
	Priced    usage.PricedModel
	Reported  usage.ReportedModel
	Usage     usage.Usage
	// Rates are the unit prices Cost was computed from, in nano-USD per
	// million units of each kind (pricing.Rates), so that an invoice line can
	// be rebuilt from the ledger.
	Rates       usage.Usage
	ServiceTier string // the service tier priced; "" for the standard tier
	// TierUnknown: the reply reported a ServiceTier the model has no prices
	// for; it was priced at the dearest of the model's tiers.
	TierUnknown bool
	// Region is the regional processing region of the endpoint that served
	// the reply, and Uplift the catalogue's uplift applied for it, in parts
	// per million of the cost; "" and 0 when none applied.
	Region      string
	Uplift      int64
	LongContext int64 // the long-context threshold priced, in tokens; 0 for none
	Fallback    bool  // priced with the upstream's price for unknown models
	Cost        int64 // nano-USD; zero for non-2xx replies
	Estimated   bool
	// Capped: the vendor reported more usage than the request allowed
	// (max_tokens × n for output, the model's context window for input);
	// Usage is capped at that.
	Capped bool
	// Interrupted marks a request settled by the sweeper at its last
	// checkpoint because its sidecar stopped renewing its hold.
	Interrupted bool
	// Reconciled marks the ledger entry of a settlement that arrived after
	// its request was swept: its amounts (cost, usage) are the difference
	// from the interrupted entry, of either sign. Set by the store only.
	Reconciled bool
	Status     int    // the status the client saw; non-2xx charges nothing and counts no usage
	Endpoint   string // "primary" or "reserve"; empty when unknown
	Stream     bool
	StartedAt  time.Time
	EndedAt    time.Time
}

// Period is a usage aggregation window.
type Period string

const (
	Day   Period = "day"   // UTC calendar day
	Month Period = "month" // UTC calendar month
	Total Period = "total" // all time
)

// Counters aggregate usage over a period.
type Counters struct {
	Requests int64
	Usage    usage.Usage
	Cost     int64 // nano-USD
}

// ModelCounters are Counters for one priced model.
type ModelCounters struct {
	Model usage.PricedModel
	Counters
}

// UsageReport is an account's state as GET /v1/usage shows it.
type UsageReport struct {
	Balance   int64 // nano-USD, settled; open holds not subtracted
	Limits    Limits
	DailyUsed int64 // settled spend of the current UTC day, nano-USD
	MonthUsed int64 // settled spend of the current UTC month, nano-USD
	InFlight  int64 // open holds
	Held      int64 // what they hold, nano-USD
	// MinuteTokens are the tokens counted in the current UTC minute against
	// a tokens-per-minute limit (0 without one).
	MinuteTokens int64
	Period       Period
	Totals       Counters
	ByModel      []ModelCounters // sorted by model name
}

// LedgerEntry is one settled request as recorded in the account's ledger.
type LedgerEntry struct {
	ID string // stream entry id
	Settlement
}

// Store is the gateway's Redis-backed state.
type Store struct {
	rdb  redis.UniversalClient
	opts Options
	// lastUsed keeps settlement from rewriting a credential's last_used
	// more than once a minute.
	lastUsed usedMinutes
}
