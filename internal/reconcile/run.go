package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// Ledger is what a run reads of the store.
type Ledger interface {
	ListAccounts(ctx context.Context) ([]account.Account, error)
	LedgerBetween(ctx context.Context, accountID string, from, to time.Time, after string, limit int) ([]store.LedgerEntry, string, error)
}

// Upstream is one reconciled upstream.
type Upstream struct {
	Name, Format string
	// Keys maps its key names to the vendor's ids.
	Keys map[string]string
	// Serves reports whether a priced model is the upstream's; the first
	// upstream serving it gets the entry.
	Serves func(model string) bool
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

// Run reconciles [from, to) in buckets of width, every upstream.
func (r *Runner) Run(ctx context.Context, from, to time.Time, width vendorusage.Width) ([]Row, error) {
	if !to.After(from) {
		return nil, fmt.Errorf("reconcile: the window [%s, %s) is empty", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	entries, err := r.ledger(ctx, from, to)
	if err != nil {
		return nil, err
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
	var rows []Row
	for _, u := range r.Upstreams {
		vendor, err := vendorusage.Fetch(ctx, r.Client, r.Relay+"/"+u.Name, u.Format, from, to, width)
		if err != nil {
			return nil, fmt.Errorf("reconcile: upstream %s: %w", u.Name, err)
		}
		rows = append(rows, Reconcile(Input{Upstream: u.Name, Keys: u.Keys, Vendor: vendor, Ledger: byUpstream[u.Name], Width: width.Duration()})...)
	}
	return rows, nil
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
