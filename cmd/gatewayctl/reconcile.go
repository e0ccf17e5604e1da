package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

func (a *app) reconcileCmd() *cobra.Command {
	var from, to, width string
	cmd := &cobra.Command{
		Use:   "reconcile --from TIME --to TIME",
		Short: "Set the vendors' usage reports against the ledger, per vendor key, model and bucket",
		Args:  cobra.NoArgs,
	}
	cmd.RunE = a.run(func(ctx context.Context, args []string) error {
		f, err := reconcileTime("--from", from)
		if err != nil {
			return err
		}
		t, err := reconcileTime("--to", to)
		if err != nil {
			return err
		}
		resp, err := a.client.Reconcile(ctx, &adminv1.ReconcileRequest{From: f, To: t, BucketWidth: width})
		if err != nil {
			return err
		}
		return a.show(resp, func(w io.Writer) {
			row(w, "UPSTREAM", "BUCKET", "KEY", "VENDOR_KEY_ID", "MODEL", "ENTRIES", "VENDOR", "LEDGER", "VENDOR_USD", "LEDGER_USD", "EXPLAINED", "UNEXPLAINED", "UNEXPLAINED_USD")
			for _, r := range resp.Rows {
				var explained []string
				for _, d := range r.Explained {
					explained = append(explained, d.Class+":"+kinds(d.Usage)+":$"+formatUSD(d.CostNanoUsd))
				}
				row(w, r.Upstream, when(r.StartTime), orDash(r.VendorKey), r.VendorKeyId, r.Model, r.Entries,
					kinds(r.Vendor), kinds(r.Ledger), formatUSD(r.VendorCostNanoUsd), formatUSD(r.LedgerCostNanoUsd),
					orDash(strings.Join(explained, " ")), kinds(r.Unexplained), formatUSD(r.UnexplainedCostNanoUsd))
			}
			if len(resp.Costs) > 0 {
				fmt.Fprintln(w)
				row(w, "UPSTREAM", "DAY", "BILLED_USD", "PRICED_USD", "UNEXPLAINED_USD")
				for _, c := range resp.Costs {
					row(w, c.Upstream, when(c.StartTime), formatUSD(c.BilledNanoUsd), formatUSD(c.PricedNanoUsd), formatUSD(c.UnexplainedNanoUsd))
				}
			}
		})
	})
	cmd.Flags().StringVar(&from, "from", "", "start of the window: a time (RFC 3339) or a duration ago (\"24h\")")
	cmd.Flags().StringVar(&to, "to", "0s", "end of the window, as --from; default now")
	cmd.Flags().StringVar(&width, "bucket-width", "1h", "1m, 1h or 1d")
	cmd.MarkFlagRequired("from")
	return cmd
}

// reconcileTime parses a window bound: RFC 3339, or a duration before now.
func reconcileTime(flag, s string) (*timestamppb.Timestamp, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return timestamppb.New(time.Now().Add(-d)), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, fmt.Errorf("%s %q: want a time like 2027-01-31T00:00:00Z or a duration ago like 24h", flag, s)
	}
	return timestamppb.New(t), nil
}

// kinds shows usage by kind, "0" for none.
func kinds(u map[string]int64) string {
	var out []string
	for name, n := range u {
		if n != 0 {
			out = append(out, name+"="+strconv.FormatInt(n, 10))
		}
	}
	if len(out) == 0 {
		return "0"
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}
