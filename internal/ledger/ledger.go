// Package ledger holds the gateway's record of what requests cost: the
// ledger's entries, one per settled request; the outcome of settling a
// request and of sweeping an account's expired holds; and the usage
// reports read from the usage counters that settlement adds to (an
// account's, a key's, a project's, by period, model and day). They are
// plain values; package store writes and reads them in Redis.
package ledger

import "github.com/modelgateway/gateway/internal/account"

// Entry is one settled request as recorded in the account's ledger.
type Entry struct {
	ID string // stream entry id
	account.Settlement
}

// SettleResult is the outcome of one settlement of a batch.
type SettleResult struct {
	Applied bool
	Err     error
	// Spooled: the store could not be reached and the settlement waits in
	// the spool (set by the spool only); its hold is still in Redis.
	Spooled bool
	// Reconciled: the request had been swept; the difference between this
	// settlement and what the sweep charged was posted (Applied is true).
	Reconciled bool
}

// SweepResult is what one sweep of an account did.
type SweepResult struct {
	// Interrupted are the requests settled at their last checkpoint because
	// their hold's lease ran out. Applied is false for one that had already
	// settled (a sweeper elsewhere, or its own late settlement).
	Interrupted []account.Settlement
	Applied     []bool
	// Released counts expired holds without an admission record (an older
	// sidecar's), released at no charge.
	Released int64
	// LeasesReturned are the amounts of the expired leases given back to
	// the account (their sidecar stopped renewing them).
	LeasesReturned []int64
}
