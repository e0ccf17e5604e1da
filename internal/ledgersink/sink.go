// Package ledgersink copies the ledger into PostgreSQL for finance: every
// settled entry of every account, exactly once by (account, entry id), into
// the table "ledger", continuously and resumably; and the audit trail,
// every entry once by its id, into the table "audit".
//
// The sink is its own process beside the sidecars: it reads the ledger from
// Redis the way an export does and never touches the request path, so a slow
// or absent database only grows its lag (gateway_ledger_sink_lag_seconds).
// Each page of an account's entries is inserted in one transaction together
// with the account's cursor, so a restart resumes after the last page
// committed, and a replayed page inserts nothing (ON CONFLICT DO NOTHING).
// After the commit the sink moves its mark in Redis (store.CommitSink), which
// lets store.ledger_retention trim what PostgreSQL holds.
//
// An entry PostgreSQL refuses for its data (a NUL in a model name, a
// constraint an operator added) is set aside in the table "ledger_rejects",
// in the same transaction that moves the cursor past it, so that one entry
// never holds back the others: see dataError.
package ledgersink

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// Store is what the sink reads and marks of the gateway's store
// (internal/store implements it).
type Store interface {
	Audit(ctx context.Context, after string, limit int) ([]audit.Entry, string, error)
	CommitSink(ctx context.Context, accountID, last string) (mark string, trimmed int64, err error)
	Ledger(ctx context.Context, accountID, after string, limit int) ([]ledger.Entry, string, error)
	ListAccounts(ctx context.Context) ([]account.Account, error)
	ListKeys(ctx context.Context, accountID string) ([]account.Key, error)
	SinkMark(ctx context.Context, accountID string) (string, error)
	// ReconcileWindows reads the continuous reconciliation's kept windows.
	ReconcileWindows(ctx context.Context, width string, from, to time.Time) (map[time.Time][]byte, error)
}

// Options configure a Sink. Zero values pick the defaults.
type Options struct {
	// DatabaseURL is a postgres:// URL or a libpq key=value string.
	DatabaseURL string
	// Interval is the pause between passes once caught up, and between
	// attempts to reach the database.
	Interval time.Duration // default 1s
	// PageSize is the number of entries inserted per transaction.
	PageSize int // default 1000
	// Timeout bounds connecting and each transaction.
	Timeout time.Duration // default 30s
	Logger  *slog.Logger
	// Registerer receives the sink's metrics; nil registers none.
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// Sink copies the ledger from the store into PostgreSQL.
type Sink struct {
	st   Store
	opts Options
	log  *slog.Logger

	conn *pgx.Conn // nil while disconnected
	// cursors are the accounts' last copied entry ids, as committed in
	// PostgreSQL; loaded on connecting.
	cursors map[string]string
	// marked are the ids last committed to the store's sink mark.
	marked map[string]string
	labels map[string]map[string]string // account -> key id -> label

	mu       sync.Mutex
	caughtUp bool

	lag     prometheus.Gauge
	copied  prometheus.Counter
	reject  prometheus.Counter
	rejects prometheus.Gauge
	errs    *prometheus.CounterVec
	dbUp    prometheus.Gauge
	lastRun prometheus.Gauge
}

// New returns a sink reading from st.
func New(st Store, o Options) *Sink {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.PageSize <= 0 || o.PageSize > 1000 {
		o.PageSize = 1000
	}
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Sink{
		st: st, opts: o, log: o.Logger,
		marked: map[string]string{},
		labels: map[string]map[string]string{},
		lag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_ledger_sink_lag_seconds",
			Help: "Age of the oldest settled ledger entry not yet copied into PostgreSQL; 0 when every entry is copied.",
		}),
		copied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_ledger_sink_entries_total",
			Help: "Ledger entries inserted into PostgreSQL (replays that inserted nothing not counted).",
		}),
		reject: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_ledger_sink_rejected_total",
			Help: "Ledger entries PostgreSQL refused for their data, set aside in ledger_rejects by this process.",
		}),
		rejects: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_ledger_sink_rejects",
			Help: "Rows in ledger_rejects: refused entries waiting for an operator, as of the last pass.",
		}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_ledger_sink_errors_total",
			Help: "Failed attempts of the ledger sink, by what failed: database or store.",
		}, []string{"stage"}),
		dbUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_ledger_sink_database_up",
			Help: "1 while the ledger sink is connected to PostgreSQL with its schema migrated.",
		}),
		lastRun: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_ledger_sink_last_pass_timestamp_seconds",
			Help: "When the ledger sink last finished a pass over every account (unix seconds).",
		}),
	}
	s.errs.WithLabelValues("database")
	s.errs.WithLabelValues("store")
	if o.Registerer != nil {
		o.Registerer.MustRegister(s.lag, s.copied, s.reject, s.rejects, s.errs, s.dbUp, s.lastRun)
	}
	return s
}

// Run copies until ctx ends, then closes the database connection.
func (s *Sink) Run(ctx context.Context) error {
	defer s.disconnect()
	for {
		if _, err := s.Pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("ledger sink pass failed; retrying", "err", err, "in", s.opts.Interval.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.opts.Interval):
		}
	}
}

// Pass copies every account's entries not yet copied, and reports how many
// it inserted. The lag gauge is set from what was left behind: an account
// whose entries could not be copied counts from its oldest uncopied entry.
func (s *Sink) Pass(ctx context.Context) (inserted int, err error) {
	var errs []error
	if s.conn == nil {
		if err := s.connect(ctx); err != nil {
			s.errs.WithLabelValues("database").Inc()
			errs = append(errs, err)
		}
	}
	accounts, err := s.st.ListAccounts(ctx)
	if err != nil {
		s.errs.WithLabelValues("store").Inc()
		return 0, errors.Join(append(errs, fmt.Errorf("listing accounts: %w", err))...)
	}
	var oldest time.Time // of the entries left uncopied
	for _, a := range accounts {
		n, left, err := s.copyAccount(ctx, a.ID)
		inserted += n
		if err != nil {
			errs = append(errs, err)
		}
		if !left.IsZero() && (oldest.IsZero() || left.Before(oldest)) {
			oldest = left
		}
	}
	if err := s.copyReconciliations(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.conn != nil {
		n, err := s.copyAudit(ctx)
		inserted += n
		if err != nil {
			s.disconnect()
			errs = append(errs, err)
		}
	}
	if s.conn != nil {
		if err := s.countRejects(ctx); err != nil {
			s.errs.WithLabelValues("database").Inc()
			s.disconnect()
			errs = append(errs, err)
		}
	}
	if oldest.IsZero() {
		s.lag.Set(0)
	} else {
		s.lag.Set(max(0, s.opts.Now().Sub(oldest).Seconds()))
	}
	if len(errs) == 0 {
		s.lastRun.Set(float64(s.opts.Now().UnixNano()) / 1e9)
	}
	s.mu.Lock()
	s.caughtUp = len(errs) == 0 && oldest.IsZero()
	s.mu.Unlock()
	return inserted, errors.Join(errs...)
}

// CaughtUp reports whether the last pass copied everything there was.
func (s *Sink) CaughtUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caughtUp
}

// copyAccount copies the account's entries after its cursor, page by page.
// It returns the number inserted and the settlement time of the oldest
// entry left uncopied (zero when none is left).
func (s *Sink) copyAccount(ctx context.Context, account string) (inserted int, left time.Time, err error) {
	if err := s.mark(ctx, account); err != nil {
		return 0, time.Time{}, err
	}
	after := s.cursors[account]
	if s.conn == nil {
		// No database: measure the lag from the store's sink mark.
		if after, err = s.st.SinkMark(ctx, account); err != nil {
			s.errs.WithLabelValues("store").Inc()
			return 0, time.Time{}, err
		}
	}
	for {
		page, err := s.read(ctx, account, after)
		if errors.Is(err, store.ErrNotFound) {
			return inserted, time.Time{}, nil // deleted since listed
		}
		if err != nil {
			s.errs.WithLabelValues("store").Inc()
			return inserted, time.Time{}, err
		}
		if len(page) == 0 {
			return inserted, time.Time{}, s.mark(ctx, account)
		}
		if s.conn == nil {
			return inserted, entryTime(page[0].ID), nil
		}
		n, err := s.write(ctx, account, page)
		if err != nil {
			s.errs.WithLabelValues("database").Inc()
			s.disconnect()
			return inserted, entryTime(page[0].ID), err
		}
		inserted += n
		after = page[len(page)-1].ID
		if err := s.mark(ctx, account); err != nil {
			return inserted, time.Time{}, err
		}
		if len(page) < s.opts.PageSize {
			return inserted, time.Time{}, nil
		}
	}
}

// readChunk bounds one ledger read from the store: Redis runs a command
// to its end before the next, and admissions queue behind it. A read of
// 100 entries takes tens of microseconds there; one of 1,000 took up to
// 3 ms under load.
const readChunk = 100

// read returns up to a page of the account's entries after after, read
// in chunks of readChunk.
func (s *Sink) read(ctx context.Context, account, after string) ([]ledger.Entry, error) {
	var page []ledger.Entry
	for len(page) < s.opts.PageSize {
		n := min(readChunk, s.opts.PageSize-len(page))
		chunk, _, err := s.st.Ledger(ctx, account, after, n)
		if err != nil {
			return nil, err
		}
		page = append(page, chunk...)
		if len(chunk) < n {
			break
		}
		after = chunk[len(chunk)-1].ID
	}
	return page, nil
}

// mark moves the store's sink mark to the cursor committed in PostgreSQL,
// letting retention trim what the database holds. The first call for an
// account registers the sink as its reader even before anything is copied
// (or while the database is down): from then on, trimming after exports
// waits for the sink too.
func (s *Sink) mark(ctx context.Context, account string) error {
	c := s.cursors[account]
	if m, ok := s.marked[account]; ok && (c == "" || m == c) {
		return nil
	}
	if _, _, err := s.st.CommitSink(ctx, account, c); err != nil {
		s.errs.WithLabelValues("store").Inc()
		return err
	}
	s.marked[account] = c
	return nil
}

// write inserts a page and moves the account's cursor in one transaction.
// When PostgreSQL refuses an entry's data, the page is written again with
// each refused entry set aside in ledger_rejects instead.
func (s *Sink) write(ctx context.Context, account string, page []ledger.Entry) (int, error) {
	labels, err := s.keyLabels(ctx, account, page)
	if err != nil {
		return 0, err
	}
	rows := make([][]any, len(page))
	for i, e := range page {
		rows[i] = row(labels[e.KeyID], e)
	}
	n, err := s.commit(ctx, account, page, rows, false)
	if _, ok := dataError(err); ok {
		n, err = s.commit(ctx, account, page, rows, true)
	}
	return n, err
}

// commit inserts rows (page's, in order) and moves the account's cursor
// to the page's last entry in one transaction. With setAside, each row
// PostgreSQL refuses for its data goes to ledger_rejects instead: the rows
// are sent as one batch inside a savepoint; at a refusal, the savepoint is
// rolled back, the rows before the refused one are sent again, the refused
// one is set aside, and the rest go on in a new savepoint. Without
// setAside the first refusal fails the whole page.
func (s *Sink) commit(ctx context.Context, account string, page []ledger.Entry, rows [][]any, setAside bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	tx, err := s.conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("copying the ledger of %s: %w", account, err)
	}
	defer tx.Rollback(ctx)
	last := page[len(page)-1].ID
	cursor := []any{account, last}
	inserted, rejected := 0, 0
	for rest, at := rows, 0; len(rest) > 0; {
		if !setAside {
			// The cursor goes in the same batch: one round trip.
			n, _, err := insertRows(ctx, tx, rest, cursor)
			if err != nil {
				return 0, fmt.Errorf("copying the ledger of %s: %w", account, err)
			}
			inserted += n
			cursor = nil
			break
		}
		sp, err := tx.Begin(ctx) // a savepoint
		if err != nil {
			return 0, fmt.Errorf("copying the ledger of %s: %w", account, err)
		}
		n, bad, err := insertRows(ctx, sp, rest, nil)
		pgErr, refused := dataError(err)
		if err != nil && !refused {
			return 0, fmt.Errorf("copying the ledger of %s: %w", account, err)
		}
		if err == nil {
			if err := sp.Commit(ctx); err != nil {
				return 0, fmt.Errorf("copying the ledger of %s: %w", account, err)
			}
			inserted += n
			break
		}
		if err := sp.Rollback(ctx); err != nil {
			return 0, fmt.Errorf("copying the ledger of %s: %w", account, err)
		}
		// The rows before the refused one were accepted before the
		// rollback; a second refusal among them is not a data problem.
		n, _, err = insertRows(ctx, tx, rest[:bad], nil)
		if err != nil {
			return 0, fmt.Errorf("copying the ledger of %s: %w", account, err)
		}
		inserted += n
		e := page[at+bad]
		added, err := setAsideRow(ctx, tx, account, e.ID, rest[bad], pgErr)
		if err != nil {
			return 0, fmt.Errorf("copying the ledger of %s: setting entry %s aside: %w", account, e.ID, err)
		}
		rejected += added
		// The message names the byte or constraint, never the value.
		s.log.Error("ledger sink: PostgreSQL refused an entry; set aside in ledger_rejects",
			"account", account, "entry_id", e.ID, "request_id", e.RequestID, "code", pgErr.Code, "err", pgErr.Message)
		rest, at = rest[bad+1:], at+bad+1
	}
	if cursor != nil {
		if _, err := tx.Exec(ctx, cursorSQL, cursor...); err != nil {
			return 0, fmt.Errorf("copying the ledger of %s: cursor: %w", account, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("copying the ledger of %s: commit: %w", account, err)
	}
	s.cursors[account] = last
	s.copied.Add(float64(inserted))
	s.reject.Add(float64(rejected))
	return inserted, nil
}

// cursorSQL moves an account's cursor ($1) to an entry id ($2).
const cursorSQL = `INSERT INTO ledger_sink_cursor (account_id, entry_id) VALUES ($1, $2)
		ON CONFLICT (account_id) DO UPDATE SET entry_id = excluded.entry_id, updated_at = now()`

// insertRows sends rows, then the cursor's move when cursor is not nil, as
// one batch, and returns how many rows were inserted (replays insert
// nothing) or, when a row fails, the index of that row.
func insertRows(ctx context.Context, tx pgx.Tx, rows [][]any, cursor []any) (inserted, failed int, err error) {
	if len(rows) == 0 && cursor == nil {
		return 0, 0, nil
	}
	b := &pgx.Batch{}
	for _, r := range rows {
		b.Queue(insertSQL, r...)
	}
	if cursor != nil {
		b.Queue(cursorSQL, cursor...)
	}
	res := tx.SendBatch(ctx, b)
	for i := range rows {
		tag, err := res.Exec()
		if err != nil {
			res.Close()
			return 0, i, err
		}
		inserted += int(tag.RowsAffected())
	}
	if cursor != nil {
		if _, err := res.Exec(); err != nil {
			res.Close()
			return 0, len(rows), fmt.Errorf("cursor: %w", err)
		}
	}
	return inserted, 0, res.Close()
}

// setAsideRow writes a refused row to ledger_rejects as JSON, by column
// name, its strings made storable (storable). It reports whether a row was
// added (a page copied twice adds it once).
func setAsideRow(ctx context.Context, tx pgx.Tx, account, entryID string, r []any, refused *pgconn.PgError) (int, error) {
	entry, err := rowJSON(r)
	if err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO ledger_rejects (account_id, entry_id, entry, error_code, error)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account_id, entry_id) DO NOTHING`,
		account, entryID, entry, refused.Code, refused.Message)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// rowJSON is a row as a JSON object keyed by insertColumns, every string
// made storable.
func rowJSON(r []any) (string, error) {
	obj := make(map[string]any, len(r))
	for i, v := range r {
		switch v := v.(type) {
		case string:
			obj[insertColumns[i]] = storable(v)
		case []string:
			s := make([]string, len(v))
			for j := range v {
				s[j] = storable(v[j])
			}
			obj[insertColumns[i]] = s
		default:
			obj[insertColumns[i]] = v
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return "", err
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// storable spells out what no PostgreSQL text (nor jsonb) value can hold,
// as text an operator can read: a NUL as the six characters \u0000, a byte
// that is not part of valid UTF-8 as \xHH. Anything else is kept as is.
func storable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02X`, s[i])
		case r == 0:
			b.WriteString(`\u0000`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// dataError reports whether err is PostgreSQL refusing a row for its
// values, which no retry changes: SQLSTATE class 22 (data exception: a
// NUL or invalid UTF-8 in text, 22021; a character the database encoding
// lacks, 22P05; a value too long or out of range, 22001, 22003, 22008)
// and class 23 (integrity constraint violation: a NOT NULL, CHECK, unique
// or foreign key constraint, such as one an operator added). Everything
// else (connection, timeout, permission, a missing table) is the
// database's trouble and is retried.
func dataError(err error) (*pgconn.PgError, bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil, false
	}
	class := pgErr.Code[:min(2, len(pgErr.Code))]
	return pgErr, class == "22" || class == "23"
}

// countRejects sets the rejects gauge from the table, so that the alert
// holds until an operator has dealt with every row.
func (s *Sink) countRejects(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	var n int64
	if err := s.conn.QueryRow(ctx, `SELECT count(*) FROM ledger_rejects`).Scan(&n); err != nil {
		return fmt.Errorf("counting ledger_rejects: %w", err)
	}
	s.rejects.Set(float64(n))
	return nil
}

// keyLabels returns the labels of the account's keys, read again when the
// page names a key not seen before.
func (s *Sink) keyLabels(ctx context.Context, account string, page []ledger.Entry) (map[string]string, error) {
	labels := s.labels[account]
	for _, e := range page {
		if _, ok := labels[e.KeyID]; ok || e.KeyID == "" {
			continue
		}
		keys, err := s.st.ListKeys(ctx, account)
		if err != nil {
			s.errs.WithLabelValues("store").Inc()
			return nil, fmt.Errorf("key labels of %s: %w", account, err)
		}
		labels = make(map[string]string, len(keys))
		for _, k := range keys {
			labels[k.ID] = k.Label
		}
		s.labels[account] = labels
		break
	}
	return labels, nil
}

// row is the insert's arguments for one entry, in insertSQL's order.
func row(label string, e ledger.Entry) []any {
	args := []any{e.AccountID, e.ID, entryTime(e.ID), e.RequestID, e.KeyID, label,
		string(e.Priced), string(e.Requested), string(e.Reported)}
	for _, k := range usage.Kinds {
		args = append(args, k.Of(e.Usage))
		if k.Priced() {
			args = append(args, k.Of(e.Rates))
		}
	}
	return append(args, e.ServiceTier, e.LongContext, e.Cost, e.Status, Flags(e.Settlement),
		e.Endpoint, e.Stream, nullTime(e.StartedAt), nullTime(e.EndedAt), e.Region, e.Uplift, e.Transport, e.VendorKey, e.ProjectID)
}

// Flags are the names of an entry's flags, as the export names its
// booleans; never nil, so that the column holds '{}' rather than NULL.
func Flags(st account.Settlement) []string {
	f := []string{}
	if st.Estimated {
		f = append(f, "estimated")
	}
	if st.Fallback {
		f = append(f, "fallback_price")
	}
	if st.Interrupted {
		f = append(f, "interrupted")
	}
	if st.Reconciled {
		f = append(f, "reconciled")
	}
	if st.Capped {
		f = append(f, "capped")
	}
	if st.TierUnknown {
		f = append(f, "tier_unknown")
	}
	return f
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// entryTime is the settlement time an entry id carries (MS-SEQ).
func entryTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n).UTC()
}

// connect opens the database, migrates its schema and loads the cursors.
func (s *Sink) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.opts.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	if err := migrate(ctx, conn); err != nil {
		conn.Close(context.Background())
		return err
	}
	rows, err := conn.Query(ctx, `SELECT account_id, entry_id FROM ledger_sink_cursor`)
	if err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("reading the cursors: %w", err)
	}
	cursors := map[string]string{}
	for rows.Next() {
		var a, id string
		if err := rows.Scan(&a, &id); err != nil {
			rows.Close()
			conn.Close(context.Background())
			return fmt.Errorf("reading the cursors: %w", err)
		}
		cursors[a] = id
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		conn.Close(context.Background())
		return fmt.Errorf("reading the cursors: %w", err)
	}
	s.conn, s.cursors = conn, cursors
	s.dbUp.Set(1)
	s.log.Info("ledger sink connected", "schema_version", SchemaVersion, "accounts_copied", len(cursors))
	return nil
}

func (s *Sink) disconnect() {
	if s.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.conn.Close(ctx)
		cancel()
	}
	s.conn, s.cursors = nil, nil
	s.dbUp.Set(0)
}
