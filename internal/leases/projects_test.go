package leases

import (
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
)

// A key whose project has a spend budget is leased: its lease counts
// against the project, its requests are admitted from it and counted in
// the project's state; a project whose limits change, and a key moved to
// another project, have their lease returned.
func TestProjectLeases(t *testing.T) {
	r := newRig(t)
	acct := r.account(1000 * usd)
	pl := account.Limits{DailyNanoUSD: 100 * usd}
	p, err := r.st.CreateProject(r.ctx, acct, "team", pl)
	if err != nil {
		t.Fatal(err)
	}
	const hold = 10_000_000
	adm := func(project string, l account.Limits) account.Decision {
		t.Helper()
		r.n++
		d, err := r.m.Admit(r.ctx, &account.Admission{RequestID: r.requestID(), AccountID: acct, KeyID: "key_1", Priced: "m", Hold: hold,
			ProjectID: project, ProjectLimits: l})
		if err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit: %+v %v", d, err)
		}
		return d
	}
	adm(p.ID, pl)
	r.m.Renew(r.ctx, false)
	d := adm(p.ID, pl)
	if d.Lease.ID == "" {
		t.Fatalf("%+v, want admitted from a lease", d)
	}
	states := func() ledger.KeyState {
		t.Helper()
		ps, err := r.st.ProjectStates(r.ctx, acct, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		return ps[0]
	}
	r.m.flush(r.ctx)
	if s := states(); s.InFlight != 2 || s.Held != 2*hold {
		t.Fatalf("project state %+v, want the script's request and the leased one", s)
	}
	r.settle(account.Settlement{RequestID: r.requestID(), AccountID: acct, KeyID: "key_1", ProjectID: p.ID, Priced: "m", Status: 200, Cost: 1000, Lease: d.Lease})
	if s := states(); s.InFlight != 1 || s.Day.Cost != 1000 {
		t.Fatalf("project state %+v after the settlement", s)
	}

	// The project's limits change (a concurrency limit too): not from the
	// old lease, which the next renewal returns; a new one holds seats of
	// the project.
	conc := account.Limits{DailyNanoUSD: 100 * usd, Concurrency: 50}
	if d := adm(p.ID, conc); d.Lease.ID != "" {
		t.Fatalf("%+v admitted from a lease taken under other project limits", d)
	}
	r.m.Renew(r.ctx, true)
	if u := r.report(acct); u.Leased != 0 {
		t.Fatalf("leased %d after the project's limits changed", u.Leased)
	}
	adm(p.ID, conc)
	r.m.Renew(r.ctx, false)
	if d := adm(p.ID, conc); d.Lease.ID == "" {
		t.Fatalf("%+v, want admitted from a new lease", d)
	}
	r.m.flush(r.ctx)
	if s := states(); s.InFlight != 4 {
		t.Fatalf("project state %+v, want 4 in flight (three by the script, one from the lease)", s)
	}
	// Moved to the default project: the lease is given back at the next
	// renewal, and a new one taken without the project.
	if d := adm("", account.Limits{}); d.Lease.ID != "" {
		t.Fatalf("%+v admitted from the old project's lease", d)
	}
	r.m.Renew(r.ctx, true)
	if u := r.report(acct); u.Leased != 0 {
		t.Fatalf("leased %d after the key left its project", u.Leased)
	}
	r.m.Close(r.ctx)
}
