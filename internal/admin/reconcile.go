package admin

import (
	"context"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// maxReconcileWindow bounds one call: a window the vendors page through
// within a call's time.
const maxReconcileWindow = 31 * 24 * time.Hour

// Reconcile reconciles a window with the vendors' usage reports.
func (s *Service) Reconcile(ctx context.Context, req *adminv1.ReconcileRequest) (*adminv1.ReconcileResponse, error) {
	if s.opts.Reconciler == nil {
		return nil, status.Error(codes.FailedPrecondition, "reconcile: no upstream has an admin key (upstreams[].admin_credential_env)")
	}
	if req.GetFrom() == nil || req.GetTo() == nil {
		return nil, invalid("reconcile: from and to are required")
	}
	from, to := req.GetFrom().AsTime(), req.GetTo().AsTime()
	if !to.After(from) || to.Sub(from) > maxReconcileWindow {
		return nil, invalid("reconcile: to must be after from, by at most %s", maxReconcileWindow)
	}
	width := vendorusage.Width(req.GetBucketWidth())
	switch width {
	case "":
		width = vendorusage.Hour
	case vendorusage.Minute, vendorusage.Hour, vendorusage.Day:
	default:
		return nil, invalid("reconcile: bucket_width must be 1m, 1h or 1d")
	}
	rep, err := s.opts.Reconciler.Run(ctx, from, to, width)
	if err != nil {
		// The vendor's answer or the store's failure, never a secret: the
		// admin key stays in Envoy.
		s.opts.Logger.Error("admin: reconcile failed", "err", err)
		return nil, status.Errorf(codes.Unavailable, "reconcile: %v", err)
	}
	out := &adminv1.ReconcileResponse{}
	for _, r := range rep.Rows {
		pr := &adminv1.ReconcileRow{
			Upstream: r.Upstream, StartTime: timestamp(r.Start),
			VendorKeyId: r.VendorKeyID, VendorKey: r.VendorKey, Model: r.Model,
			Vendor: usageMap(r.Vendor), Ledger: usageMap(r.Ledger), Unexplained: usageMap(r.Unexplained.Usage),
			Entries: int32(r.Entries), Estimated: int32(r.Estimated), Abandoned: int32(r.Abandoned),
			LedgerCostNanoUsd: r.LedgerCost, VendorCostNanoUsd: r.VendorCost, UnexplainedCostNanoUsd: r.Unexplained.Cost,
		}
		for _, class := range slices.Sorted(maps.Keys(r.Explained)) {
			d := r.Explained[class]
			pr.Explained = append(pr.Explained, &adminv1.ReconcileDifference{Class: class, Usage: usageMap(d.Usage), CostNanoUsd: d.Cost})
		}
		out.Rows = append(out.Rows, pr)
	}
	for _, c := range rep.Costs {
		out.Costs = append(out.Costs, &adminv1.ReconcileCost{
			Upstream: c.Upstream, StartTime: timestamp(c.Start),
			BilledNanoUsd: c.Billed, PricedNanoUsd: c.Priced, UnexplainedNanoUsd: c.Unexplained,
		})
	}
	return out, nil
}

// usageMap is u by kind name, zeros left out.
func usageMap(u usage.Usage) map[string]int64 {
	m := map[string]int64{}
	for _, k := range usage.Kinds {
		if v := k.Of(u); v != 0 {
			m[k.Name] = v
		}
	}
	return m
}
