package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/ledger"
)

// Reads for the console and its data API: usage by day, the ledger newest
// first or by month, and the audit trail newest first.

// MaxSeriesDays is the longest daily series DailyUsage reads: day counters
// are kept a little longer (dayKeyTTL).
const MaxSeriesDays = 90

// DailyUsage returns the account's counters for each of the days UTC days
// that end today, oldest first; a day without requests has zero counters.
// One round trip.
func (s *Store) DailyUsage(ctx context.Context, accountID string, days int) ([]ledger.DayCounters, error) {
	if !validID(accountID) {
		return nil, fmt.Errorf("store: daily usage of %q: %w", accountID, ErrNotFound)
	}
	if days < 1 || days > MaxSeriesDays {
		return nil, fmt.Errorf("store: daily usage: days must be 1 to %d", MaxSeriesDays)
	}
	now := s.now()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	var (
		exists *redis.IntCmd
		hs     = make([]*redis.MapStringStringCmd, days)
	)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, acctKey(accountID, "acct"))
		for i := range hs {
			day := today.AddDate(0, 0, i-days+1)
			hs[i] = p.HGetAll(ctx, acctKey(accountID, "u:d:"+dayStamp(day)))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: daily usage of %s: %w", accountID, err)
	}
	if exists.Val() == 0 {
		return nil, fmt.Errorf("store: daily usage of %s: %w", accountID, ErrNotFound)
	}
	out := make([]ledger.DayCounters, days)
	for i, h := range hs {
		out[i].Day = today.AddDate(0, 0, i-days+1)
		out[i].Counters, _ = decodeUsage(h.Val())
	}
	return out, nil
}

// RecentLedger returns up to limit of the account's ledger entries before
// the entry id before ("" for the newest), newest first, and the id to pass
// as before for the next page, "" when there is none.
func (s *Store) RecentLedger(ctx context.Context, accountID, before string, limit int) ([]ledger.Entry, string, error) {
	if !validID(accountID) {
		return nil, "", fmt.Errorf("store: ledger of %q: %w", accountID, ErrNotFound)
	}
	if before != "" && !validEntryID(before) {
		return nil, "", fmt.Errorf("store: ledger of %s: malformed cursor", accountID)
	}
	end := "+"
	if before != "" {
		end = "(" + before
	}
	return s.ledgerPage(ctx, accountID, limit, func(p redis.Pipeliner, key string) *redis.XMessageSliceCmd {
		return p.XRevRangeN(ctx, key, end, "-", int64(pageSize(limit))+1)
	})
}

// LedgerBetween returns up to limit of the account's ledger entries recorded
// in [from, to) after the entry id after ("" for the first), oldest first,
// and the id to pass as after for the next page, "" when there is none. An
// entry's time is its id's: when the store recorded the settlement, which
// also picks the day its usage is counted under.
func (s *Store) LedgerBetween(ctx context.Context, accountID string, from, to time.Time, after string, limit int) ([]ledger.Entry, string, error) {
	if !validID(accountID) {
		return nil, "", fmt.Errorf("store: ledger of %q: %w", accountID, ErrNotFound)
	}
	if after != "" && !validEntryID(after) {
		return nil, "", fmt.Errorf("store: ledger of %s: malformed cursor", accountID)
	}
	if !to.After(from) {
		return nil, "", nil
	}
	start := strconv.FormatInt(from.UnixMilli(), 10) + "-0"
	if after != "" {
		start = "(" + after
	}
	// An end of "MS" alone covers every sequence number of that millisecond.
	end := strconv.FormatInt(to.UnixMilli()-1, 10)
	return s.ledgerPage(ctx, accountID, limit, func(p redis.Pipeliner, key string) *redis.XMessageSliceCmd {
		return p.XRangeN(ctx, key, start, end, int64(pageSize(limit))+1)
	})
}

// RecentAudit returns up to limit audit entries before the entry id before
// ("" for the newest), newest first, and the id to pass as before for the
// next page, "" when there is none.
func (s *Store) RecentAudit(ctx context.Context, before string, limit int) ([]audit.Entry, string, error) {
	if before != "" && !validEntryID(before) {
		return nil, "", errors.New("store: audit: malformed cursor")
	}
	end := "+"
	if before != "" {
		end = "(" + before
	}
	msgs, err := s.rdb.XRevRangeN(ctx, auditKey, end, "-", int64(pageSize(limit))+1).Result()
	if err != nil {
		return nil, "", fmt.Errorf("store: audit: %w", err)
	}
	msgs, next := trimPage(msgs, limit)
	entries := make([]audit.Entry, len(msgs))
	for i, m := range msgs {
		entries[i] = decodeAudit(m)
	}
	return entries, next, nil
}
