package extproc

// The request headers' pre-check: a key whose budget is settled to its
// limit, whose account's balance is gone or whose concurrency limit is
// full is refused before Envoy buffers the body, with the refusal the
// admission would give. The key's standing (account.Standing, read with
// the key, so as old as its key cache entry) decides the budgets and the
// balance; a concurrency limit it saw full is read again from the store
// first, since a slot frees whenever a request ends. Only refusals come
// from here: every request the pre-check lets through is admitted or
// refused by the admission after its body.

import (
	"context"
	"slices"
	"time"

	"github.com/modelgateway/gateway/internal/account"
)

// earlyOutcomes are the refusals answered at a request's headers: those
// remembered (refusals.go) and those of the pre-check.
var earlyOutcomes = slices.Concat(rememberedOutcomes, []account.Outcome{account.ConcurrencyLimited, account.DailyLimited,
	account.MonthlyLimited, account.TotalLimited, account.InsufficientBalance})

// suspendedKind counts, among the refusals at the headers, the requests of
// a suspended account (refused by the key lookup, whatever the path).
const suspendedKind = "suspended"

// An InFlightReader reads the requests in flight of an account and of
// one of its keys (the store implements it).
type InFlightReader interface {
	InFlight(ctx context.Context, accountID, keyID string) (acct, key int64, err error)
}

// precheck answers a metered request its key's standing refuses whatever
// its body; nil: read the body.
func (x *exchange) precheck(ctx context.Context) *Refusal {
	if x.key.Standing == nil {
		return nil
	}
	st := *x.key.Standing
	if d, ok := x.full(ctx, st); ok {
		return x.refusedEarly(d)
	}
	if d, ok := st.Spent(x.key.Limits, x.s.now(), x.upstream.Prices.LeastHold()); ok {
		return x.refusedEarly(d)
	}
	return nil
}

// refusedEarly answers a request refused at its headers, counted there
// as well as among the limits' refusals.
func (x *exchange) refusedEarly(d account.Decision) *Refusal {
	x.s.metrics.earlyRefusals.WithLabelValues(d.Outcome.String()).Inc()
	return x.refused(d, unknownAmount, unknownAmount)
}

// full is the concurrency refusal of a key whose standing saw a limit
// full and whose requests may not wait for a slot, if the store still
// counts the limit full.
func (x *exchange) full(ctx context.Context, st account.Standing) (account.Decision, bool) {
	level, ok := st.Full(x.key.Limits)
	if !ok || x.s.inFlight == nil || x.s.waiter.limit(time.Duration(x.key.Limits.ConcurrencyWaitSeconds)*time.Second) > 0 {
		return account.Decision{}, false
	}
	acct, key, err := x.s.inFlight.InFlight(ctx, x.key.AccountID, x.key.ID)
	if err != nil {
		// The admission after the body meets the store's trouble and
		// answers it.
		return account.Decision{}, false
	}
	d := account.Decision{Outcome: account.ConcurrencyLimited, Level: level, RetryAfter: time.Second, Request: 1}
	switch {
	case level == account.KeyLevel && key >= x.key.Limits.Concurrency:
		d.Limit, d.Used = x.key.Limits.Concurrency, key
	case level == account.AccountLevel && acct >= st.Concurrency:
		d.Limit, d.Used = st.Concurrency, acct
	default:
		return account.Decision{}, false
	}
	return d, true
}
