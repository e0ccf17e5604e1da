package admin

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// ProjectStore is what the project handlers read and change of an
// account's projects, and MoveKey of a key's project.
type ProjectStore interface {
	CreateProject(ctx context.Context, accountID, name string, l account.Limits) (account.Project, error)
	ListProjects(ctx context.Context, accountID string) ([]account.Project, error)
	Project(ctx context.Context, accountID, id string) (account.Project, error)
	SetProjectLimits(ctx context.Context, accountID, id string, l account.Limits) error
	DeleteProject(ctx context.Context, accountID, id string) error
	MoveKey(ctx context.Context, accountID, keyID, projectID string) error
}

func limitsFromProto(l *adminv1.Limits) account.Limits {
	return account.Limits{
		DailyNanoUSD: l.GetDailyNanoUsd(), RPM: l.GetRpm(), WindowMinutes: l.GetWindowMinutes(), TPM: l.GetTpm(),
		Concurrency: l.GetConcurrency(), MonthlyNanoUSD: l.GetMonthlyNanoUsd(), TotalNanoUSD: l.GetTotalNanoUsd(),
		ConcurrencyWaitSeconds: l.GetConcurrencyWaitSeconds(),
	}
}

// checkProject checks a project's name and limits before the store does,
// so that the caller gets INVALID_ARGUMENT.
func checkProject(name string, l account.Limits) error {
	if err := checkName("a project's name", name); err != nil {
		return err
	}
	if l.ConcurrencyWaitSeconds != 0 {
		return invalid("limits: a project has no concurrency wait (a key's is its own)")
	}
	return checkLimits(l)
}

// CreateProject makes a project in an account.
func (s *Service) CreateProject(ctx context.Context, req *adminv1.CreateProjectRequest) (*adminv1.CreateProjectResponse, error) {
	l := limitsFromProto(req.GetLimits())
	if err := checkProject(req.GetName(), l); err != nil {
		return nil, err
	}
	p, err := s.projects.CreateProject(ctx, req.GetAccountId(), req.GetName(), l)
	if err != nil {
		return nil, s.failAccount("create project", req.GetAccountId(), err)
	}
	s.change(ctx, "project.create", p.AccountID, "", fmt.Sprintf("project=%s name=%q %s", p.ID, p.Name, limitsDetail(l)),
		nil, map[string]any{"project": p.ID, "name": p.Name, "limits": l})
	return &adminv1.CreateProjectResponse{Project: projectToProto(p)}, nil
}

// ListProjects lists an account's projects, the default one first.
func (s *Service) ListProjects(ctx context.Context, req *adminv1.ListProjectsRequest) (*adminv1.ListProjectsResponse, error) {
	ps, err := s.projects.ListProjects(ctx, req.GetAccountId())
	if err != nil {
		return nil, s.failAccount("list projects", req.GetAccountId(), err)
	}
	out := make([]*adminv1.Project, len(ps))
	for i, p := range ps {
		out[i] = projectToProto(p)
	}
	return &adminv1.ListProjectsResponse{Projects: out}, nil
}

// SetProjectLimits changes a project's limits; unset fields keep theirs.
func (s *Service) SetProjectLimits(ctx context.Context, req *adminv1.SetProjectLimitsRequest) (*adminv1.SetProjectLimitsResponse, error) {
	accountID, id := req.GetAccountId(), req.GetProjectId()
	if id == account.DefaultProject {
		return nil, status.Errorf(codes.FailedPrecondition, "set project limits: %v", store.ErrDefaultProject)
	}
	p, err := s.projects.Project(ctx, accountID, id)
	if err != nil {
		return nil, s.fail("set project limits", projectMissing(err, accountID, id))
	}
	l := limitChanges{
		daily: req.DailyNanoUsd, rpm: req.Rpm, window: req.WindowMinutes,
		tpm: req.Tpm, concurrency: req.Concurrency, monthly: req.MonthlyNanoUsd, total: req.TotalNanoUsd,
	}.apply(p.Limits)
	if err := checkProject(p.Name, l); err != nil {
		return nil, err
	}
	if err := s.projects.SetProjectLimits(ctx, accountID, id, l); err != nil {
		return nil, s.fail("set project limits", projectMissing(err, accountID, id))
	}
	s.change(ctx, "project.limits", accountID, "", "project="+id+" "+limitsDetail(l),
		map[string]any{"project": id, "limits": p.Limits}, map[string]any{"project": id, "limits": l})
	p.Limits = l
	return &adminv1.SetProjectLimitsResponse{Project: projectToProto(p)}, nil
}

// DeleteProject deletes a project without keys.
func (s *Service) DeleteProject(ctx context.Context, req *adminv1.DeleteProjectRequest) (*adminv1.DeleteProjectResponse, error) {
	accountID, id := req.GetAccountId(), req.GetProjectId()
	if err := s.projects.DeleteProject(ctx, accountID, id); err != nil {
		return nil, s.fail("delete project", projectMissing(err, accountID, id))
	}
	s.audit(ctx, "project.delete", accountID, "", "project="+id)
	return &adminv1.DeleteProjectResponse{}, nil
}

// MoveKey moves a model key to another project of its account.
func (s *Service) MoveKey(ctx context.Context, req *adminv1.MoveKeyRequest) (*adminv1.MoveKeyResponse, error) {
	accountID, keyID, to := req.GetAccountId(), req.GetKeyId(), req.GetProjectId()
	if to == "" {
		to = account.DefaultProject
	}
	k, err := s.credential(ctx, "move key", accountID, keyID, account.ModelKey)
	if err != nil {
		return nil, err
	}
	if k.Project() == to {
		return &adminv1.MoveKeyResponse{Key: keyToProto(k, s.now())}, nil
	}
	if err := s.projects.MoveKey(ctx, accountID, keyID, to); err != nil {
		return nil, s.fail("move key", projectMissing(err, accountID, to))
	}
	s.change(ctx, "key.move", accountID, keyID, "from="+k.Project()+" to="+to,
		map[string]any{"project": k.Project()}, map[string]any{"project": to})
	k.ProjectID = to
	if to == account.DefaultProject {
		k.ProjectID = ""
	}
	return &adminv1.MoveKeyResponse{Key: keyToProto(k, s.now())}, nil
}

// projectMissing names the project in a not-found error.
func projectMissing(err error, accountID, id string) error {
	if errors.Is(err, store.ErrNotFound) && !errors.As(err, new(*missing)) {
		return &missing{what: fmt.Sprintf("project %q of account %q", id, accountID)}
	}
	return err
}
