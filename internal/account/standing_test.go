package account

import (
	"testing"
	"time"
)

// A standing refuses only what no request could pass: a budget settled to
// its limit on its own day, a balance gone, and nothing while a free model
// could still be served.
func TestStandingSpent(t *testing.T) {
	now := time.Date(2026, 3, 31, 23, 59, 0, 0, time.UTC)
	st := Standing{Read: now, Day: "20260331", Month: "202603", Balance: 10, DaySpent: 5, Daily: 5, MonthSpent: 5, Monthly: 9}
	for _, c := range []struct {
		name    string
		st      Standing
		l       Limits
		at      time.Time
		least   int64
		want    Outcome
		refused bool
	}{
		{"daily spent", st, Limits{}, now, 1, DailyLimited, true},
		{"a free model passes", st, Limits{}, now, 0, 0, false},
		{"the day turned", st, Limits{}, now.Add(2 * time.Minute), 1, 0, false},
		{"not read", Standing{}, Limits{}, now, 1, 0, false},
		{"balance gone", Standing{Read: now, Balance: 0}, Limits{}, now, 1, InsufficientBalance, true},
		{"key total", Standing{Read: now, Balance: 10, KeyTotalSpent: 3}, Limits{TotalNanoUSD: 3}, now, 1, TotalLimited, true},
		{"room left", Standing{Read: now, Balance: 10, KeyTotalSpent: 2}, Limits{TotalNanoUSD: 3}, now, 1, 0, false},
	} {
		d, ok := c.st.Spent(c.l, c.at, c.least)
		if ok != c.refused || ok && d.Outcome != c.want {
			t.Errorf("%s: %v %v, want %v %v", c.name, d.Outcome, ok, c.want, c.refused)
		}
	}
}
