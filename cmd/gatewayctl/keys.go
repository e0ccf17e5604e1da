package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// expiry parses --expires: a duration from now ("720h") or a time
// (RFC 3339). Both unset give nil values.
func expiry(s string) (*timestamppb.Timestamp, *durationpb.Duration, error) {
	if s == "" {
		return nil, nil, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return nil, durationpb.New(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, nil, fmt.Errorf("--expires %q: want a duration like 720h or a time like 2027-01-31T00:00:00Z", s)
	}
	return timestamppb.New(t), nil, nil
}

// secretNote reminds people that a secret is shown once. It goes to stderr so
// that stdout holds only what a script may capture.
func (a *app) secretNote() {
	if !a.json {
		fmt.Fprintln(a.stderr, "The secret is shown once and cannot be recovered; store it now.")
	}
}

func (a *app) keysCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "keys", Short: "Create, list, revoke and rotate model keys (cr_…)"}
	cmd.AddCommand(a.keysCreateCmd(), a.keysListCmd(), a.keysRevokeCmd(), a.keysRotateCmd(), a.keysLimitsCmd(), a.keysMoveCmd())
	return cmd
}

func (a *app) keysCreateCmd() *cobra.Command {
	var (
		label, expires, project string
		models                  []string
	)
	cmd := &cobra.Command{
		Use:   "create ACCOUNT_ID [--label L] [--expires 720h|TIME] [--models a,b] [--project PROJECT_ID]",
		Short: "Make a model key; prints its secret once",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		at, ttl, err := expiry(expires)
		if err != nil {
			return err
		}
		req := &adminv1.CreateKeyRequest{AccountId: args[0], Label: label, Models: models, ProjectId: project}
		switch {
		case at != nil:
			req.Expiry = &adminv1.CreateKeyRequest_ExpireTime{ExpireTime: at}
		case ttl != nil:
			req.Expiry = &adminv1.CreateKeyRequest_Ttl{Ttl: ttl}
		}
		r, err := a.client.CreateKey(ctx, req)
		if err != nil {
			return err
		}
		a.secretNote()
		return a.show(r, func(w io.Writer) {
			row(w, "secret", r.Secret)
			keyDetail(w, r.Key)
		})
	})
	f := cmd.Flags()
	f.StringVar(&label, "label", "", "label, to tell keys apart")
	f.StringVar(&expires, "expires", "", "expiry: a duration from now (720h) or an RFC 3339 time; default never")
	f.StringSliceVar(&models, "models", nil, "models the key may call (comma-separated); default all")
	f.StringVar(&project, "project", "", "the project the key belongs to; default the account's default project")
	return cmd
}

func (a *app) keysListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list ACCOUNT_ID", Short: "List an account's keys and tokens (never their secrets)", Args: cobra.ExactArgs(1)}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		r, err := a.client.ListKeys(ctx, &adminv1.ListKeysRequest{AccountId: args[0]})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) {
			row(w, "ID", "KIND", "LABEL", "PREFIX", "STATE", "CREATED", "LAST_USED", "EXPIRES", "MODELS", "PROJECT")
			for _, k := range r.Keys {
				m := "-" // read-only tokens call no model
				if k.Kind == adminv1.KeyKind_KEY_KIND_MODEL {
					m = models(k.Models)
				}
				row(w, k.Id, kindName(k.Kind), orDash(k.Label), k.Prefix, stateName(k.State),
					when(k.CreateTime), when(k.LastUsedTime), when(k.ExpireTime), m, orDash(k.ProjectId))
			}
		})
	})
	return cmd
}

func (a *app) keysRevokeCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "revoke ACCOUNT_ID KEY_ID", Short: "Revoke a model key at once", Args: cobra.ExactArgs(2)}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		r, err := a.client.RevokeKey(ctx, &adminv1.RevokeKeyRequest{AccountId: args[0], KeyId: args[1]})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { fmt.Fprintf(w, "revoked %s at %s\n", r.Key.Id, when(r.Key.RevokeTime)) })
	})
	return cmd
}

func (a *app) keysRotateCmd() *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "rotate ACCOUNT_ID KEY_ID [--grace 24h]",
		Short: "Replace a model key; the old one keeps working for the grace period",
		Args:  cobra.ExactArgs(2),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		r, err := a.client.RotateKey(ctx, &adminv1.RotateKeyRequest{AccountId: args[0], KeyId: args[1], Grace: durationpb.New(grace)})
		if err != nil {
			return err
		}
		a.secretNote()
		return a.show(r, func(w io.Writer) {
			row(w, "secret", r.Secret)
			keyDetail(w, r.Key)
			row(w, "old key", fmt.Sprintf("%s works until %s", r.OldKey.Id, when(r.OldKey.ExpireTime)))
		})
	})
	cmd.Flags().DurationVar(&grace, "grace", 24*time.Hour, "how long the old key keeps working")
	return cmd
}

func (a *app) tokensCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Create and revoke read-only tokens (ro_…) for GET /v1/usage"}
	var label, expires string
	create := &cobra.Command{
		Use:   "create ACCOUNT_ID [--label L] [--expires 720h|TIME]",
		Short: "Make a read-only token; prints its secret once",
		Args:  cobra.ExactArgs(1),
	}
	create.RunE = a.run(func(ctx context.Context, args []string) error {
		at, ttl, err := expiry(expires)
		if err != nil {
			return err
		}
		req := &adminv1.CreateReadOnlyTokenRequest{AccountId: args[0], Label: label}
		switch {
		case at != nil:
			req.Expiry = &adminv1.CreateReadOnlyTokenRequest_ExpireTime{ExpireTime: at}
		case ttl != nil:
			req.Expiry = &adminv1.CreateReadOnlyTokenRequest_Ttl{Ttl: ttl}
		}
		r, err := a.client.CreateReadOnlyToken(ctx, req)
		if err != nil {
			return err
		}
		a.secretNote()
		return a.show(r, func(w io.Writer) {
			row(w, "secret", r.Secret)
			keyDetail(w, r.Token)
		})
	})
	create.Flags().StringVar(&label, "label", "", "label, to tell tokens apart")
	create.Flags().StringVar(&expires, "expires", "", "expiry: a duration from now (720h) or an RFC 3339 time; default never")

	revoke := &cobra.Command{Use: "revoke ACCOUNT_ID TOKEN_ID", Short: "Revoke a read-only token at once", Args: cobra.ExactArgs(2)}
	revoke.RunE = a.run(func(ctx context.Context, args []string) error {
		r, err := a.client.RevokeReadOnlyToken(ctx, &adminv1.RevokeReadOnlyTokenRequest{AccountId: args[0], TokenId: args[1]})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { fmt.Fprintf(w, "revoked %s at %s\n", r.Token.Id, when(r.Token.RevokeTime)) })
	})
	cmd.AddCommand(create, revoke)
	return cmd
}

// keyDetail writes a credential as name/value lines.
func keyDetail(w io.Writer, k *adminv1.Key) {
	row(w, "id", k.GetId())
	row(w, "account", k.GetAccountId())
	row(w, "kind", kindName(k.GetKind()))
	row(w, "label", orDash(k.GetLabel()))
	row(w, "state", stateName(k.GetState()))
	row(w, "created", when(k.GetCreateTime()))
	row(w, "expires", when(k.GetExpireTime()))
	if k.GetKind() == adminv1.KeyKind_KEY_KIND_MODEL {
		row(w, "models", models(k.GetModels()))
		row(w, "project", k.GetProjectId())
	}
}

func kindName(k adminv1.KeyKind) string {
	switch k {
	case adminv1.KeyKind_KEY_KIND_MODEL:
		return "key"
	case adminv1.KeyKind_KEY_KIND_READ_ONLY:
		return "read-only"
	}
	return "?"
}

func stateName(s adminv1.KeyState) string {
	switch s {
	case adminv1.KeyState_KEY_STATE_ACTIVE:
		return "active"
	case adminv1.KeyState_KEY_STATE_EXPIRED:
		return "expired"
	case adminv1.KeyState_KEY_STATE_REVOKED:
		return "revoked"
	}
	return "?"
}

func models(m []string) string {
	if len(m) == 0 {
		return "all"
	}
	return strings.Join(m, ",")
}
