package account

import (
	"time"

	"github.com/modelgateway/gateway/internal/usage"
)

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
	Transport string    // Settlement.Transport: "" for HTTP, "websocket"
	StartedAt time.Time // zero: the store's clock at admission
	// KeyLimits are the limits of the key KeyID as the caller knows them
	// (its key cache): a change is seen within the cache's lifetime.
	KeyLimits Limits
	// ProjectID is the key's project ("" for the default project) and
	// ProjectLimits its limits, known the same way as KeyLimits.
	ProjectID     string
	ProjectLimits Limits
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
	ProjectLevel
)

func (l Level) String() string {
	switch l {
	case AccountLevel:
		return "account"
	case KeyLevel:
		return "key"
	case ProjectLevel:
		return "project"
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
	// The refusing limit's amounts, for the client's message (zero when
	// admitted): the limit; what is used of it (settled); what requests
	// in flight hold of it; what this request would take. Nano-USD for a
	// spend budget and the balance (Limit is then the balance, Used 0),
	// tokens for tokens per minute, requests for the rate (Used: those in
	// its window) and concurrency (Used: those in flight), where Request
	// is 1 and Held 0.
	Limit, Used, Held, Request int64
	// Lease is set when the request was admitted from a lease in memory
	// (internal/leases) rather than by the store's admission script.
	Lease LeaseRef
}

// LeaseRef names a request admitted from a lease: the lease, the request's
// sequence number in it and its hold; where it used the lease's tokens per
// minute, its token bound, their bucket and the token windows they are in
// (1 the account's, 2 the key's, 3 both). Its settlement carries it, so
// that the store can settle the request from the lease should the hold not
// be recorded yet (docs/billing.md, Leases).
type LeaseRef struct {
	ID          string
	Seq         int64
	Hold        int64
	Tokens      int64
	Bucket      int64
	TokenLevels int
}
