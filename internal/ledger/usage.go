package ledger

import (
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

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

// DayCounters are one UTC day's settled counters.
type DayCounters struct {
	Day time.Time // midnight UTC
	Counters
}

// UsageReport is an account's state as GET /v1/usage shows it.
type UsageReport struct {
	Balance   int64 // nano-USD, settled; open holds not subtracted
	Limits    account.Limits
	DailyUsed int64 // settled spend of the current UTC day, nano-USD
	MonthUsed int64 // settled spend of the current UTC month, nano-USD
	InFlight  int64 // open holds
	Held      int64 // what they hold, nano-USD
	// Leased is what the sidecars' leases hold of the balance (escrow,
	// docs/billing.md, Leases), nano-USD: not spent, not spendable by
	// another sidecar.
	Leased int64
	// MinuteTokens are the tokens counted in the current window (the last
	// 60 to 65 s, internal/store/lua/admit.lua) against a tokens-per-minute
	// limit (0 without one): settled requests at what they used, open ones
	// at their bound.
	MinuteTokens int64
	Period       Period
	Totals       Counters
	ByModel      []ModelCounters // sorted by model name
}

// KeyState is what one credential has in flight and has spent (a
// project's state is one too, its KeyID the project's id). Spend counts
// charged (2xx) replies, by UTC day, UTC month and in total.
type KeyState struct {
	KeyID        string
	InFlight     int64 // open holds
	Held         int64 // what they hold, nano-USD
	MinuteTokens int64 // counted in the rolling token window (with a tpm limit)
	Day          Counters
	Month        Counters
	Total        Counters
}

// Spent returns the counters of period p.
func (k KeyState) Spent(p Period) Counters {
	switch p {
	case Day:
		return k.Day
	case Month:
		return k.Month
	}
	return k.Total
}
