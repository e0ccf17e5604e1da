package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/ledger"
)

// The ledger is an account's billing record: an entry leaves it only after it
// was exported and is older than the retention. An exporter reads pages
// after its cursor (ExportLedger), writes them out, then commits the id of
// the last entry written (CommitExport). The committed mark only moves
// forward and is the default cursor of the next export, so an export that
// stopped anywhere resumes where its output ends.

// ExportLedger returns up to limit of the account's ledger entries after the
// entry id after, oldest first. An empty after resumes after the account's
// committed export mark. It also returns the mark ("" when nothing was ever
// committed).
func (s *Store) ExportLedger(ctx context.Context, accountID, after string, limit int) (entries []ledger.Entry, mark string, err error) {
	if !validID(accountID) {
		return nil, "", fmt.Errorf("store: export ledger of %q: %w", accountID, ErrNotFound)
	}
	mark, err = s.rdb.Get(ctx, acctKey(accountID, "exported")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("store: export ledger of %s: %w", accountID, err)
	}
	if after == "" {
		after = mark
	}
	entries, _, err = s.Ledger(ctx, accountID, after, limit)
	if err != nil {
		return nil, "", err
	}
	return entries, mark, nil
}

// CommitExport records that the account's ledger has been exported up to and
// including entry id last, then trims exported entries older than the
// retention. It returns the mark afterwards (it never moves back) and the
// number of entries trimmed.
func (s *Store) CommitExport(ctx context.Context, accountID, last string) (mark string, trimmed int64, err error) {
	return s.commitRead(ctx, "export", accountID, last, "exported")
}

// CommitSink records that the SQL ledger sink has copied the account's ledger
// up to and including entry id last, then trims as CommitExport does. Once the
// sink has committed, trimming waits for both it and the exports: an entry
// leaves only when every reader that ever committed has copied it.
func (s *Store) CommitSink(ctx context.Context, accountID, last string) (mark string, trimmed int64, err error) {
	return s.commitRead(ctx, "sink commit", accountID, last, "sunk")
}

// SinkMark returns the id of the last entry of the account's ledger the SQL
// sink has committed, "" when it never committed.
func (s *Store) SinkMark(ctx context.Context, accountID string) (string, error) {
	if !validID(accountID) {
		return "", fmt.Errorf("store: sink mark of %q: %w", accountID, ErrNotFound)
	}
	mark, err := s.rdb.Get(ctx, acctKey(accountID, "sunk")).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("store: sink mark of %s: %w", accountID, err)
	}
	return mark, nil
}

// commitRead moves reader's mark (see trim.lua) and trims.
func (s *Store) commitRead(ctx context.Context, what, accountID, last, reader string) (mark string, trimmed int64, err error) {
	if !validID(accountID) {
		return "", 0, fmt.Errorf("store: %s of %q: %w", what, accountID, ErrNotFound)
	}
	if last != "" && !validEntryID(last) {
		return "", 0, fmt.Errorf("store: %s of %s: bad entry id %q", what, accountID, last)
	}
	bound := "0"
	if r := s.opts.LedgerRetention; r > 0 {
		bound = strconv.FormatInt(s.now().Add(-r).UnixMilli(), 10) + "-0"
	}
	keys := []string{acctKey(accountID, "ledger"), acctKey(accountID, "exported"), acctKey(accountID, "sunk")}
	v, err := trimScript.Run(ctx, s.rdb, keys, last, bound, reader).Slice()
	if err != nil && strings.Contains(err.Error(), "no such entry") {
		return "", 0, fmt.Errorf("store: %s of %s: entry %s: %w", what, accountID, last, ErrNotFound)
	}
	if err != nil {
		return "", 0, fmt.Errorf("store: %s of %s: %w", what, accountID, err)
	}
	if len(v) != 2 {
		return "", 0, fmt.Errorf("store: %s of %s: unexpected reply %v", what, accountID, v)
	}
	return str(v[0]), toInt(v[1]), nil
}

// TrimLedger trims the account's exported entries older than the retention.
func (s *Store) TrimLedger(ctx context.Context, accountID string) (int64, error) {
	_, n, err := s.CommitExport(ctx, accountID, "")
	return n, err
}

// validEntryID reports whether id is a stream entry id, MS-SEQ.
func validEntryID(id string) bool {
	a, b, ok := cutDash(id)
	if !ok {
		return false
	}
	_, e1 := strconv.ParseUint(a, 10, 64)
	_, e2 := strconv.ParseUint(b, 10, 64)
	return e1 == nil && e2 == nil
}

func cutDash(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}
