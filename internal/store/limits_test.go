package store

import (
	"fmt"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

// admitKey admits a request of key keyID with the key's limits l and a
// token bound.
func (e *env) admitKey(acct, keyID, req string, hold, tokens int64, l account.Limits) account.Decision {
	e.t.Helper()
	d, err := e.s.Admit(e.ctx, &account.Admission{RequestID: req, AccountID: acct, KeyID: keyID, Priced: "m", Hold: hold, Tokens: tokens, KeyLimits: l})
	if err != nil {
		e.t.Fatalf("admit %s: %v", req, err)
	}
	return d
}

func wantRefusal(t *testing.T, got account.Decision, outcome account.Outcome, level account.Level, retry time.Duration) {
	t.Helper()
	if got.Outcome != outcome || got.Level != level || got.RetryAfter != retry {
		t.Fatalf("decision %s at %s retry %v, want %s at %s retry %v",
			got.Outcome, got.Level, got.RetryAfter, outcome, level, retry)
	}
}

func wantAdmitted(t *testing.T, got account.Decision) {
	t.Helper()
	if got.Outcome != account.Admitted {
		t.Fatalf("decision %s at %s, want admitted", got.Outcome, got.Level)
	}
}

func (e *env) keyState(acct, keyID string) ledger.KeyState {
	e.t.Helper()
	ks, err := e.s.KeyStates(e.ctx, acct, keyID)
	if err != nil {
		e.t.Fatal(err)
	}
	return ks[0]
}

// Requests in flight: the key's and the account's, each a limit; a
// settlement frees its slot, also one by the sweeper.
func testConcurrencyLimit(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{Concurrency: 3})
	kl := account.Limits{Concurrency: 2}
	wantAdmitted(t, e.admitKey(acct, "key_a", "a1", 1, 0, kl))
	wantAdmitted(t, e.admitKey(acct, "key_a", "a2", 1, 0, kl))
	wantRefusal(t, e.admitKey(acct, "key_a", "a3", 1, 0, kl), account.ConcurrencyLimited, account.KeyLevel, time.Second)
	// Another key of the account takes the account's last slot.
	wantAdmitted(t, e.admitKey(acct, "key_b", "b1", 1, 0, account.Limits{}))
	wantRefusal(t, e.admitKey(acct, "key_b", "b2", 1, 0, account.Limits{}), account.ConcurrencyLimited, account.AccountLevel, time.Second)
	if s := e.keyState(acct, "key_a"); s.InFlight != 2 || s.Held != 2 {
		t.Fatalf("key state %+v", s)
	}
	e.settle(account.Settlement{RequestID: "a1", AccountID: acct, KeyID: "key_a", Cost: 1})
	wantAdmitted(t, e.admitKey(acct, "key_a", "a3", 1, 0, kl))
	// A settlement replayed does not free a second slot.
	if e.settle(account.Settlement{RequestID: "a1", AccountID: acct, KeyID: "key_a", Cost: 1}) {
		t.Fatal("settled twice")
	}
	if s := e.keyState(acct, "key_a"); s.InFlight != 2 {
		t.Fatalf("in flight %d after a replay, want 2", s.InFlight)
	}
	// A request whose sidecar died holds its slot until the sweeper
	// settles it.
	e.clock.Advance(holdTTL + time.Second)
	wantRefusal(t, e.admitKey(acct, "key_a", "a4", 1, 0, kl), account.ConcurrencyLimited, account.KeyLevel, time.Second)
	e.sweep(acct)
	wantAdmitted(t, e.admitKey(acct, "key_a", "a4", 1, 0, kl))
	if s := e.keyState(acct, "key_a"); s.InFlight != 1 {
		t.Fatalf("in flight %d after the sweep, want 1", s.InFlight)
	}
}

// Tokens per minute: open requests count at their bound, settled ones at
// what they used, in the rolling window (5 s buckets, 60 to 65 s) of
// their admission.
func testTokenLimit(t *testing.T, e *env) {
	e.clock.Set(start.Add(10 * time.Second)) // the bucket [10 s, 15 s)
	acct := e.account(usd, account.Limits{TPM: 5000})
	kl := account.Limits{TPM: 1000}
	wantAdmitted(t, e.admitKey(acct, "key_a", "r1", 1, 600, kl))
	// r1's bucket leaves the window 60 s after it ends: at 75 s.
	d := e.admitKey(acct, "key_a", "r2", 1, 500, kl)
	wantRefusal(t, d, account.TokenLimited, account.KeyLevel, 65*time.Second)
	if d.Limit != 1000 || d.Used != 0 || d.Held != 600 || d.Request != 500 {
		t.Fatalf("amounts %+v, want limit 1000, used 0, held 600, request 500", d)
	}
	// r1 used 100 of its 600: 500 more fit.
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_a", Cost: 1, Usage: usage.Usage{Input: 60, Output: 30, CacheRead: 10}})
	if s := e.keyState(acct, "key_a"); s.MinuteTokens != 100 {
		t.Fatalf("key window tokens %d, want 100", s.MinuteTokens)
	}
	wantAdmitted(t, e.admitKey(acct, "key_a", "r2", 1, 500, kl))
	// A bound above the limit can never fit: no retry-after.
	wantRefusal(t, e.admitKey(acct, "key_a", "r3", 1, 1001, kl), account.TokenLimited, account.KeyLevel, 0)
	// The account's limit counts every key.
	wantAdmitted(t, e.admitKey(acct, "key_b", "b1", 1, 4000, account.Limits{}))
	d = e.admitKey(acct, "key_c", "c1", 1, 401, account.Limits{})
	wantRefusal(t, d, account.TokenLimited, account.AccountLevel, 65*time.Second)
	if d.Limit != 5000 || d.Used != 100 || d.Held != 4500 || d.Request != 401 {
		t.Fatalf("amounts %+v, want limit 5000, used 100, held 4500, request 401", d)
	}
	if u := e.usage(acct, ledger.Day); u.MinuteTokens != 4600 {
		t.Fatalf("account window tokens %d, want 4600", u.MinuteTokens)
	}
	// A non-2xx reply used nothing: its whole bound is released.
	e.settle(account.Settlement{RequestID: "b1", AccountID: acct, KeyID: "key_b", Status: 500})
	wantAdmitted(t, e.admitKey(acct, "key_c", "c1", 1, 4000, account.Limits{}))
	// 60 s later the bucket is still in the window: a new UTC minute
	// does not start afresh.
	e.clock.Set(start.Add(time.Minute))
	if s := e.keyState(acct, "key_a"); s.MinuteTokens != 600 {
		t.Fatalf("key window tokens at the next minute %d, want 600", s.MinuteTokens)
	}
	wantRefusal(t, e.admitKey(acct, "key_a", "r4", 1, 1000, kl), account.TokenLimited, account.KeyLevel, 15*time.Second)
	// Once it has left, a request admitted in it and settled later
	// leaves the window alone.
	e.clock.Set(start.Add(75 * time.Second))
	wantAdmitted(t, e.admitKey(acct, "key_a", "r4", 1, 1000, kl))
	e.settle(account.Settlement{RequestID: "r2", AccountID: acct, KeyID: "key_a", Cost: 1, Usage: usage.Usage{Output: 1}})
	if s := e.keyState(acct, "key_a"); s.MinuteTokens != 1000 {
		t.Fatalf("key window tokens %d, want 1000", s.MinuteTokens)
	}
	// A reply that used more than its bound counts all it used.
	e.settle(account.Settlement{RequestID: "r4", AccountID: acct, KeyID: "key_a", Cost: 1, Usage: usage.Usage{Input: 900, Output: 300}})
	if s := e.keyState(acct, "key_a"); s.MinuteTokens != 1200 {
		t.Fatalf("key window tokens %d, want 1200", s.MinuteTokens)
	}
}

// No 60 s carries more than the tokens-per-minute limit, however the
// requests straddle UTC minutes: a burst of requests every half second
// for three minutes, through two stores (two sidecars) in turn, each
// settled at once having used its whole bound. With a count per UTC
// minute, the 60 s around a minute's start carried twice the limit.
func testTokenWindowRolls(t *testing.T, e *env) {
	const tpm, bound = 1000, 100
	acct := e.account(usd, account.Limits{})
	other := New(e.rdb, Options{Now: e.clock.Now, HoldTTL: holdTTL})
	kl := account.Limits{TPM: tpm}
	var admitted []time.Time
	for i := range 360 {
		e.clock.Set(start.Add(-30*time.Second + time.Duration(i)*500*time.Millisecond))
		s := e.s
		if i%2 == 1 {
			s = other
		}
		req := fmt.Sprint("w", i)
		d, err := s.Admit(e.ctx, &account.Admission{RequestID: req, AccountID: acct, KeyID: "key_a", Priced: "m", Hold: 1, Tokens: bound, KeyLimits: kl})
		if err != nil {
			t.Fatal(err)
		}
		if d.Outcome != account.Admitted {
			if d.Outcome != account.TokenLimited || d.RetryAfter <= 0 || d.RetryAfter > 65*time.Second {
				t.Fatalf("request %d: %s retry %v, want admitted or a tpm refusal within 65 s", i, d.Outcome, d.RetryAfter)
			}
			continue
		}
		admitted = append(admitted, e.clock.Now())
		if _, err := s.Settle(e.ctx, account.Settlement{RequestID: req, AccountID: acct, KeyID: "key_a", Status: 200, Cost: 1, Usage: usage.Usage{Input: bound}}); err != nil {
			t.Fatal(err)
		}
	}
	if len(admitted) < 3*tpm/bound {
		t.Fatalf("%d admitted in 3 minutes, want at least %d", len(admitted), 3*tpm/bound)
	}
	for i, from := range admitted {
		n := 0
		for _, at := range admitted[i:] {
			if at.Sub(from) < time.Minute {
				n++
			}
		}
		if n*bound > tpm {
			t.Fatalf("the 60 s from %v carried %d tokens, more than the limit of %d", from.Sub(start), n*bound, tpm)
		}
	}
}

// Every refusal carries the refusing limit's amounts: what is used, held
// and what this request would take.
func testRefusalAmounts(t *testing.T, e *env) {
	acct := e.account(10*usd, account.Limits{Concurrency: 2})
	// The rate: 2 admissions in the window.
	kl := account.Limits{RPM: 2, WindowMinutes: 1}
	wantAdmitted(t, e.admitKey(acct, "key_r", "r1", 1, 0, kl))
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_r", Cost: 1})
	wantAdmitted(t, e.admitKey(acct, "key_r", "r2", 1, 0, kl))
	e.settle(account.Settlement{RequestID: "r2", AccountID: acct, KeyID: "key_r", Cost: 1})
	if d := e.admitKey(acct, "key_r", "r3", 1, 0, kl); d.Outcome != account.RateLimited || d.Limit != 2 || d.Used != 2 || d.Held != 0 || d.Request != 1 {
		t.Fatalf("rate refusal %+v, want limit 2, used 2", d)
	}
	// The key's daily budget: 3 USD settled, 2 held, 6 asked of 10.
	kl = account.Limits{DailyNanoUSD: 10 * usd}
	wantAdmitted(t, e.admitKey(acct, "key_d", "d1", 3*usd, 0, kl))
	e.settle(account.Settlement{RequestID: "d1", AccountID: acct, KeyID: "key_d", Cost: 3 * usd})
	wantAdmitted(t, e.admitKey(acct, "key_d", "d2", 2*usd, 0, kl))
	if d := e.admitKey(acct, "key_d", "d3", 6*usd, 0, kl); d.Outcome != account.DailyLimited || d.Level != account.KeyLevel ||
		d.Limit != 10*usd || d.Used != 3*usd || d.Held != 2*usd || d.Request != 6*usd {
		t.Fatalf("daily refusal %+v, want limit 10, used 3, held 2, request 6 USD", d)
	}
	// The account's concurrency: 2 in flight (d2 and one more).
	wantAdmitted(t, e.admitKey(acct, "key_c", "c1", 1, 0, account.Limits{}))
	if d := e.admitKey(acct, "key_c", "c2", 1, 0, account.Limits{}); d.Outcome != account.ConcurrencyLimited || d.Level != account.AccountLevel ||
		d.Limit != 2 || d.Used != 2 || d.Request != 1 {
		t.Fatalf("concurrency refusal %+v, want limit 2, used 2, request 1", d)
	}
	e.settle(account.Settlement{RequestID: "c1", AccountID: acct, KeyID: "key_c", Cost: 1})
	// The balance: 10 USD less 3 USD and 3 nano-USD settled; 2 USD held.
	balance := int64(10*usd - 3*usd - 3)
	if d := e.admitKey(acct, "key_c", "c3", 9*usd, 0, account.Limits{}); d.Outcome != account.InsufficientBalance ||
		d.Limit != balance || d.Used != 0 || d.Held != 2*usd || d.Request != 9*usd {
		t.Fatalf("balance refusal %+v, want balance %d, held 2 USD, request 9 USD", d, balance)
	}
}

// Budgets: spend plus open holds against the key's day, month and
// lifetime and the account's month; windows roll over at UTC boundaries,
// the lifetime never.
func testSpendBudgets(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 11, 30, 23, 0, 0, 0, time.UTC))
	acct := e.account(100*usd, account.Limits{MonthlyNanoUSD: 5000})
	kl := account.Limits{DailyNanoUSD: 1000, MonthlyNanoUSD: 1500, TotalNanoUSD: 2500}
	wantAdmitted(t, e.admitKey(acct, "key_a", "r1", 600, 0, kl))
	// Open holds count.
	wantRefusal(t, e.admitKey(acct, "key_a", "r2", 500, 0, kl), account.DailyLimited, account.KeyLevel, time.Hour)
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_a", Cost: 600})
	wantAdmitted(t, e.admitKey(acct, "key_a", "r2", 400, 0, kl)) // 600 + 400 = 1000 exactly
	e.settle(account.Settlement{RequestID: "r2", AccountID: acct, KeyID: "key_a", Cost: 400})
	s := e.keyState(acct, "key_a")
	if s.Day.Cost != 1000 || s.Month.Cost != 1000 || s.Total.Cost != 1000 || s.Total.Requests != 2 || s.InFlight != 0 || s.Held != 0 {
		t.Fatalf("key state %+v", s)
	}
	// December: the day and the month start afresh, the lifetime does not.
	e.clock.Set(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if s := e.keyState(acct, "key_a"); s.Day.Cost != 0 || s.Month.Cost != 0 || s.Total.Cost != 1000 {
		t.Fatalf("key state on the new month %+v", s)
	}
	wantAdmitted(t, e.admitKey(acct, "key_a", "r3", 1000, 0, kl))
	e.settle(account.Settlement{RequestID: "r3", AccountID: acct, KeyID: "key_a", Cost: 1000})
	e.clock.Advance(24 * time.Hour)
	wantAdmitted(t, e.admitKey(acct, "key_a", "r4", 400, 0, kl))
	// Month: 1000 + 400 held + 200 > 1500.
	wantRefusal(t, e.admitKey(acct, "key_a", "r5", 200, 0, kl), account.MonthlyLimited, account.KeyLevel, 30*24*time.Hour)
	e.settle(account.Settlement{RequestID: "r4", AccountID: acct, KeyID: "key_a", Cost: 400})
	// Total: 2400 spent; the next month does not help a lifetime cap.
	e.clock.Set(time.Date(2027, 1, 15, 0, 0, 0, 0, time.UTC))
	wantRefusal(t, e.admitKey(acct, "key_a", "r5", 200, 0, kl), account.TotalLimited, account.KeyLevel, 0)
	wantAdmitted(t, e.admitKey(acct, "key_a", "r5", 100, 0, kl))

	// The account's month counts every key; it rolls over with the month.
	e.clock.Set(time.Date(2027, 1, 31, 12, 0, 0, 0, time.UTC))
	wantAdmitted(t, e.admitKey(acct, "key_b", "b1", 4000, 0, account.Limits{}))
	e.settle(account.Settlement{RequestID: "b1", AccountID: acct, KeyID: "key_b", Cost: 4000})
	wantRefusal(t, e.admitKey(acct, "key_c", "c1", 901, 0, account.Limits{}), account.MonthlyLimited, account.AccountLevel, 12*time.Hour)
	if u := e.usage(acct, ledger.Month); u.MonthUsed != 4000 {
		t.Fatalf("MonthUsed %d, want 4000", u.MonthUsed)
	}
	e.clock.Set(time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC))
	wantAdmitted(t, e.admitKey(acct, "key_c", "c1", 4900, 0, account.Limits{}))
}

// A key's request rate is its own, on top of the account's.
func testKeyRateLimit(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{RPM: 3, WindowMinutes: 1})
	kl := account.Limits{RPM: 2, WindowMinutes: 1}
	wantAdmitted(t, e.admitKey(acct, "key_a", "a1", 1, 0, kl))
	e.clock.Advance(10 * time.Second)
	wantAdmitted(t, e.admitKey(acct, "key_a", "a2", 1, 0, kl))
	wantRefusal(t, e.admitKey(acct, "key_a", "a3", 1, 0, kl), account.RateLimited, account.KeyLevel, 50*time.Second)
	wantAdmitted(t, e.admitKey(acct, "key_b", "b1", 1, 0, account.Limits{}))
	wantRefusal(t, e.admitKey(acct, "key_b", "b2", 1, 0, account.Limits{}), account.RateLimited, account.AccountLevel, 50*time.Second)
}

// The strictest limit wins, whichever level sets it; the order of the
// checks decides which one a refusal names.
func testStrictestWins(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{DailyNanoUSD: 100, Concurrency: 10})
	// The key allows more than the account: the account refuses.
	kl := account.Limits{DailyNanoUSD: 1000}
	wantRefusal(t, e.admitKey(acct, "key_a", "r1", 101, 0, kl), account.DailyLimited, account.AccountLevel, 12*time.Hour)
	// The key allows less: the key refuses.
	kl = account.Limits{DailyNanoUSD: 50}
	wantRefusal(t, e.admitKey(acct, "key_a", "r1", 51, 0, kl), account.DailyLimited, account.KeyLevel, 12*time.Hour)
	wantAdmitted(t, e.admitKey(acct, "key_a", "r1", 50, 0, kl))
}

// Key limits are stored with the key, read back by a lookup (what the key
// cache serves) and changed without touching what was counted.
func testKeyLimitsStored(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{})
	l := account.Limits{RPM: 1, WindowMinutes: 2, TPM: 3, Concurrency: 4, DailyNanoUSD: 5, MonthlyNanoUSD: 6, TotalNanoUSD: 7, ConcurrencyWaitSeconds: 8}
	secret, k, err := e.s.CreateKey(e.ctx, acct, account.ModelKey, account.KeyOptions{Label: "ci", Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.s.LookupKey(e.ctx, HashSecret(secret))
	if err != nil || got.Limits != l {
		t.Fatalf("lookup: %+v, %v", got.Limits, err)
	}
	wantAdmitted(t, e.admitKey(acct, k.ID, "r1", 5, 1, l))
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: k.ID, Cost: 5})
	l2 := account.Limits{TotalNanoUSD: 10, ConcurrencyWaitSeconds: 60}
	if err := e.s.SetKeyLimits(e.ctx, acct, k.ID, l2); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.s.Key(e.ctx, acct, k.ID); got.Limits != l2 {
		t.Fatalf("limits after the change %+v", got.Limits)
	}
	// The 5 already spent stays counted against the new cap.
	wantRefusal(t, e.admitKey(acct, k.ID, "r2", 6, 0, l2), account.TotalLimited, account.KeyLevel, 0)
	wantAdmitted(t, e.admitKey(acct, k.ID, "r2", 5, 0, l2))
	// Rotation keeps the limits.
	_, nk, err := e.s.RotateKey(e.ctx, acct, k.ID, 0)
	if err != nil || nk.Limits != l2 {
		t.Fatalf("rotated %+v, %v", nk.Limits, err)
	}
	wantErr(t, e.s.SetKeyLimits(e.ctx, acct, "key_0000000000000000", l2), ErrNotFound)
	if err := e.s.SetKeyLimits(e.ctx, acct, k.ID, account.Limits{TPM: -1}); err == nil {
		t.Error("negative limit accepted")
	}
	if err := e.s.SetLimits(e.ctx, acct, account.Limits{TotalNanoUSD: 1}); err == nil {
		t.Error("a total limit accepted for an account")
	}
	if err := e.s.SetKeyLimits(e.ctx, acct, k.ID, account.Limits{ConcurrencyWaitSeconds: 61}); err == nil {
		t.Error("a concurrency wait above the most allowed accepted")
	}
	if err := e.s.SetLimits(e.ctx, acct, account.Limits{ConcurrencyWaitSeconds: 1}); err == nil {
		t.Error("a concurrency wait accepted for an account")
	}
	al := account.Limits{RPM: 1, WindowMinutes: 1, TPM: 2, Concurrency: 3, DailyNanoUSD: 4, MonthlyNanoUSD: 5}
	if err := e.s.SetLimits(e.ctx, acct, al); err != nil {
		t.Fatal(err)
	}
	if a, _ := e.s.Account(e.ctx, acct); a.Limits != al {
		t.Fatalf("account limits %+v", a.Limits)
	}
}

// Many keys' requests at once against every kind of limit: the store never
// admits beyond one of them, and what it counts adds up.
func testLimitsConcurrent(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{Concurrency: 7, TPM: 100_000, MonthlyNanoUSD: 5000})
	kl := account.Limits{Concurrency: 3, TotalNanoUSD: 2000}
	const n = 40
	results := make(chan account.Decision, n)
	for i := range n {
		go func() {
			d, err := e.s.Admit(e.ctx, &account.Admission{RequestID: fmt.Sprint("r", i), AccountID: acct,
				KeyID: fmt.Sprint("key_", i%4), Hold: 300, Tokens: 1000, KeyLimits: kl})
			if err != nil {
				t.Error(err)
			}
			results <- d
		}()
	}
	admitted := 0
	for range n {
		if d := <-results; d.Outcome == account.Admitted {
			admitted++
		}
	}
	// Each of 4 keys: 3 in flight at most, 2000/300 = 6 by its cap; the
	// account: 7 in flight.
	if admitted != 7 {
		t.Fatalf("admitted %d, want 7", admitted)
	}
	var inFlight int64
	for i := range 4 {
		s := e.keyState(acct, fmt.Sprint("key_", i))
		if s.InFlight > 3 {
			t.Fatalf("key %d: %d in flight", i, s.InFlight)
		}
		inFlight += s.InFlight
	}
	if u := e.usage(acct, ledger.Day); inFlight != 7 || u.InFlight != 7 || u.Held != 7*300 || u.MinuteTokens != 7000 {
		t.Fatalf("in flight %d, account %+v", inFlight, u)
	}
}
