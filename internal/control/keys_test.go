package control

import (
	"context"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// A cr_ key sees its own limits and spend next to the account's record; a
// ro_ token sees each model key's share; both see the month's spend against
// the monthly limit. The spend shown is the spend enforced.
func TestUsageShowsKeysAndMonth(t *testing.T) {
	h, st, clk, acct, ro := setup(t)
	ctx := context.Background()
	if err := st.SetLimits(ctx, acct, account.Limits{DailyNanoUSD: 2e9, RPM: 60, WindowMinutes: 1, MonthlyNanoUSD: 3e9, TPM: 9000, Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	kl := account.Limits{DailyNanoUSD: 1e9, MonthlyNanoUSD: 15e8, TotalNanoUSD: 25e8, TPM: 5000, Concurrency: 2, RPM: 10, WindowMinutes: 1}
	ci, ciKey, err := st.CreateKey(ctx, acct, account.ModelKey, account.KeyOptions{Label: "ci", Limits: kl})
	if err != nil {
		t.Fatal(err)
	}
	_, devKey, err := st.CreateKey(ctx, acct, account.ModelKey, account.KeyOptions{Label: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id string, k account.Key, cost int64, settle bool) {
		t.Helper()
		d, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: acct, KeyID: k.ID, Priced: "m", Hold: cost, Tokens: 100, KeyLimits: k.Limits})
		if err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit: %+v %v", d, err)
		}
		if settle {
			if _, err := st.Settle(ctx, account.Settlement{RequestID: id, AccountID: acct, KeyID: k.ID, Priced: "m",
				Usage: usage.Usage{Input: 10, Output: 5}, Cost: cost, Status: 200}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run("c1", ciKey, 300_000_000, true)
	run("c2", ciKey, 100_000_000, true)
	run("d1", devKey, 50_000_000, true)
	run("c3", ciKey, 200_000_000, false) // in flight

	u := getUsage(t, h, ci, "day")
	if u.Key == nil || u.ByKey != nil {
		t.Fatalf("a cr_ key sees key %v, by_key %v", u.Key, u.ByKey)
	}
	k := u.Key
	if k.ID != ciKey.ID || k.Label != "ci" || k.Requests != 2 || k.CostUSD != 0.4 {
		t.Fatalf("key %+v", k)
	}
	l := k.Limits
	if l.DailyUSD != 1 || l.DailyUsedUSD != 0.4 || l.MonthlyUSD != 1.5 || l.MonthlyUsedUSD != 0.4 || l.TotalUSD != 2.5 || l.TotalUsedUSD != 0.4 ||
		l.TPM != 5000 || l.MinuteTokens != 15+15+100 || l.Concurrency != 2 || l.InFlight != 1 || l.HeldUSD != 0.2 || l.RPM != 10 {
		t.Fatalf("key limits %+v", l)
	}
	if a := u.Limits; a.MonthlyUSD != 3 || a.MonthlyUsedUSD != 0.45 || a.TPM != 9000 || a.Concurrency != 4 || a.InFlight != 1 || a.HeldUSD != 0.2 {
		t.Fatalf("account limits %+v", a)
	}

	r := getUsage(t, h, ro, "day")
	if r.Key != nil || len(r.ByKey) != 2 {
		t.Fatalf("a ro_ token sees key %v, by_key %v", r.Key, r.ByKey)
	}
	shares := map[string]KeyShare{}
	for _, s := range r.ByKey {
		shares[s.Label] = s
	}
	if s := shares["ci"]; s.ID != ciKey.ID || s.Requests != 2 || s.CostUSD != 0.4 {
		t.Fatalf("ci share %+v", s)
	}
	if s := shares["dev"]; s.Requests != 1 || s.CostUSD != 0.05 {
		t.Fatalf("dev share %+v", s)
	}
	// The next day (and month: the clock starts on Jan 31): the day's and
	// month's shares start afresh, the total keeps them.
	clk.Advance(2e9)
	if r := getUsage(t, h, ro, "month"); r.ByKey[0].Requests+r.ByKey[1].Requests != 0 || r.Limits.MonthlyUsedUSD != 0 {
		t.Fatalf("new month: %+v", r)
	}
	if r := getUsage(t, h, ro, "total"); r.ByKey[0].Requests+r.ByKey[1].Requests != 3 {
		t.Fatalf("total: %+v", r.ByKey)
	}
}
