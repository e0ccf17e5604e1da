package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

func (a *app) projectsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "projects", Short: "Create, list, limit and delete an account's projects"}
	cmd.AddCommand(a.projectsCreateCmd(), a.projectsListCmd(), a.projectsLimitsCmd(), a.projectsDeleteCmd())
	return cmd
}

// projectsCreateCmd is `projects create ACCOUNT_ID --name N [limits]`.
func (a *app) projectsCreateCmd() *cobra.Command {
	var name string
	flags := levelLimitFlags{project: true}
	cmd := &cobra.Command{
		Use:   "create ACCOUNT_ID --name N [--rpm N --window-minutes N --tpm N --concurrency N --daily-usd X --monthly-usd X --total-usd X]",
		Short: "Make a project in an account, with limits of its own",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		c, _, err := flags.changes(cmd.Flags())
		if err != nil {
			return err
		}
		r, err := a.client.CreateProject(ctx, &adminv1.CreateProjectRequest{AccountId: args[0], Name: name, Limits: c.limits()})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { projectDetail(w, r.Project) })
	})
	cmd.Flags().StringVar(&name, "name", "", "the project's name")
	flags.add(cmd.Flags())
	return cmd
}

// limits are the changes as limits, 0 for those not given.
func (c limitChanges) limits() *adminv1.Limits {
	v := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return &adminv1.Limits{Rpm: v(c.rpm), WindowMinutes: v(c.window), Tpm: v(c.tpm), Concurrency: v(c.concurrency),
		DailyNanoUsd: v(c.daily), MonthlyNanoUsd: v(c.monthly), TotalNanoUsd: v(c.total)}
}

func (a *app) projectsListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list ACCOUNT_ID", Short: "List an account's projects, the default one first", Args: cobra.ExactArgs(1)}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		r, err := a.client.ListProjects(ctx, &adminv1.ListProjectsRequest{AccountId: args[0]})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) {
			row(w, "ID", "NAME", "CREATED", "RPM", "TPM", "CONCURRENCY", "DAILY_USD", "MONTHLY_USD", "TOTAL_USD")
			for _, p := range r.Projects {
				l := p.GetLimits()
				row(w, p.Id, p.Name, when(p.CreateTime), limit(l.GetRpm(), false), limit(l.GetTpm(), false), limit(l.GetConcurrency(), false),
					limit(l.GetDailyNanoUsd(), true), limit(l.GetMonthlyNanoUsd(), true), limit(l.GetTotalNanoUsd(), true))
			}
		})
	})
	return cmd
}

// projectsLimitsCmd is `projects set-limits ACCOUNT_ID PROJECT_ID [flags]`.
func (a *app) projectsLimitsCmd() *cobra.Command {
	flags := levelLimitFlags{project: true}
	cmd := &cobra.Command{
		Use:   "set-limits ACCOUNT_ID PROJECT_ID [--rpm N --window-minutes N --tpm N --concurrency N --daily-usd X --monthly-usd X --total-usd X]",
		Short: "Change the limits given of a project (0 removes one); the others stay",
		Args:  cobra.ExactArgs(2),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		c, changed, err := flags.changes(cmd.Flags())
		if err != nil {
			return err
		}
		if !changed {
			return fmt.Errorf("no limit given: use --rpm, --tpm, --concurrency, --daily-usd, --monthly-usd, --total-usd or --window-minutes")
		}
		r, err := a.client.SetProjectLimits(ctx, &adminv1.SetProjectLimitsRequest{AccountId: args[0], ProjectId: args[1],
			Rpm: c.rpm, WindowMinutes: c.window, Tpm: c.tpm, Concurrency: c.concurrency,
			DailyNanoUsd: c.daily, MonthlyNanoUsd: c.monthly, TotalNanoUsd: c.total})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { projectDetail(w, r.Project) })
	})
	flags.add(cmd.Flags())
	return cmd
}

func (a *app) projectsDeleteCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "delete ACCOUNT_ID PROJECT_ID", Short: "Delete a project that has no keys", Args: cobra.ExactArgs(2)}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		r, err := a.client.DeleteProject(ctx, &adminv1.DeleteProjectRequest{AccountId: args[0], ProjectId: args[1]})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { fmt.Fprintf(w, "deleted %s\n", args[1]) })
	})
	return cmd
}

// keysMoveCmd is `keys move ACCOUNT_ID KEY_ID --project PROJECT_ID`.
func (a *app) keysMoveCmd() *cobra.Command {
	var project string
	cmd := &cobra.Command{
		Use:   "move ACCOUNT_ID KEY_ID --project PROJECT_ID",
		Short: "Move a model key to another project (default: the default project); its future spend counts there",
		Args:  cobra.ExactArgs(2),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		if !cmd.Flags().Changed("project") {
			return fmt.Errorf("--project is required (default for the default project)")
		}
		r, err := a.client.MoveKey(ctx, &adminv1.MoveKeyRequest{AccountId: args[0], KeyId: args[1], ProjectId: project})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { keyDetail(w, r.Key) })
	})
	cmd.Flags().StringVar(&project, "project", "", "the project to move the key to (default: the default project)")
	return cmd
}

// projectDetail writes a project as name/value lines.
func projectDetail(w io.Writer, p *adminv1.Project) {
	row(w, "id", p.GetId())
	row(w, "account", p.GetAccountId())
	row(w, "name", p.GetName())
	row(w, "created", when(p.GetCreateTime()))
	row(w, "LIMIT", "VALUE")
	l := p.GetLimits()
	row(w, "requests per minute", limit(l.GetRpm(), false))
	row(w, "window (minutes)", l.GetWindowMinutes())
	row(w, "tokens per minute", limit(l.GetTpm(), false))
	row(w, "concurrency", limit(l.GetConcurrency(), false))
	row(w, "daily (USD)", limit(l.GetDailyNanoUsd(), true))
	row(w, "monthly (USD)", limit(l.GetMonthlyNanoUsd(), true))
	row(w, "total (USD)", limit(l.GetTotalNanoUsd(), true))
}
