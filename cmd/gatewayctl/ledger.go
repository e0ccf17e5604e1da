package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// pageFlags select a page of a listing, or all of it.
type pageFlags struct {
	size  int32
	token string
	all   bool
}

func (p *pageFlags) add(f *pflag.FlagSet) {
	f.Int32Var(&p.size, "limit", 100, "entries per page (at most 1000)")
	f.StringVar(&p.token, "page-token", "", "continue after a previous page")
	f.BoolVar(&p.all, "all", false, "read every page")
}

// read fetches the page the flags select, or every page from there with
// --all, and returns the entries with the token of the page after them.
func read[E any](p pageFlags, fetch func(size int32, token string) ([]E, string, error)) ([]E, string, error) {
	var all []E
	token := p.token
	for {
		entries, next, err := fetch(p.size, token)
		if err != nil {
			return nil, "", err
		}
		all, token = append(all, entries...), next
		if !p.all || token == "" {
			return all, token, nil
		}
	}
}

// more tells people how to read the next page.
func (a *app) more(next, command string) {
	if next != "" && !a.json {
		fmt.Fprintf(a.stderr, "more: %s --page-token %s\n", command, next)
	}
}

func (a *app) ledgerCmd() *cobra.Command {
	var p pageFlags
	cmd := &cobra.Command{Use: "ledger ACCOUNT_ID", Short: "List an account's settled requests, oldest first", Args: cobra.ExactArgs(1)}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		entries, next, err := read(p, func(size int32, token string) ([]*adminv1.LedgerEntry, string, error) {
			r, err := a.client.ListLedger(ctx, &adminv1.ListLedgerRequest{AccountId: args[0], PageSize: size, PageToken: token})
			return r.GetEntries(), r.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		resp := &adminv1.ListLedgerResponse{Entries: entries, NextPageToken: next}
		err = a.show(resp, func(w io.Writer) {
			row(w, "ID", "TIME", "KEY", "MODEL", "STATUS", "INPUT", "OUTPUT", "CACHE_WRITE", "CACHE_READ", "COST_USD", "ENDPOINT", "VENDOR_KEY", "TRANSPORT", "OTHER_USAGE")
			for _, e := range resp.Entries {
				cost := formatUSD(e.CostNanoUsd)
				if e.Estimated {
					cost += " (est.)"
				}
				row(w, e.Id, when(e.EndTime), e.KeyId, e.Model, e.Status, e.InputTokens, e.OutputTokens,
					e.CacheWriteTokens, e.CacheReadTokens, cost, orDash(e.Endpoint), orDash(e.VendorKey), orDash(e.Transport), otherUsage(e.Usage))
			}
		})
		a.more(resp.NextPageToken, "gatewayctl ledger "+args[0])
		return err
	})
	p.add(cmd.Flags())
	cmd.AddCommand(a.ledgerExportCmd())
	return cmd
}

// shownUsage are the usage kinds the ledger table has columns for.
var shownUsage = []string{"input", "output", "cache_write_5m", "cache_write_1h", "cache_read"}

// otherUsage lists an entry's non-zero usage kinds that have no column
// (reasoning, audio, the built-in tool calls, and any kind a newer gateway
// meters), as "name=n" by name, or "-" for none.
func otherUsage(u map[string]int64) string {
	var out []string
	for name, n := range u {
		if n != 0 && !slices.Contains(shownUsage, name) {
			out = append(out, name+"="+strconv.FormatInt(n, 10))
		}
	}
	if len(out) == 0 {
		return "-"
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func (a *app) auditCmd() *cobra.Command {
	var p pageFlags
	cmd := &cobra.Command{Use: "audit", Short: "List the audit trail of admin actions, oldest first", Args: cobra.NoArgs}
	cmd.RunE = a.run(func(ctx context.Context, _ []string) error {
		entries, next, err := read(p, func(size int32, token string) ([]*adminv1.AuditEntry, string, error) {
			r, err := a.client.ListAudit(ctx, &adminv1.ListAuditRequest{PageSize: size, PageToken: token})
			return r.GetEntries(), r.GetNextPageToken(), err
		})
		if err != nil {
			return err
		}
		resp := &adminv1.ListAuditResponse{Entries: entries, NextPageToken: next}
		err = a.show(resp, func(w io.Writer) {
			row(w, "TIME", "ACTOR", "ORIGIN", "ACTION", "ACCOUNT", "KEY", "OUTCOME", "DETAIL", "CHANGE")
			for _, e := range resp.Entries {
				row(w, when(e.Time), e.Actor, orDash(e.Origin), e.Action, orDash(e.AccountId), orDash(e.KeyId),
					outcome(e.Outcome), orDash(e.Detail), stateDiff(e.Before, e.After))
			}
		})
		a.more(resp.NextPageToken, "gatewayctl audit")
		return err
	})
	p.add(cmd.Flags())
	return cmd
}

// outcome names an audit entry's outcome: "done" for a change that
// happened (the entry's empty outcome), as the operator console says.
func outcome(o string) string {
	if o == "" {
		return "done"
	}
	return o
}

// stateDiff is an audit entry's before and after states in a line: each
// field (by its dotted path) that differs as "path: old->new", "-" for a
// side without it; "-" when nothing differs or neither side exists. A
// state that is not a JSON object is shown whole.
func stateDiff(before, after string) string {
	b, okB := flatState(before)
	a, okA := flatState(after)
	if !okB || !okA {
		return orDash(before) + "->" + orDash(after)
	}
	var out []string
	paths := maps.Clone(b)
	maps.Copy(paths, a)
	for _, path := range slices.Sorted(maps.Keys(paths)) {
		old, hadOld := b[path]
		cur, hasNew := a[path]
		if hadOld && hasNew && old == cur {
			continue
		}
		if !hadOld {
			old = "-"
		}
		if !hasNew {
			cur = "-"
		}
		out = append(out, path+": "+old+"->"+cur)
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// flatState is a JSON object's leaves by dotted path, each value as compact
// JSON; "" is the empty state. ok is false for text that is no JSON object.
func flatState(s string) (map[string]string, bool) {
	out := map[string]string{}
	if s == "" {
		return out, true
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, false
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok && len(m) > 0 {
			for k, c := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, c)
			}
			return
		}
		j, _ := json.Marshal(v)
		out[prefix] = string(j)
	}
	walk("", v)
	return out, true
}
