package console

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// The operator's reconciliation page: the continuous run's kept windows,
// a table per vendor key and a plot of its unexplained USD over time
// (inline SVG, no script, nothing fetched).

// The page's look back, in hours: by default and at most.
const (
	defaultReconcileHours = 24
	maxReconcileHours     = 24 * 31
)

// reconcileKey is one vendor key's windows on the page.
type reconcileKey struct {
	Upstream, VendorKey, VendorKeyID string
	Windows                          []reconcileCell
	Plot                             plot
}

// reconcileCell is a key's sum over its models in one window.
type reconcileCell struct {
	Start                  time.Time
	Vendor, Ledger         int64 // tokens
	Explained              string
	Unexplained            int64 // tokens
	VendorCost, LedgerCost int64 // nano-USD
	UnexplainedCost        int64
	Entries, Lost          int
	classes                map[string]explained // summed into Explained
}

// explained is one class's tokens and nano-USD in a cell.
type explained struct{ tokens, cost int64 }

// plot is an inline SVG line of unexplained nano-USD per window.
type plot struct {
	Width, Height int
	Points        string
	Zero          int // the y of $0
	Min, Max      int64
}

func (op *Operator) reconciliation(w http.ResponseWriter, r *http.Request, s *session) {
	if op.o.Reconciliations == nil {
		op.render(w, r, http.StatusOK, "reconcile", s, view{Title: "Reconciliation", Message: "No upstream has an admin key (upstreams[].admin_credential_env): nothing is reconciled."})
		return
	}
	hours := defaultReconcileHours
	if v := r.URL.Query().Get("hours"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxReconcileHours {
			op.render(w, r, http.StatusBadRequest, "error", s, view{Title: "Bad request", Message: fmt.Sprintf("hours must be 1 to %d", maxReconcileHours)})
			return
		}
		hours = n
	}
	width := vendorusage.Width(r.URL.Query().Get("width"))
	if width == "" {
		width = vendorusage.Hour
	}
	if width != vendorusage.Hour && width != vendorusage.Minute {
		op.render(w, r, http.StatusBadRequest, "error", s, view{Title: "Bad request", Message: "width must be 1h or 1m"})
		return
	}
	to := op.o.Now()
	ws, err := op.o.Reconciliations(r.Context(), width, to.Add(-time.Duration(hours)*time.Hour), to)
	if err != nil {
		op.o.Logger.Error("console: reconciliations", "err", err)
		op.render(w, r, http.StatusServiceUnavailable, "error", s, view{Title: "Unavailable", Message: "The kept reconciliations could not be read; try again."})
		return
	}
	op.render(w, r, http.StatusOK, "reconcile", s, view{Title: "Reconciliation", Data: reconcileKeys(ws)})
}

// reconcileKeys groups the windows' rows by vendor key, models summed.
func reconcileKeys(ws []reconcile.Window) []*reconcileKey {
	var keys []*reconcileKey
	byKey := map[string]*reconcileKey{}
	for _, win := range ws {
		for _, row := range win.Rows {
			id := row.Upstream + "\x00" + row.VendorKeyID + "\x00" + row.VendorKey
			k := byKey[id]
			if k == nil {
				k = &reconcileKey{Upstream: row.Upstream, VendorKey: row.VendorKey, VendorKeyID: row.VendorKeyID}
				byKey[id] = k
				keys = append(keys, k)
			}
			if n := len(k.Windows); n == 0 || !k.Windows[n-1].Start.Equal(win.Start) {
				k.Windows = append(k.Windows, reconcileCell{Start: win.Start})
			}
			c := &k.Windows[len(k.Windows)-1]
			c.Vendor += reconcile.Tokens(row.Vendor)
			c.Ledger += reconcile.Tokens(row.Ledger)
			c.Unexplained += reconcile.Tokens(row.Unexplained.Usage)
			c.VendorCost += row.VendorCost
			c.LedgerCost += row.LedgerCost
			c.UnexplainedCost += row.Unexplained.Cost
			c.Entries += row.Entries
			c.Lost += row.Abandoned
			for class, d := range row.Explained {
				if c.classes == nil {
					c.classes = map[string]explained{}
				}
				e := c.classes[class]
				c.classes[class] = explained{e.tokens + reconcile.Tokens(d.Usage), e.cost + d.Cost}
			}
		}
	}
	slices.SortFunc(keys, func(a, b *reconcileKey) int {
		return strings.Compare(a.Upstream+"\x00"+a.VendorKey+"\x00"+a.VendorKeyID, b.Upstream+"\x00"+b.VendorKey+"\x00"+b.VendorKeyID)
	})
	for _, k := range keys {
		for i := range k.Windows {
			c := &k.Windows[i]
			var parts []string
			for _, class := range slices.Sorted(maps.Keys(c.classes)) {
				e := c.classes[class]
				parts = append(parts, fmt.Sprintf("%s: %d tokens, $%s", class, e.tokens, pricing.FormatUSD(e.cost)))
			}
			c.Explained = strings.Join(parts, " ")
		}
		k.Plot = plotOf(k.Windows)
	}
	return keys
}

// plotOf draws the unexplained cost of each window, left to right, $0
// always in range.
func plotOf(cells []reconcileCell) plot {
	p := plot{Width: 480, Height: 120}
	for _, c := range cells {
		p.Min, p.Max = min(p.Min, c.UnexplainedCost), max(p.Max, c.UnexplainedCost)
	}
	span := p.Max - p.Min
	if span == 0 {
		span = 1
	}
	const pad = 8
	y := func(v int64) int { return pad + int((p.Max-v)*int64(p.Height-2*pad)/span) }
	p.Zero = y(0)
	var pts []string
	for i, c := range cells {
		x := pad
		if len(cells) > 1 {
			x = pad + i*(p.Width-2*pad)/(len(cells)-1)
		}
		pts = append(pts, fmt.Sprintf("%d,%d", x, y(c.UnexplainedCost)))
	}
	p.Points = strings.Join(pts, " ")
	return p
}

// Reconciliations reads the kept windows (reconcile.Kept over the store).
type Reconciliations func(ctx context.Context, width vendorusage.Width, from, to time.Time) ([]reconcile.Window, error)
