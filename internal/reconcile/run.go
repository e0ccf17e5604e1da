package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// Ledger is what a run reads of the store.
type Ledger interface {
	ListAccounts(ctx context.Context) ([]account.Account, error)
	LedgerBetween(ctx context.Context, accountID string, from, to time.Time, after string, limit int) ([]ledger.Entry, string, error)
	AbandonedBetween(ctx context.Context, from, to time.Time) ([]account.AbandonedAttempt, error)
}

// Upstream is one reconciled upstream.
type Upstream struct {
	Name, Format string
	// Keys maps its key names to the vendor's ids.
	Keys map[string]string
	// Serves reports whether a priced model is the upstream's; the first
	// upstream serving it gets the entry.
	Serves func(model string) bool
	// Price is the catalogue's price of the upstream's models.
	Price Pricer
	// Costs: the vendor has a cost report to read (both vendors do).
	Costs bool
}

// Report is a window's reconciliation: the rows per key, model and bucket,
// and per upstream and whole UTC day of the window, the vendor's bill
// against its usage at the ledger's prices.
type Report struct {
	Rows  []Row
	Costs []CostRow
}

// CostRow sets a day of the vendor's cost report against the day's rows:
// Priced is the sum of their VendorCost, the vendor's usage at the ledger's
// prices; Unexplained = Billed − Priced is what the vendor priced otherwise
// (a price the catalogue does not know yet, or usage the usage report does
// not show). The cost reports do not break the bill down by key.
type CostRow struct {
	Upstream       string
	Start          time.Time
	Billed, Priced int64 // nano-USD
	Unexplained    int64
}

// Runner reconciles windows: the vendors' reports through the relay, the
// ledger of every account.
type Runner struct {
	// Relay is the relay listener's base URL (http://host:port); Envoy
	// adds each upstream's admin key on its usage-report route.
	Relay     string
	Client    *http.Client
	Upstreams []Upstream
	Ledger    Ledger
	// Settling bounds how long after its start a request's entry is
	// written; entries are read that much past the window's end.
	Settling time.Duration
}

// ledgerPage is the page size of the ledger reads.
const ledgerPage = 1000

// Run reconciles [from, to) in buckets of width, every upstream. The cost
// reports are read for the whole UTC days in the window.
func (r *Runner) Run(ctx context.Context, from, to time.Time, width vendorusage.Width) (Report, error) {
	if !to.After(from) {
		return Report{}, fmt.Errorf("reconcile: the window [%s, %s) is empty", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	entries, err := r.ledger(ctx, from, to)
	if err != nil {
		return Report{}, err
	}
	byUpstream := map[string][]account.Settlement{}
	for _, st := range entries {
		for _, u := range r.Upstreams {
			if u.Serves(string(st.Priced)) {
				byUpstream[u.Name] = append(byUpstream[u.Name], st)
				break
			}
		}
	}
	// An attempt is recorded when Envoy gives up on it, within the
	// settling bound of its start.
	attempts, err := r.Ledger.AbandonedBetween(ctx, from, to.Add(r.Settling))
	if err != nil {
		return Report{}, fmt.Errorf("reconcile: %w", err)
	}
	abandoned := map[string][]account.AbandonedAttempt{}
	for _, a := range attempts {
		if !a.At.Before(from) && a.At.Before(to) {
			abandoned[a.Upstream] = append(abandoned[a.Upstream], a)
		}
	}
	var rep Report
	dayFrom, dayTo := from.UTC().Truncate(day), to.UTC().Truncate(day)
	if dayFrom.Before(from) {
		dayFrom = dayFrom.Add(day)
	}
	for _, u := range r.Upstreams {
		vendor, err := vendorusage.Fetch(ctx, r.Client, r.Relay+"/"+u.Name, u.Format, from, to, width)
		if err != nil {
			return Report{}, fmt.Errorf("reconcile: upstream %s: %w", u.Name, err)
		}
		rows := Reconcile(Input{Upstream: u.Name, Keys: u.Keys, Vendor: vendor, Ledger: byUpstream[u.Name], Abandoned: abandoned[u.Name], Width: width.Duration(), Price: u.Price})
		rep.Rows = append(rep.Rows, rows...)
	}
	if dayTo.After(dayFrom) {
		if rep.Costs, err = r.Costs(ctx, dayFrom, dayTo, rep.Rows); err != nil {
			return Report{}, err
		}
	}
	return rep, nil
}

// Costs sets the vendors' cost reports of the whole UTC days [from, to)
// against rows (every upstream's, of those days).
func (r *Runner) Costs(ctx context.Context, from, to time.Time, rows []Row) ([]CostRow, error) {
	var out []CostRow
	for _, u := range r.Upstreams {
		if !u.Costs {
			continue
		}
		costs, err := vendorusage.FetchCosts(ctx, r.Client, r.Relay+"/"+u.Name, u.Format, from, to)
		if err != nil {
			return nil, fmt.Errorf("reconcile: upstream %s: %w", u.Name, err)
		}
		var own []Row
		for _, row := range rows {
			if row.Upstream == u.Name {
				own = append(own, row)
			}
		}
		out = append(out, CostRows(u.Name, costs, own)...)
	}
	return out, nil
}

const day = 24 * time.Hour

// CostRows sets each day of costs against the rows that start in it.
func CostRows(upstream string, costs []vendorusage.Cost, rows []Row) []CostRow {
	out := make([]CostRow, 0, len(costs))
	for _, c := range costs {
		cr := CostRow{Upstream: upstream, Start: c.Start, Billed: c.NanoUSD}
		for _, r := range rows {
			if !r.Start.Before(c.Start) && r.Start.Before(c.End) {
				cr.Priced += r.VendorCost
			}
		}
		cr.Unexplained = cr.Billed - cr.Priced
		out = append(out, cr)
	}
	return out
}

// ledger returns every account's entries of requests started in [from,
// to).
func (r *Runner) ledger(ctx context.Context, from, to time.Time) ([]account.Settlement, error) {
	accts, err := r.Ledger.ListAccounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	var out []account.Settlement
	for _, a := range accts {
		after := ""
		for {
			page, next, err := r.Ledger.LedgerBetween(ctx, a.ID, from, to.Add(r.Settling), after, ledgerPage)
			if err != nil {
				return nil, fmt.Errorf("reconcile: %w", err)
			}
			for _, e := range page {
				if !e.StartedAt.Before(from) && e.StartedAt.Before(to) {
					out = append(out, e.Settlement)
				}
			}
			if next == "" {
				break
			}
			after = next
		}
	}
	return out, nil
}
