package console

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// The reconciliation page shows a table per vendor key, models summed per
// window, and an inline plot; nothing it needs is fetched from elsewhere.
func TestOperatorReconciliation(t *testing.T) {
	f := setupOperator(t)
	a, _ := NewTokenAuthenticator(adminToken)
	h := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	var asked vendorusage.Width
	f.op = NewOperator(OperatorOptions{Admin: admin.New(f.st, admin.Options{Now: f.clk.Now}), Store: f.st, Auth: a, SessionOptions: SessionOptions{Sessions: f.st}, Now: f.clk.Now,
		Reconciliations: func(_ context.Context, width vendorusage.Width, from, to time.Time) ([]reconcile.Window, error) {
			asked = width
			return []reconcile.Window{
				{Start: h, Report: reconcile.Report{Rows: []reconcile.Row{
					{Upstream: "alpha", VendorKey: "k1", VendorKeyID: "key_1", Model: "m", Vendor: usage.Usage{Input: 10}, Ledger: usage.Usage{Input: 10}, Entries: 2},
					{Upstream: "alpha", VendorKey: "k1", VendorKeyID: "key_1", Model: "n", Vendor: usage.Usage{Input: 5}, Entries: 1, Abandoned: 1,
						Explained: map[string]reconcile.Difference{reconcile.AbandonedAttempts: {Usage: usage.Usage{Input: 5}, Cost: 50}}},
					{Upstream: "alpha", VendorKey: "k1", VendorKeyID: "key_1", Model: "o", Vendor: usage.Usage{Input: 2}, Entries: 1, Abandoned: 1,
						Explained: map[string]reconcile.Difference{reconcile.AbandonedAttempts: {Usage: usage.Usage{Input: 2}, Cost: 20}}},
				}}},
				{Start: h.Add(time.Hour), Report: reconcile.Report{Rows: []reconcile.Row{
					{Upstream: "alpha", VendorKey: "k1", VendorKeyID: "key_1", Model: "m", Vendor: usage.Usage{Input: 1007}, Ledger: usage.Usage{Input: 7},
						Unexplained: reconcile.Difference{Usage: usage.Usage{Input: 1000}, Cost: 3_000_000}},
					{Upstream: "beta", VendorKeyID: "key_x", Model: "m", Vendor: usage.Usage{Output: 3}, Unexplained: reconcile.Difference{Usage: usage.Usage{Output: 3}, Cost: 9}},
				}}},
			}, nil
		}})
	cookie, _ := f.signIn(t)
	rec := f.do(t, "GET", "/reconcile?width=1m&hours=2", cookie, nil, nil)
	body := rec.Body.String()
	if rec.Code != 200 || asked != vendorusage.Minute {
		t.Fatalf("%d (width %q): %s", rec.Code, asked, body)
	}
	for _, want := range []string{
		"alpha · k1", "(a key the configuration does not name)", "key_x",
		// The first window's three models in one row, a class summed
		// over its models.
		"<td>abandoned_attempts: 7 tokens, $0.00000007</td>",
		`<td class="num">17</td>`, `<td class="num">1000</td>`, "0.003",
		"<polyline", "<svg role=\"img\"",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, "http://") || strings.Contains(body, "https://") || strings.Contains(body, "<script") {
		t.Error("the page names an external asset or a script")
	}
	if rec := f.do(t, "GET", "/reconcile?hours=0", cookie, nil, nil); rec.Code != 400 {
		t.Errorf("hours=0: %d", rec.Code)
	}
}
