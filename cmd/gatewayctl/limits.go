package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// levelLimitFlags are the flags of `accounts limits` and `keys limits`: each
// one given changes that limit, 0 removes it, the others stay.
type levelLimitFlags struct {
	rpm, window, tpm, concurrency int64
	concurrencyWait               int64
	daily, monthly, total         string
	key                           bool // the lifetime cap and the concurrency wait are a key's only
	project                       bool // a project has a lifetime cap, not a concurrency wait
}

func (l *levelLimitFlags) add(f *pflag.FlagSet) {
	f.Int64Var(&l.rpm, "rpm", 0, "requests per minute (0: none)")
	f.Int64Var(&l.window, "window-minutes", 0, "sliding window of the request rate, minutes")
	f.Int64Var(&l.tpm, "tpm", 0, "tokens (input + output) in any 60 s (0: none)")
	f.Int64Var(&l.concurrency, "concurrency", 0, "requests in flight (0: none)")
	f.StringVar(&l.daily, "daily-usd", "", "spend per UTC day, USD (0: none)")
	f.StringVar(&l.monthly, "monthly-usd", "", "spend per UTC calendar month, USD (0: none)")
	if l.key || l.project {
		f.StringVar(&l.total, "total-usd", "", "lifetime spend, USD; never resets (0: none)")
	}
	if l.key {
		f.Int64Var(&l.concurrencyWait, "concurrency-wait", 0, "seconds a request over a concurrency limit may wait for a slot before 429 (0: 429 at once; at most 60)")
	}
}

// changes returns the limits given on the command line, nil for the others,
// and whether any was given.
func (l *levelLimitFlags) changes(f *pflag.FlagSet) (c limitChanges, any bool, err error) {
	ints := []struct {
		name string
		v    *int64
		dst  **int64
	}{
		{"rpm", &l.rpm, &c.rpm}, {"window-minutes", &l.window, &c.window},
		{"tpm", &l.tpm, &c.tpm}, {"concurrency", &l.concurrency, &c.concurrency},
		{"concurrency-wait", &l.concurrencyWait, &c.concurrencyWait},
	}
	for _, i := range ints {
		if f.Changed(i.name) {
			if *i.v < 0 {
				return c, false, fmt.Errorf("--%s must not be negative", i.name)
			}
			*i.dst, any = i.v, true
		}
	}
	usds := []struct {
		name string
		v    string
		dst  **int64
	}{{"daily-usd", l.daily, &c.daily}, {"monthly-usd", l.monthly, &c.monthly}, {"total-usd", l.total, &c.total}}
	for _, u := range usds {
		if !f.Changed(u.name) {
			continue
		}
		n, err := parseUSD(u.v)
		if err != nil {
			return c, false, fmt.Errorf("--%s: %w", u.name, err)
		}
		*u.dst, any = &n, true
	}
	return c, any, nil
}

// limitChanges are limits to set; nil keeps one as it is.
type limitChanges struct {
	rpm, window, tpm, concurrency, daily, monthly, total *int64
	concurrencyWait                                      *int64
}

// accountsLimitsCmd is `accounts limits ACCOUNT_ID [flags]`.
func (a *app) accountsLimitsCmd() *cobra.Command {
	var flags levelLimitFlags
	cmd := &cobra.Command{
		Use:   "limits ACCOUNT_ID [--rpm N --window-minutes N --tpm N --concurrency N --daily-usd X --monthly-usd X]",
		Short: "Show an account's limits and what is used of each; with flags, change the limits given (0 removes one)",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		c, changed, err := flags.changes(cmd.Flags())
		if err != nil {
			return err
		}
		if changed {
			_, err := a.client.SetLimits(ctx, &adminv1.SetLimitsRequest{AccountId: args[0],
				Rpm: c.rpm, WindowMinutes: c.window, Tpm: c.tpm, Concurrency: c.concurrency,
				DailyNanoUsd: c.daily, MonthlyNanoUsd: c.monthly})
			if err != nil {
				return err
			}
		}
		r, err := a.client.GetAccount(ctx, &adminv1.GetAccountRequest{AccountId: args[0]})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) {
			l := r.GetAccount().GetLimits()
			row(w, "LIMIT", "VALUE", "USED")
			limitRows(w, l, usedOf{
				inFlight: r.GetOpenHolds(), held: r.GetHeldNanoUsd(), minuteTokens: r.GetMinuteTokens(),
				daily: r.GetDailyUsedNanoUsd(), monthly: r.GetMonthlyUsedNanoUsd(),
			}, false)
			row(w, "balance (USD)", formatUSD(r.GetAccount().GetBalanceNanoUsd()), "-")
		})
	})
	flags.add(cmd.Flags())
	return cmd
}

// keysLimitsCmd is `keys limits ACCOUNT_ID KEY_ID [flags]`.
func (a *app) keysLimitsCmd() *cobra.Command {
	flags := levelLimitFlags{key: true}
	cmd := &cobra.Command{
		Use:   "limits ACCOUNT_ID KEY_ID [--rpm N --window-minutes N --tpm N --concurrency N --concurrency-wait SECONDS --daily-usd X --monthly-usd X --total-usd X]",
		Short: "Show a key's own limits and what it has used of each; with flags, change the limits given (0 removes one) without rotating the key",
		Args:  cobra.ExactArgs(2),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		c, changed, err := flags.changes(cmd.Flags())
		if err != nil {
			return err
		}
		var key *adminv1.Key
		var usage *adminv1.KeyUsage
		if changed {
			r, err := a.client.SetKeyLimits(ctx, &adminv1.SetKeyLimitsRequest{AccountId: args[0], KeyId: args[1],
				Rpm: c.rpm, WindowMinutes: c.window, Tpm: c.tpm, Concurrency: c.concurrency,
				DailyNanoUsd: c.daily, MonthlyNanoUsd: c.monthly, TotalNanoUsd: c.total,
				ConcurrencyWaitSeconds: c.concurrencyWait})
			if err != nil {
				return err
			}
			key, usage = r.Key, r.Usage
		} else {
			r, err := a.client.GetKey(ctx, &adminv1.GetKeyRequest{AccountId: args[0], KeyId: args[1]})
			if err != nil {
				return err
			}
			key, usage = r.Key, r.Usage
		}
		return a.show(&adminv1.GetKeyResponse{Key: key, Usage: usage}, func(w io.Writer) {
			row(w, "LIMIT", "VALUE", "USED")
			limitRows(w, key.GetLimits(), usedOf{
				inFlight: usage.GetInFlight(), held: usage.GetHeldNanoUsd(), minuteTokens: usage.GetMinuteTokens(),
				daily: usage.GetDailyUsedNanoUsd(), monthly: usage.GetMonthlyUsedNanoUsd(), total: usage.GetTotalUsedNanoUsd(),
			}, true)
		})
	})
	flags.add(cmd.Flags())
	return cmd
}

// usedOf is what is used of each limit.
type usedOf struct {
	inFlight, held, minuteTokens int64
	daily, monthly, total        int64 // settled spend, nano-USD
}

// limitRows writes one row per limit: its value and what is used of it.
// Spend shows settled spend plus what open requests hold, as admission
// counts it.
func limitRows(w io.Writer, l *adminv1.Limits, u usedOf, key bool) {
	spend := func(settled int64) string {
		if u.held == 0 {
			return formatUSD(settled)
		}
		return formatUSD(settled) + " + " + formatUSD(u.held) + " held"
	}
	row(w, "requests per minute", limit(l.GetRpm(), false), "-")
	row(w, "window (minutes)", l.GetWindowMinutes(), "-")
	row(w, "tokens per minute", limit(l.GetTpm(), false), u.minuteTokens)
	row(w, "concurrency", limit(l.GetConcurrency(), false), u.inFlight)
	if key {
		row(w, "concurrency wait (s)", l.GetConcurrencyWaitSeconds(), "-")
	}
	row(w, "daily (USD)", limit(l.GetDailyNanoUsd(), true), spend(u.daily))
	row(w, "monthly (USD)", limit(l.GetMonthlyNanoUsd(), true), spend(u.monthly))
	if key {
		row(w, "total (USD)", limit(l.GetTotalNanoUsd(), true), spend(u.total))
	}
}

// accountsAlertCmd is `accounts alert ACCOUNT_ID --balance-below-usd X`.
func (a *app) accountsAlertCmd() *cobra.Command {
	var below string
	cmd := &cobra.Command{
		Use:   "alert ACCOUNT_ID --balance-below-usd X",
		Short: "Set the balance below which the balance.low webhook event fires (0: off)",
		Args:  cobra.ExactArgs(1),
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		if !cmd.Flags().Changed("balance-below-usd") {
			return errors.New("give the threshold with --balance-below-usd (0 turns the alert off)")
		}
		n, err := parseUSD(below)
		if err != nil {
			return fmt.Errorf("--balance-below-usd: %w", err)
		}
		r, err := a.client.SetBalanceAlert(ctx, &adminv1.SetBalanceAlertRequest{AccountId: args[0], ThresholdNanoUsd: n})
		if err != nil {
			return err
		}
		return a.show(r, func(w io.Writer) { accountDetail(w, r.Account) })
	})
	cmd.Flags().StringVar(&below, "balance-below-usd", "", "the threshold, USD")
	return cmd
}
