package ledgersink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/gateway/internal/audit"
)

// copyAudit copies the audit entries after the audit cursor into the table
// "audit", a page per transaction with the cursor's move, as copyAccount
// does the ledger. Entries are never changed once appended, so a replayed
// page inserts nothing.
func (s *Sink) copyAudit(ctx context.Context) (inserted int, err error) {
	after, err := s.auditCursor(ctx)
	if err != nil {
		return 0, err
	}
	for {
		page, _, err := s.st.Audit(ctx, after, s.opts.PageSize)
		if err != nil {
			s.errs.WithLabelValues("store").Inc()
			return inserted, fmt.Errorf("reading the audit trail: %w", err)
		}
		if len(page) == 0 {
			return inserted, nil
		}
		n, err := s.commitAudit(ctx, page)
		if err != nil {
			s.errs.WithLabelValues("database").Inc()
			return inserted, err
		}
		inserted += n
		after = page[len(page)-1].ID
	}
}

func (s *Sink) auditCursor(ctx context.Context) (string, error) {
	var id string
	err := s.conn.QueryRow(ctx, `SELECT entry_id FROM audit_sink_cursor`).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the audit cursor: %w", err)
	}
	return id, nil
}

const auditSQL = `INSERT INTO audit (entry_id, at, actor, origin, action, account_id, key_id, detail, before, after, outcome)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (entry_id) DO NOTHING`

const auditCursorSQL = `INSERT INTO audit_sink_cursor (one, entry_id) VALUES (true, $1)
	ON CONFLICT (one) DO UPDATE SET entry_id = excluded.entry_id, updated_at = now()`

func (s *Sink) commitAudit(ctx context.Context, page []audit.Entry) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("copying the audit trail: %w", err)
	}
	defer tx.Rollback(ctx)
	b := &pgx.Batch{}
	for _, e := range page {
		b.Queue(auditSQL, e.ID, e.At, storable(e.Actor), storable(e.Origin), storable(e.Action), storable(e.AccountID),
			storable(e.KeyID), storable(e.Detail), jsonOrNil(e.Before), jsonOrNil(e.After), e.Outcome)
	}
	b.Queue(auditCursorSQL, page[len(page)-1].ID)
	res := tx.SendBatch(ctx, b)
	inserted := 0
	for range page {
		tag, err := res.Exec()
		if err != nil {
			res.Close()
			return 0, fmt.Errorf("copying the audit trail: %w", err)
		}
		inserted += int(tag.RowsAffected())
	}
	if _, err := res.Exec(); err != nil {
		res.Close()
		return 0, fmt.Errorf("copying the audit trail: cursor: %w", err)
	}
	if err := res.Close(); err != nil {
		return 0, fmt.Errorf("copying the audit trail: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("copying the audit trail: commit: %w", err)
	}
	return inserted, nil
}

// jsonOrNil is a before/after state for a jsonb column: NULL when there is
// none (or, from a damaged entry, when it is not JSON).
func jsonOrNil(s string) any {
	if s == "" || !json.Valid([]byte(s)) {
		return nil
	}
	return s
}
