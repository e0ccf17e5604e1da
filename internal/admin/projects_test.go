package admin

import (
	"encoding/json"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/modelgateway/gateway/internal/account"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// Projects through the admin API: made, listed, limited, a key made in one
// and moved out, deleted once empty; the default project refuses limits
// and deletion; each change is audited.
func TestProjects(t *testing.T) {
	e := newEnv(t)
	a := e.account(10e9)
	cr, err := e.client.CreateProject(e.ctx, &adminv1.CreateProjectRequest{AccountId: a.Id, Name: "Team A", Limits: &adminv1.Limits{DailyNanoUsd: 1e9}})
	if err != nil {
		t.Fatal(err)
	}
	p := cr.Project
	if p.Name != "Team A" || p.Limits.DailyNanoUsd != 1e9 || p.AccountId != a.Id {
		t.Fatalf("project %+v", p)
	}
	_, err = e.client.CreateProject(e.ctx, &adminv1.CreateProjectRequest{AccountId: a.Id})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.CreateProject(e.ctx, &adminv1.CreateProjectRequest{AccountId: "acct_none", Name: "x"})
	wantCode(t, err, codes.NotFound)

	rpm := int64(30)
	sl, err := e.client.SetProjectLimits(e.ctx, &adminv1.SetProjectLimitsRequest{AccountId: a.Id, ProjectId: p.Id, Rpm: &rpm})
	if err != nil {
		t.Fatal(err)
	}
	if sl.Project.Limits.Rpm != 30 || sl.Project.Limits.DailyNanoUsd != 1e9 {
		t.Fatalf("limits %+v", sl.Project.Limits)
	}
	_, err = e.client.SetProjectLimits(e.ctx, &adminv1.SetProjectLimitsRequest{AccountId: a.Id, ProjectId: account.DefaultProject, Rpm: &rpm})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = e.client.SetProjectLimits(e.ctx, &adminv1.SetProjectLimitsRequest{AccountId: a.Id, ProjectId: "prj_none", Rpm: &rpm})
	wantCode(t, err, codes.NotFound)

	_, k := e.key(a.Id, &adminv1.CreateKeyRequest{ProjectId: p.Id})
	if k.ProjectId != p.Id {
		t.Fatalf("key in project %q", k.ProjectId)
	}
	_, old := e.key(a.Id, nil)
	if old.ProjectId != account.DefaultProject {
		t.Fatalf("a key made without a project is in %q", old.ProjectId)
	}
	ls, err := e.client.ListProjects(e.ctx, &adminv1.ListProjectsRequest{AccountId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Projects) != 2 || ls.Projects[0].Id != account.DefaultProject || ls.Projects[1].Id != p.Id {
		t.Fatalf("projects %+v", ls.Projects)
	}
	_, err = e.client.DeleteProject(e.ctx, &adminv1.DeleteProjectRequest{AccountId: a.Id, ProjectId: p.Id})
	wantCode(t, err, codes.FailedPrecondition)
	_, err = e.client.MoveKey(e.ctx, &adminv1.MoveKeyRequest{AccountId: a.Id, KeyId: k.Id, ProjectId: "prj_none"})
	wantCode(t, err, codes.NotFound)
	mv, err := e.client.MoveKey(e.ctx, &adminv1.MoveKeyRequest{AccountId: a.Id, KeyId: k.Id, ProjectId: account.DefaultProject})
	if err != nil {
		t.Fatal(err)
	}
	if mv.Key.ProjectId != account.DefaultProject || e.keys(a.Id)[k.Id].ProjectId != account.DefaultProject {
		t.Fatalf("moved key %+v", mv.Key)
	}
	if _, err := e.client.DeleteProject(e.ctx, &adminv1.DeleteProjectRequest{AccountId: a.Id, ProjectId: p.Id}); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.DeleteProject(e.ctx, &adminv1.DeleteProjectRequest{AccountId: a.Id, ProjectId: account.DefaultProject})
	wantCode(t, err, codes.FailedPrecondition)

	au, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, en := range au.Entries {
		seen[en.Action]++
		// Each change says the state it changed, as the account's and
		// key's changes do.
		before, after := map[string]any{}, map[string]any{}
		_ = json.Unmarshal([]byte(en.Before), &before)
		_ = json.Unmarshal([]byte(en.After), &after)
		ok := true
		switch en.Action {
		case "project.create":
			ok = en.Before == "" && after["project"] == p.Id && after["name"] == "Team A" && after["limits"] != nil
		case "project.limits":
			ok = before["project"] == p.Id && before["limits"] != nil && after["limits"] != nil && en.Before != en.After
		case "key.move":
			ok = before["project"] == p.Id && after["project"] == account.DefaultProject
		}
		if !ok {
			t.Errorf("audit %s: %s -> %s", en.Action, en.Before, en.After)
		}
	}
	for _, action := range []string{"project.create", "project.limits", "project.delete", "key.move"} {
		if seen[action] != 1 {
			t.Fatalf("audit %s: %d entries (%v)", action, seen[action], seen)
		}
	}
}
