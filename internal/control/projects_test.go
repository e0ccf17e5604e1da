package control

import (
	"context"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
)

// /v1/usage breaks the period's spend down by project: the default project
// has what the others leave of the account's; a ro_ token sees every
// project, a cr_ key its own; a moved key's earlier spend stays where it
// was made.
func TestUsageShowsProjects(t *testing.T) {
	h, st, _, acct, ro := setup(t)
	ctx := context.Background()
	p, err := st.CreateProject(ctx, acct, "Team A", account.Limits{DailyNanoUSD: 2e9})
	if err != nil {
		t.Fatal(err)
	}
	secret, k, err := st.CreateKey(ctx, acct, account.ModelKey, account.KeyOptions{Label: "a", ProjectID: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	_, dev, err := st.CreateKey(ctx, acct, account.ModelKey, account.KeyOptions{Label: "dev"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(id string, k account.Key, project string, cost int64) {
		t.Helper()
		d, err := st.Admit(ctx, &account.Admission{RequestID: id, AccountID: acct, KeyID: k.ID, Priced: "m", Hold: cost, ProjectID: project, ProjectLimits: p.Limits})
		if err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit: %+v %v", d, err)
		}
		if _, err := st.Settle(ctx, account.Settlement{RequestID: id, AccountID: acct, KeyID: k.ID, ProjectID: project, Priced: "m", Cost: cost, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	run("a1", k, p.ID, 300_000_000)
	run("d1", dev, "", 50_000_000)
	// dev moves into the project: only what it spends from now on is the
	// project's.
	if err := st.MoveKey(ctx, acct, dev.ID, p.ID); err != nil {
		t.Fatal(err)
	}
	run("d2", dev, p.ID, 100_000_000)

	r := getUsage(t, h, ro, "day")
	if len(r.Projects) != 2 {
		t.Fatalf("projects %+v", r.Projects)
	}
	def, a := r.Projects[0], r.Projects[1]
	if def.ID != account.DefaultProject || def.Requests != 1 || def.CostUSD != 0.05 || def.Limits != nil {
		t.Fatalf("default project %+v", def)
	}
	if a.ID != p.ID || a.Name != "Team A" || a.Requests != 2 || a.CostUSD != 0.4 || a.Limits == nil || a.Limits.DailyUSD != 2 || a.Limits.DailyUsedUSD != 0.4 {
		t.Fatalf("project %+v", a)
	}
	if r.Usage.CostUSD != 0.45 || r.Usage.Requests != 3 {
		t.Fatalf("account totals %+v", r.Usage)
	}
	u := getUsage(t, h, secret, "total")
	if len(u.Projects) != 1 || u.Projects[0].ID != p.ID || u.Projects[0].CostUSD != 0.4 {
		t.Fatalf("a cr_ key sees projects %+v", u.Projects)
	}
}
