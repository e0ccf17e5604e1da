package account

import "time"

// A lease is escrow: a slice of an account's spendable money (and, where
// the account, key or project has rate, concurrency or tokens-per-minute
// limits, request slots, seats and tokens) that one sidecar takes, and
// admits requests against in memory (internal/leases); the store keeps it
// (internal/store/leases.go, docs/billing.md, Leases). A LeaseCall is what
// a sidecar asks of its lease, a LeaseResult what it gets, and a
// LeasedRequest a request it admitted from the lease, whose hold the store
// records.

// LeaseCall takes, resizes or returns one lease
// (internal/store/lua/lease.lua).
type LeaseCall struct {
	AccountID, KeyID, LeaseID string
	// Free is the sidecar's free amount of the lease (what it may still
	// admit from it), Want the free amount it would like (0 returns the
	// lease), Min the least worth keeping, Share the divisor of the room.
	Free, Want, Min, Share int64
	// KeyLimits are the key's limits as the sidecar knows them.
	KeyLimits Limits
	// ProjectID and ProjectLimits are the key's project and its limits as
	// the sidecar knows them; for a lease already taken, those it was
	// taken under. A project that is the default or has no limit is none.
	ProjectID     string
	ProjectLimits Limits
	// Cursor is the sidecar's next slot number (from 1): every slot below
	// it is used, and none at or above it is used until the call returns.
	// WantSlots is how many free slots it would like, MinSlots the fewest
	// worth a lease where a rate limit applies.
	Cursor, WantSlots, MinSlots int64
	// FreeSeats is the sidecar's free seats of the lease, WantSeats how
	// many it would like, MinSeats the fewest worth a lease where a
	// concurrency limit applies.
	FreeSeats, WantSeats, MinSeats int64
	// FreeTokens is the sidecar's free tokens of the lease, WantTokens how
	// many it would like, MinTokens the fewest worth a lease where a
	// tokens-per-minute limit applies.
	FreeTokens, WantTokens, MinTokens int64
	// Taken: the sidecar has called under this lease id before, so a lease
	// missing from Redis was swept and is gone (LeaseGone), whatever the
	// sidecar has free; only a first call takes a new lease.
	Taken bool
}

// Lease reasons (LeaseResult.Reason).
const (
	LeaseHeld       = 0
	LeaseNotAllowed = 1 // the account is suspended, the key revoked, or the lease's kind changed
	LeaseTooSmall   = 2 // the room left is too small to slice
	LeaseNoAccount  = 3
	LeaseGone       = 4 // swept: take a new lease under another id
)

// LeaseResult is one lease call's answer: Delta is the change of the free
// amount (the caller adds it to its own free amount); the caller may use
// slots [Cursor, Hi), or any number when Hi is -1 (no rate limit applies).
// Rates says which rate logs hold the slots (LevelAccount, LevelKey,
// LevelProject). Seats is the change of the free seats (the caller adds
// it to its own), Seated which concurrency limits they count against
// (LevelAccount, LevelKey, LevelProject; 0: no seat is needed). Tokens is
// the change of the free tokens (the caller adds it to its own), usable
// while the current 5 s bucket (unix ms / 5000, store.TokenBucket) is at
// most TokenBucket; TokenLevels says which token windows hold them
// (LevelAccount, LevelKey, LevelProject; 0: no tokens needed).
type LeaseResult struct {
	Delta       int64
	Reason      int
	Hi          int64
	Rates       int
	Seats       int64
	Seated      int
	Tokens      int64
	TokenLevels int
	TokenBucket int64
	Err         error
}

// Where a lease's slots, seats or tokens count (LeaseResult.Rates, Seated
// and TokenLevels, LeaseRef.TokenLevels, bits of): against the account's
// limit (its rate log, in-flight count, token window), the key's, its
// project's, or several; 0 where none has the limit. lease.lua's
// levelsOf. (A Level, by contrast, names the one level of a refusing
// limit.)
const (
	LevelAccount = 1
	LevelKey     = 2
	LevelProject = 4
)

// LeasedRequest is a request admitted from a lease, whose hold is to be
// recorded (internal/store/lua/record.lua).
type LeasedRequest struct {
	Lease LeaseRef
	// KeyCounted: the hold counts in the key's held and in-flight counts
	// (the key has a spend budget, a concurrency or a tokens-per-minute
	// limit), as admit.lua counts it.
	KeyCounted bool
	// ProjectCounted: the hold counts in the held and in-flight counts of
	// its project (Admission.ProjectID), the lease's (it has a spend
	// budget, a concurrency or a tokens-per-minute limit), as admit.lua
	// counts it.
	ProjectCounted bool
	// Slot is the lease's request slot the request used (0: none, the
	// lease has no rate limit), Rates the rate logs the slot is in
	// (LeaseResult.Rates), At the admission time its id is scored at.
	Slot      int64
	Rates     int
	At        time.Time
	Admission Admission
}
