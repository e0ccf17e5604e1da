package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// limitFlags are the limit flags shared by `accounts create` and
// `limits set`. A limit not given keeps its value (the gateway's default for
// a new account); zero means no limit.
type limitFlags struct {
	dailyUSD  string
	dailyNano int64
	rpm       int64
	window    int64
}

func (l *limitFlags) add(f *pflag.FlagSet) {
	f.StringVar(&l.dailyUSD, "daily-usd", "", "daily spending limit, USD (0: none)")
	f.Int64Var(&l.dailyNano, "daily-nano", 0, "daily spending limit, nano-USD (0: none)")
	f.Int64Var(&l.rpm, "rpm", 0, "requests per minute (0: none)")
	f.Int64Var(&l.window, "window-minutes", 0, "sliding window of the rate limit, minutes")
}

// values returns the limits given on the command line; nil for those not
// given.
func (l *limitFlags) values(f *pflag.FlagSet) (daily, rpm, window *int64, err error) {
	d, ok, err := usdOrNano(l.dailyUSD, f.Changed("daily-usd"), l.dailyNano, f.Changed("daily-nano"))
	if err != nil {
		return nil, nil, nil, err
	}
	if ok {
		daily = &d
	}
	if f.Changed("rpm") {
		rpm = &l.rpm
	}
	if f.Changed("window-minutes") {
		window = &l.window
	}
	return daily, rpm, window, nil
}

func (a *app) accountsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "accounts", Short: "Create, list, show, suspend and resume accounts"}
	cmd.AddCommand(a.accountsCreateCmd(), a.accountsListCmd(), a.accountsGetCmd(),
		a.accountsSuspendCmd(true), a.accountsSuspendCmd(false), a.accountsLimitsCmd(), a.accountsAlertCmd())
	return cmd
}

// accountsSuspendCmd is `accounts suspend` (suspend true) or `accounts resume`.
func (a *app) accountsSuspendCmd(suspend bool) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "resume ACCOUNT_ID [--reason TEXT]",
		Short: "End a suspension: the account's keys work again",
		Args:  cobra.ExactArgs(1),
	}
	if suspend {
		cmd.Use = "suspend ACCOUNT_ID [--reason TEXT]"
		cmd.Short = "Stop the account's model requests (403); keys are kept and usage stays readable"
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		var acct *adminv1.Account
		var r proto.Message
		if suspend {
			resp, err := a.client.SuspendAccount(ctx, &adminv1.SuspendAccountRequest{AccountId: args[0], Reason: reason})
			if err != nil {
				return err
			}
			acct, r = resp.Account, resp
		} else {
			resp, err := a.client.ResumeAccount(ctx, &adminv1.ResumeAccountRequest{AccountId: args[0], Reason: reason})
			if err != nil {
				return err
			}
			acct, r = resp.Account, resp
		}
		return a.show(r, func(w io.Writer) { accountDetail(w, acct) })
	})
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the audit trail")
	return cmd
}

func (a *app) accountsCreateCmd() *cobra.Command {
	var (
		name       string
		balanceUSD string
		balance    int64
		limits     limitFlags
	)
	cmd := &cobra.Command{
		Use:   "create --name NAME [--balance-usd USD] [limits]",
		Short: "Open an account; limits not given take the gateway's defaults",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = a.run(func(ctx context.Context, _ []string) error {
		f := cmd.Flags()
		req := &adminv1.CreateAccountRequest{Name: name}
		b, _, err := usdOrNano(balanceUSD, f.Changed("balance-usd"), balance, f.Changed("balance-nano"))
		if err != nil {
			return err
		}
		req.BalanceNanoUsd = b
		if req.DailyNanoUsd, req.Rpm, req.WindowMinutes, err = limits.values(f); err != nil {
			return err
		}
		r, err := a.client.CreateAccount(ctx, req)
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { accountDetail(w, r.Account) })
	})
	f := cmd.Flags()
	f.StringVar(&name, "name", "", "account name (required)")
	f.StringVar(&balanceUSD, "balance-usd", "", "opening balance, USD")
	f.Int64Var(&balance, "balance-nano", 0, "opening balance, nano-USD")
	limits.add(f)
	cmd.MarkFlagRequired("name")
	return cmd
}

func (a *app) accountsListCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "list", Short: "List every account", Args: cobra.NoArgs}
	cmd.RunE = a.run(func(ctx context.Context, _ []string) error {
		r, err := a.client.ListAccounts(ctx, &adminv1.ListAccountsRequest{})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) {
			row(w, "ID", "NAME", "BALANCE_USD", "DAILY_USD", "RPM", "WINDOW_MIN", "CREATED", "SUSPENDED")
			for _, acct := range r.Accounts {
				l := acct.Limits
				row(w, acct.Id, acct.Name, formatUSD(acct.BalanceNanoUsd), limit(l.GetDailyNanoUsd(), true),
					limit(l.GetRpm(), false), l.GetWindowMinutes(), when(acct.CreateTime), acct.GetSuspended())
			}
		})
	})
	return cmd
}

func (a *app) accountsGetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "get ACCOUNT_ID", Short: "Show an account with its balance and today's spend", Args: cobra.ExactArgs(1)}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		r, err := a.client.GetAccount(ctx, &adminv1.GetAccountRequest{AccountId: args[0]})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) {
			accountDetail(w, r.Account)
			row(w, "spent today (USD)", formatUSD(r.DailyUsedNanoUsd))
			row(w, "open requests", r.OpenHolds)
			row(w, "held (USD)", formatUSD(r.HeldNanoUsd))
		})
	})
	return cmd
}

// accountDetail writes an account as name/value lines.
func accountDetail(w io.Writer, acct *adminv1.Account) {
	l := acct.GetLimits()
	row(w, "id", acct.GetId())
	row(w, "name", acct.GetName())
	row(w, "created", when(acct.GetCreateTime()))
	row(w, "balance (USD)", formatUSD(acct.GetBalanceNanoUsd()))
	row(w, "daily limit (USD)", limit(l.GetDailyNanoUsd(), true))
	row(w, "requests per minute", limit(l.GetRpm(), false))
	row(w, "window (minutes)", l.GetWindowMinutes())
	row(w, "tokens per minute", limit(l.GetTpm(), false))
	row(w, "concurrency", limit(l.GetConcurrency(), false))
	row(w, "monthly limit (USD)", limit(l.GetMonthlyNanoUsd(), true))
	row(w, "balance alert below (USD)", limit(acct.GetBalanceAlertNanoUsd(), true))
	row(w, "suspended", acct.GetSuspended())
}

func (a *app) topUpCmd() *cobra.Command {
	var (
		usd  string
		nano int64
		key  string
	)
	cmd := &cobra.Command{
		Use:   "topup ACCOUNT_ID (--usd USD | --nano N) --idempotency-key KEY",
		Short: "Credit an account; a repeated idempotency key is applied once",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		f := cmd.Flags()
		amount, ok, err := usdOrNano(usd, f.Changed("usd"), nano, f.Changed("nano"))
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("give the amount with --usd or --nano")
		}
		r, err := a.client.TopUp(ctx, &adminv1.TopUpRequest{AccountId: args[0], AmountNanoUsd: amount, IdempotencyKey: key})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) {
			if r.Applied {
				fmt.Fprintf(w, "credited %s USD; balance %s USD\n", formatUSD(amount), formatUSD(r.BalanceNanoUsd))
			} else {
				fmt.Fprintf(w, "not applied: idempotency key %q was used before; balance %s USD\n", key, formatUSD(r.BalanceNanoUsd))
			}
		})
	})
	f := cmd.Flags()
	f.StringVar(&usd, "usd", "", "amount, USD")
	f.Int64Var(&nano, "nano", 0, "amount, nano-USD")
	f.StringVar(&key, "idempotency-key", "", "unique key of this top-up, e.g. the invoice number (required)")
	cmd.MarkFlagRequired("idempotency-key")
	return cmd
}

func (a *app) limitsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "limits", Short: "Change an account's limits"}
	var limits limitFlags
	set := &cobra.Command{
		Use:   "set ACCOUNT_ID [--daily-usd USD] [--rpm N] [--window-minutes N]",
		Short: "Set the limits given; the others keep their value",
		Args:  cobra.ExactArgs(1),
	}
	set.RunE = a.run(func(ctx context.Context, args []string) error {
		req := &adminv1.SetLimitsRequest{AccountId: args[0]}
		var err error
		if req.DailyNanoUsd, req.Rpm, req.WindowMinutes, err = limits.values(set.Flags()); err != nil {
			return err
		}
		if req.DailyNanoUsd == nil && req.Rpm == nil && req.WindowMinutes == nil {
			return errors.New("no limit given: use --daily-usd, --daily-nano, --rpm or --window-minutes")
		}
		r, err := a.client.SetLimits(ctx, req)
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { accountDetail(w, r.Account) })
	})
	limits.add(set.Flags())
	cmd.AddCommand(set)
	return cmd
}
