// Command gatewayctl manages the model gateway through its admin API:
// accounts, top-ups, limits, keys, read-only tokens, the ledger and the audit
// trail.
//
//	export GATEWAY_ADMIN_ADDR=127.0.0.1:50052 GATEWAY_ADMIN_TOKEN=...
//	gatewayctl accounts create --name acme --balance-usd 100 --daily-usd 50 --rpm 60
//	gatewayctl keys create acct_... --label ci --expires 720h --models claude-sonnet-4-5
//
// Output is a table for people, or JSON with --json for scripts. Amounts are
// typed in USD (--…-usd, exact to the nano-dollar) or nano-USD (--…-nano).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/internal/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// Environment variables read when the flags are not given.
const (
	addrEnv      = "GATEWAY_ADMIN_ADDR"
	tokenEnv     = "GATEWAY_ADMIN_TOKEN"
	tokenFileEnv = "GATEWAY_ADMIN_TOKEN_FILE"
	actorEnv     = "GATEWAY_ADMIN_ACTOR"
	defaultAddr  = "127.0.0.1:50052"
)

// app holds the global flags and the connection made from them.
type app struct {
	addr, token, actor string
	json               bool
	timeout            time.Duration

	stdout, stderr io.Writer
	conn           *grpc.ClientConn
	client         adminv1.AdminClient
}

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute runs one command line and returns the exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if a.conn != nil {
		a.conn.Close()
	}
	if err != nil {
		fmt.Fprintln(stderr, "gatewayctl:", describe(err))
		return 1
	}
	return 0
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "gatewayctl",
		Short:         "Manage the model gateway through its admin API",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.String(),
	}
	f := root.PersistentFlags()
	f.StringVar(&a.addr, "addr", "", "admin API address (env "+addrEnv+", default "+defaultAddr+")")
	f.StringVar(&a.token, "token", "", "admin token (env "+tokenEnv+", or a file named by "+tokenFileEnv+")")
	f.StringVar(&a.actor, "actor", "", "who acts, for the audit trail (env "+actorEnv+", default admin)")
	f.BoolVar(&a.json, "json", false, "print JSON instead of tables")
	f.DurationVar(&a.timeout, "timeout", 10*time.Second, "deadline of each call")
	root.AddCommand(a.accountsCmd(), a.topUpCmd(), a.limitsCmd(), a.keysCmd(), a.projectsCmd(), a.tokensCmd(), a.ledgerCmd(), a.auditCmd(), a.reconcileCmd())
	return root
}

// call returns a context for one admin call with the token and actor
// attached, connecting on first use.
func (a *app) call(cmd *cobra.Command) (context.Context, context.CancelFunc, error) {
	if a.client == nil {
		if err := a.connect(); err != nil {
			return nil, nil, err
		}
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	md := []string{"authorization", "Bearer " + a.token}
	if a.actor != "" {
		md = append(md, "x-admin-actor", a.actor)
	}
	return metadata.AppendToOutgoingContext(ctx, md...), cancel, nil
}

func (a *app) connect() error {
	a.addr = firstNonEmpty(a.addr, os.Getenv(addrEnv), defaultAddr)
	a.actor = firstNonEmpty(a.actor, os.Getenv(actorEnv))
	if a.token == "" {
		a.token = os.Getenv(tokenEnv)
	}
	if a.token == "" && os.Getenv(tokenFileEnv) != "" {
		b, err := os.ReadFile(os.Getenv(tokenFileEnv))
		if err != nil {
			return fmt.Errorf("admin token: %w", err)
		}
		a.token = strings.TrimSpace(string(b))
	}
	if a.token == "" {
		return fmt.Errorf("no admin token: use --token or set %s", tokenEnv)
	}
	// Plain text: the admin listener is on loopback (or a private network)
	// and never exposed through Envoy.
	conn, err := grpc.NewClient(a.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", a.addr, err)
	}
	a.conn, a.client = conn, adminv1.NewAdminClient(conn)
	return nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// describe turns a gRPC status into a line for people.
func describe(err error) string {
	s, ok := status.FromError(err)
	if !ok {
		return err.Error()
	}
	switch s.Code() {
	case codes.Unauthenticated:
		return s.Message() + " (check --token / " + tokenEnv + ")"
	case codes.Unavailable:
		return "admin API unreachable: " + s.Message()
	}
	return fmt.Sprintf("%s (%s)", s.Message(), s.Code())
}

// run wraps a command body that makes one or more admin calls.
func (a *app) run(body func(ctx context.Context, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx, cancel, err := a.call(cmd)
		if err != nil {
			return err
		}
		defer cancel()
		return body(ctx, args)
	}
}
