package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
)

// projectKey makes a model key of the account in project pid and returns
// it as a lookup sees it (its project's limits with it).
func (e *env) projectKey(acct, pid string) account.Key {
	e.t.Helper()
	secret, _, err := e.s.CreateKey(e.ctx, acct, account.ModelKey, account.KeyOptions{ProjectID: pid})
	if err != nil {
		e.t.Fatal(err)
	}
	k, err := e.s.LookupKey(e.ctx, HashSecret(secret))
	if err != nil {
		e.t.Fatal(err)
	}
	return k
}

func (e *env) lookup(k account.Key) account.Key {
	e.t.Helper()
	got, err := e.s.Key(e.ctx, k.AccountID, k.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if got.ProjectID != "" {
		p, err := e.s.Project(e.ctx, k.AccountID, got.ProjectID)
		if err != nil {
			e.t.Fatal(err)
		}
		got.ProjectName, got.ProjectLimits = p.Name, p.Limits
	}
	return got
}

// admitAs admits a request of key k as the processor does: with the key's
// and its project's limits.
func (e *env) admitAs(k account.Key, req string, hold int64) account.Decision {
	e.t.Helper()
	d, err := e.s.Admit(e.ctx, &account.Admission{RequestID: req, AccountID: k.AccountID, KeyID: k.ID, Priced: "m", Hold: hold,
		KeyLimits: k.Limits, ProjectID: k.ProjectID, ProjectLimits: k.ProjectLimits})
	if err != nil {
		e.t.Fatalf("admit %s: %v", req, err)
	}
	return d
}

func (e *env) settleAs(k account.Key, req string, cost int64) {
	e.t.Helper()
	if !e.settle(account.Settlement{RequestID: req, AccountID: k.AccountID, KeyID: k.ID, ProjectID: k.ProjectID, Priced: "m", Cost: cost}) {
		e.t.Fatalf("settle %s: not applied", req)
	}
}

func (e *env) projectState(acct, pid string) ledger.KeyState {
	e.t.Helper()
	ps, err := e.s.ProjectStates(e.ctx, acct, pid)
	if err != nil {
		e.t.Fatal(err)
	}
	return ps[0]
}

// Projects are made, listed, limited and deleted; the default one is
// implicit and has no limits; a key is moved between them.
func testProjects(t *testing.T, e *env) {
	acct := e.account(10*usd, account.Limits{})
	p, err := e.s.CreateProject(e.ctx, acct, "Team A", account.Limits{DailyNanoUSD: usd})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.CreateProject(e.ctx, acct, "", account.Limits{}); err == nil {
		t.Fatal("a project without a name was made")
	}
	if _, err := e.s.CreateProject(e.ctx, acct, "x", account.Limits{ConcurrencyWaitSeconds: 1}); err == nil {
		t.Fatal("a project with a concurrency wait was made")
	}
	if _, err := e.s.CreateProject(e.ctx, "acct_missing", "x", account.Limits{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("project of a missing account: %v", err)
	}
	ps, err := e.s.ListProjects(e.ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].ID != account.DefaultProject || ps[1].ID != p.ID || ps[1].Name != "Team A" || ps[1].Limits.DailyNanoUSD != usd {
		t.Fatalf("projects %+v", ps)
	}
	if err := e.s.SetProjectLimits(e.ctx, acct, account.DefaultProject, account.Limits{RPM: 1}); !errors.Is(err, ErrDefaultProject) {
		t.Fatalf("limits of the default project: %v", err)
	}
	if err := e.s.SetProjectLimits(e.ctx, acct, p.ID, account.Limits{TotalNanoUSD: 2 * usd}); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.s.Project(e.ctx, acct, p.ID); got.Limits != (account.Limits{TotalNanoUSD: 2 * usd}) {
		t.Fatalf("limits %+v", got.Limits)
	}
	k := e.projectKey(acct, p.ID)
	if k.ProjectID != p.ID || k.Project() != p.ID || k.ProjectName != "Team A" || k.ProjectLimits.TotalNanoUSD != 2*usd {
		t.Fatalf("key %+v", k)
	}
	if _, _, err := e.s.CreateKey(e.ctx, acct, account.ModelKey, account.KeyOptions{ProjectID: "prj_missing"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("key in a missing project: %v", err)
	}
	if err := e.s.DeleteProject(e.ctx, acct, p.ID); !errors.Is(err, ErrProjectHasKeys) {
		t.Fatalf("delete with keys: %v", err)
	}
	if err := e.s.MoveKey(e.ctx, acct, k.ID, "prj_missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("move to a missing project: %v", err)
	}
	if err := e.s.MoveKey(e.ctx, acct, k.ID, account.DefaultProject); err != nil {
		t.Fatal(err)
	}
	if got := e.lookup(k); got.ProjectID != "" || got.Project() != account.DefaultProject {
		t.Fatalf("moved key %+v", got)
	}
	if err := e.s.DeleteProject(e.ctx, acct, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteProject(e.ctx, acct, p.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if err := e.s.DeleteProject(e.ctx, acct, account.DefaultProject); !errors.Is(err, ErrDefaultProject) {
		t.Fatalf("delete the default project: %v", err)
	}
	if ps, _ := e.s.ListProjects(e.ctx, acct); len(ps) != 1 {
		t.Fatalf("projects after delete %+v", ps)
	}
}

// A project's limits refuse at the project level with its amounts; its
// held amount and in-flight count leave with settlement and a sweep; its
// spend is counted; a moved key's spend goes to its new project from the
// move on.
func testProjectLimits(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	pa, _ := e.s.CreateProject(e.ctx, acct, "A", account.Limits{DailyNanoUSD: 3 * usd, Concurrency: 2})
	pb, _ := e.s.CreateProject(e.ctx, acct, "B", account.Limits{RPM: 1})
	ka := e.projectKey(acct, pa.ID)
	ka2 := e.projectKey(acct, pa.ID)
	wantAdmitted(t, e.admitAs(ka, "a1", usd))
	wantAdmitted(t, e.admitAs(ka2, "a2", usd))
	wantRefusal(t, e.admitAs(ka, "a3", usd), account.ConcurrencyLimited, account.ProjectLevel, time.Second)
	if s := e.projectState(acct, pa.ID); s.InFlight != 2 || s.Held != 2*usd {
		t.Fatalf("project state %+v", s)
	}
	e.settleAs(ka, "a1", usd/2)
	// 0.5 settled + 1 held + 2 asked > 3.
	d := e.admitAs(ka2, "a4", 2*usd)
	wantRefusal(t, d, account.DailyLimited, account.ProjectLevel, account.NextDay(e.clock.Now()).Sub(e.clock.Now()))
	if d.Limit != 3*usd || d.Used != usd/2 || d.Held != usd || d.Request != 2*usd {
		t.Fatalf("refusal amounts %+v", d)
	}
	wantAdmitted(t, e.admitAs(ka2, "a5", usd))
	e.settleAs(ka2, "a2", usd)
	// The sweeper settles a5 as interrupted: its hold leaves the project.
	e.clock.Advance(holdTTL + time.Second)
	if r := e.sweep(acct); len(r.Interrupted) != 1 || r.Interrupted[0].ProjectID != pa.ID {
		t.Fatalf("sweep %+v", r)
	}
	if s := e.projectState(acct, pa.ID); s.InFlight != 0 || s.Held != 0 || s.Day.Requests != 2 || s.Day.Cost != usd+usd/2 {
		t.Fatalf("project state after settling %+v", s)
	}

	// Rate at the project level: another key of the project is refused.
	kb := e.projectKey(acct, pb.ID)
	kb2 := e.projectKey(acct, pb.ID)
	wantAdmitted(t, e.admitAs(kb, "b1", usd))
	if d := e.admitAs(kb2, "b2", usd); d.Outcome != account.RateLimited || d.Level != account.ProjectLevel || d.Limit != 1 || d.Used != 1 {
		t.Fatalf("rate refusal %+v", d)
	}
	e.settleAs(kb, "b1", usd)

	// Moving a key moves its future spend only; an old request settles
	// against the project it was admitted under.
	wantAdmitted(t, e.admitAs(ka, "m1", usd))
	before := e.projectState(acct, pa.ID).Day.Cost
	if err := e.s.MoveKey(e.ctx, acct, ka.ID, pb.ID); err != nil {
		t.Fatal(err)
	}
	e.settleAs(ka, "m1", usd) // ka as admitted: project A
	moved := e.lookup(ka)
	e.clock.Advance(time.Minute)
	wantAdmitted(t, e.admitAs(moved, "m2", usd))
	e.settleAs(moved, "m2", usd)
	a, b := e.projectState(acct, pa.ID), e.projectState(acct, pb.ID)
	if a.Day.Cost != before+usd || b.Day.Cost != 2*usd || a.InFlight != 0 || b.InFlight != 0 {
		t.Fatalf("after the move: A %+v, B %+v", a, b)
	}
	for _, l := range e.ledger(acct) {
		if l.RequestID == "m1" && l.ProjectID != pa.ID || l.RequestID == "m2" && l.ProjectID != pb.ID {
			t.Fatalf("ledger entry %s in project %q", l.RequestID, l.ProjectID)
		}
	}
}

// N requests race for a project's last dollars, and others for the
// account's: exactly what fits is admitted at each level.
func testProjectRace(t *testing.T, e *env) {
	const n, hold = 24, usd / 4
	acct := e.account(100*usd, account.Limits{DailyNanoUSD: 5 * usd})
	pa, _ := e.s.CreateProject(e.ctx, acct, "A", account.Limits{DailyNanoUSD: 2 * usd})
	pb, _ := e.s.CreateProject(e.ctx, acct, "B", account.Limits{DailyNanoUSD: 4 * usd})
	ka, kb := e.projectKey(acct, pa.ID), e.projectKey(acct, pb.ID)
	var wg sync.WaitGroup
	var admittedA, admittedB atomic.Int64
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if e.admitAs(ka, fmt.Sprint("a", i), hold).Outcome == account.Admitted {
				admittedA.Add(1)
			}
		}()
		go func() {
			defer wg.Done()
			if e.admitAs(kb, fmt.Sprint("b", i), hold).Outcome == account.Admitted {
				admittedB.Add(1)
			}
		}()
	}
	wg.Wait()
	// A's 2 USD fit 8 holds and B's 4 USD 16, but the account's 5 USD fit
	// 20: whichever project the race favours, neither passes its own
	// budget and the account admits exactly 20 (a refusal below that would
	// need both projects full, 24).
	if a, b := admittedA.Load(), admittedB.Load(); a > 8 || b > 16 || a+b != 20 {
		t.Fatalf("admitted A %d (at most 8), B %d (at most 16); want 20 in all", a, b)
	}
}

// A request swept before any checkpoint is left uncharged; its late
// settlement counts it at its key and its project as in the account's
// counters: the request and its cost, once each.
func testSettleAfterSweepCountsEveryLevel(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	p, err := e.s.CreateProject(e.ctx, acct, "P", account.Limits{DailyNanoUSD: 10 * usd})
	if err != nil {
		t.Fatal(err)
	}
	k := e.projectKey(acct, p.ID)
	wantAdmitted(t, e.admitAs(k, "late", usd))
	e.clock.Advance(holdTTL + time.Second)
	if r := e.sweep(acct); len(r.Interrupted) != 1 {
		t.Fatalf("swept %+v", r)
	}
	if ks, ps := e.keyState(acct, k.ID), e.projectState(acct, p.ID); ks.Day.Requests != 0 || ps.Day.Requests != 0 {
		t.Fatalf("after the sweep: key %+v, project %+v", ks.Day, ps.Day)
	}
	late := account.Settlement{RequestID: "late", AccountID: acct, KeyID: k.ID, ProjectID: p.ID, Priced: "m", Status: 200, Cost: usd / 2}
	for round := range 2 {
		if r := e.s.SettleBatch(e.ctx, []account.Settlement{late}); r[0].Err != nil || r[0].Reconciled != (round == 0) {
			t.Fatalf("round %d: %+v", round, r[0])
		}
	}
	ks, ps := e.keyState(acct, k.ID), e.projectState(acct, p.ID)
	if ks.Day.Requests != 1 || ks.Day.Cost != usd/2 || ps.Day.Requests != 1 || ps.Day.Cost != usd/2 {
		t.Fatalf("after the late settlement: key %+v, project %+v", ks.Day, ps.Day)
	}
	if u := e.usage(acct, ledger.Total); u.Totals.Requests != 1 || u.Totals.Cost != usd/2 {
		t.Fatalf("account counters %+v", u.Totals)
	}
}
