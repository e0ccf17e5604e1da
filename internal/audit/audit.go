// Package audit holds the record of the audit trail: one administrative
// action (who did what to which account or key, from where, the state
// before and after, and whether it was refused). It is a plain value;
// package store keeps the trail in Redis (redacting anything shaped like a
// secret as it appends an entry), the admin API and the console append to
// it, and the ledger sink exports it.
package audit

import "time"

// Entry is one administrative action, as kept in the audit stream.
type Entry struct {
	ID        string // stream entry id; set by the store
	Actor     string
	Action    string
	AccountID string
	KeyID     string
	Detail    string
	// Origin is where the change came from: the client address of a
	// console session or an admin API call ("" in entries older than it).
	Origin string
	// Before and After are the changed state as JSON objects ("" when there
	// is none: nothing before a creation, nothing after a refusal).
	Before, After string
	// Outcome is "" for a change made, OutcomeRefused for one a role did
	// not allow.
	Outcome string
	At      time.Time // zero: now
}

// OutcomeRefused marks an audit entry of a change refused to its actor.
const OutcomeRefused = "refused"
