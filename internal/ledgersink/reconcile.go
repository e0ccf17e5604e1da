package ledgersink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// The continuous reconciliation's kept windows (reconcile.Continuous),
// copied into the table "reconciliation": each window in one transaction
// that replaces its rows and moves the width's cursor to it, so that a
// window kept again (the same rows) is copied again, never twice. The
// window at the cursor is read again each pass.

// reconcileWidths are the widths the continuous run keeps.
var reconcileWidths = []vendorusage.Width{vendorusage.Hour, vendorusage.Minute}

// copyReconciliations copies the kept windows from each width's cursor on.
func (s *Sink) copyReconciliations(ctx context.Context) error {
	if s.conn == nil {
		return nil
	}
	for _, w := range reconcileWidths {
		var from time.Time
		err := s.conn.QueryRow(ctx, `SELECT window_start FROM reconciliation_sink_cursor WHERE bucket_width = $1`, string(w)).Scan(&from)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			s.errs.WithLabelValues("database").Inc()
			s.disconnect()
			return fmt.Errorf("reconciliation cursor: %w", err)
		}
		ws, err := reconcile.Kept(ctx, s.st, w, from, s.opts.Now().Add(w.Duration()))
		if err != nil {
			s.errs.WithLabelValues("store").Inc()
			return err
		}
		for _, win := range ws {
			if err := s.copyWindow(ctx, w, win); err != nil {
				s.errs.WithLabelValues("database").Inc()
				s.disconnect()
				return err
			}
		}
	}
	return nil
}

func (s *Sink) copyWindow(ctx context.Context, w vendorusage.Width, win reconcile.Window) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("reconciliation window: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `DELETE FROM reconciliation WHERE bucket_width = $1 AND window_start = $2`, string(w), win.Start); err != nil {
		return fmt.Errorf("reconciliation window: %w", err)
	}
	for _, r := range win.Rows {
		explained := map[string]any{}
		for class, d := range r.Explained {
			explained[class] = map[string]any{"usage": byName(d.Usage), "cost_nano_usd": d.Cost}
		}
		// The key ids and models are the vendor's report's as it wrote
		// them: made storable as the ledger's strings are.
		args := []any{string(w), win.Start, storable(r.Upstream), storable(r.VendorKeyID), storable(r.VendorKey), storable(r.Model),
			jsonOf(byName(r.Vendor)), jsonOf(byName(r.Ledger)), jsonOf(explained), jsonOf(byName(r.Unexplained.Usage)),
			r.LedgerCost, r.VendorCost, r.Unexplained.Cost, r.Entries, r.Estimated, r.Abandoned}
		if _, err := tx.Exec(ctx, `INSERT INTO reconciliation (bucket_width, window_start, upstream, vendor_key_id, vendor_key, model,
			vendor, ledger, explained, unexplained, ledger_cost_nano_usd, vendor_cost_nano_usd, unexplained_cost_nano_usd,
			entries, estimated, abandoned) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)`, args...); err != nil {
			return fmt.Errorf("reconciliation window %s: %w", win.Start.Format(time.RFC3339), err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO reconciliation_sink_cursor (bucket_width, window_start) VALUES ($1, $2)
		ON CONFLICT (bucket_width) DO UPDATE SET window_start = excluded.window_start, updated_at = now()`, string(w), win.Start); err != nil {
		return fmt.Errorf("reconciliation cursor: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("reconciliation window: %w", err)
	}
	return nil
}

// byName is u by kind name, zeros left out (never nil: an empty object).
func byName(u usage.Usage) map[string]int64 {
	m := usage.ByName(u)
	if m == nil {
		m = map[string]int64{}
	}
	return m
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v) // maps of strings and numbers: never fails
	return string(b)
}
