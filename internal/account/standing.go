package account

import "time"

// Standing is what an account and one of its keys have left, as far as a
// request's headers can judge it: read with the key (so as old as the key
// cache's entry of it), it tells limits that no request could pass from
// limits a small enough request might. A pre-check only: the admission
// after the body decides every request the standing does not refuse.
type Standing struct {
	// Read is when it was read; zero: never (the pre-check passes).
	Read time.Time
	// Day and Month are the UTC day (YYYYMMDD) and month (YYYYMM) the
	// spends below are of: once either turns, its spends no longer hold.
	Day, Month string

	Balance int64 // the account's settled balance, nano-USD
	Held    int64 // what the account's open holds and leases hold of it
	// The account's budgets (0: none) and what is settled of them.
	Daily, Monthly       int64
	DaySpent, MonthSpent int64
	// The account's concurrency limit (0: none) and its open holds.
	Concurrency, InFlight int64

	// The key's own: what its open holds and leases hold, what is settled
	// of its budgets (its limits are Key.Limits), and its open requests.
	KeyHeld                                   int64
	KeyDaySpent, KeyMonthSpent, KeyTotalSpent int64
	KeyOpen                                   int64
}

// Spent is the refusal every request of key would get for a budget
// settled to its limit, or a balance gone, at now: in the admission
// script's order (the key before the account; daily, monthly, lifetime,
// then the balance). minHold is the least a request can hold: when it is
// 0 (a free model), a spent budget still admits it, and nothing is
// refused here.
func (s Standing) Spent(l Limits, now time.Time, minHold int64) (Decision, bool) {
	if s.Read.IsZero() || minHold <= 0 {
		return Decision{}, false
	}
	now = now.UTC()
	day := now.Format("20060102") == s.Day
	month := now.Format("200601") == s.Month
	spent := func(o Outcome, level Level, limit, used, held int64) (Decision, bool) {
		d := Decision{Outcome: o, Level: level, Limit: limit, Used: used, Held: held}
		switch o {
		case DailyLimited:
			d.RetryAfter = NextDay(now).Sub(now)
		case MonthlyLimited:
			d.RetryAfter = NextMonth(now).Sub(now)
		}
		return d, true
	}
	switch {
	case day && l.DailyNanoUSD > 0 && s.KeyDaySpent >= l.DailyNanoUSD:
		return spent(DailyLimited, KeyLevel, l.DailyNanoUSD, s.KeyDaySpent, s.KeyHeld)
	case day && s.Daily > 0 && s.DaySpent >= s.Daily:
		return spent(DailyLimited, AccountLevel, s.Daily, s.DaySpent, s.Held)
	case month && l.MonthlyNanoUSD > 0 && s.KeyMonthSpent >= l.MonthlyNanoUSD:
		return spent(MonthlyLimited, KeyLevel, l.MonthlyNanoUSD, s.KeyMonthSpent, s.KeyHeld)
	case month && s.Monthly > 0 && s.MonthSpent >= s.Monthly:
		return spent(MonthlyLimited, AccountLevel, s.Monthly, s.MonthSpent, s.Held)
	case l.TotalNanoUSD > 0 && s.KeyTotalSpent >= l.TotalNanoUSD:
		return spent(TotalLimited, KeyLevel, l.TotalNanoUSD, s.KeyTotalSpent, s.KeyHeld)
	case s.Balance <= 0:
		return Decision{Outcome: InsufficientBalance, Level: AccountLevel, Limit: s.Balance, Held: s.Held}, true
	}
	return Decision{}, false
}

// Full names the concurrency limit (the key's, else the account's) that
// the standing saw full. Requests end at any moment: a caller reads the
// requests in flight again before it refuses on this.
func (s Standing) Full(l Limits) (Level, bool) {
	switch {
	case s.Read.IsZero():
		return 0, false
	case l.Concurrency > 0 && s.KeyOpen >= l.Concurrency:
		return KeyLevel, true
	case s.Concurrency > 0 && s.InFlight >= s.Concurrency:
		return AccountLevel, true
	}
	return 0, false
}

// NextDay returns the start of the UTC day after t's: when daily budgets
// reset.
func NextDay(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// NextMonth returns the start of the UTC month after t's: when monthly
// budgets reset.
func NextMonth(t time.Time) time.Time {
	y, m, _ := t.UTC().Date()
	return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
}
