package store

import (
	"context"
	"fmt"
	"regexp"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/audit"
)

// secretPattern matches a credential secret, so that none reaches the audit
// stream even when a caller puts one in an entry by mistake.
var secretPattern = regexp.MustCompile(`(?:cr|ro)_[A-Za-z0-9_-]{43}`)

func redact(s string) string { return secretPattern.ReplaceAllString(s, "[redacted]") }

// AppendAudit appends e to the audit stream. Anything shaped like a secret is
// redacted first.
func (s *Store) AppendAudit(ctx context.Context, e audit.Entry) error {
	if e.At.IsZero() {
		e.At = s.now()
	}
	if r := s.opts.AuditRetention; r > 0 {
		// Exact: appends are few, and an entry past its time must go.
		minID := ms(e.At.Add(-r)) + "-0"
		if err := s.rdb.XTrimMinID(ctx, auditKey, minID).Err(); err != nil {
			return fmt.Errorf("store: trim audit: %w", err)
		}
	}
	err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: auditKey,
		MaxLen: s.opts.AuditMaxLen,
		Approx: true,
		Values: []any{
			"actor", redact(e.Actor),
			"action", redact(e.Action),
			"account_id", redact(e.AccountID),
			"key_id", redact(e.KeyID),
			"detail", redact(e.Detail),
			"origin", redact(e.Origin),
			"before", redact(e.Before),
			"after", redact(e.After),
			"outcome", e.Outcome,
			"at", ms(e.At),
		},
	}).Err()
	if err != nil {
		return fmt.Errorf("store: append audit: %w", err)
	}
	return nil
}

// Audit returns up to limit audit entries after the entry id after ("" for
// the oldest), oldest first, and the id to pass as after for the next page,
// "" when there is none.
func (s *Store) Audit(ctx context.Context, after string, limit int) ([]audit.Entry, string, error) {
	msgs, next, err := page(ctx, s.rdb, auditKey, after, limit)
	if err != nil {
		return nil, "", fmt.Errorf("store: audit: %w", err)
	}
	entries := make([]audit.Entry, len(msgs))
	for i, m := range msgs {
		entries[i] = decodeAudit(m)
	}
	return entries, next, nil
}

func decodeAudit(m redis.XMessage) audit.Entry {
	v := m.Values
	return audit.Entry{
		ID:        m.ID,
		Actor:     str(v["actor"]),
		Action:    str(v["action"]),
		AccountID: str(v["account_id"]),
		KeyID:     str(v["key_id"]),
		Detail:    str(v["detail"]),
		Origin:    str(v["origin"]),
		Before:    str(v["before"]),
		After:     str(v["after"]),
		Outcome:   str(v["outcome"]),
		At:        parseMS(str(v["at"])),
	}
}

const (
	defaultPage = 100
	maxPage     = 1000
)

// page reads up to limit entries of stream after the id after.
func page(ctx context.Context, rdb redis.Cmdable, stream, after string, limit int) ([]redis.XMessage, string, error) {
	msgs, err := rangeCmd(ctx, rdb, stream, after, limit).Result()
	if err != nil {
		return nil, "", err
	}
	msgs, next := trimPage(msgs, limit)
	return msgs, next, nil
}

// rangeCmd queues or runs the XRANGE of one page: one entry more than the
// page holds, to tell whether another page follows.
func rangeCmd(ctx context.Context, rdb redis.Cmdable, stream, after string, limit int) *redis.XMessageSliceCmd {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	return rdb.XRangeN(ctx, stream, start, "+", int64(pageSize(limit))+1)
}

func pageSize(limit int) int {
	if limit <= 0 {
		return defaultPage
	}
	return min(limit, maxPage)
}

// trimPage cuts the extra entry read by rangeCmd and returns the next cursor.
func trimPage(msgs []redis.XMessage, limit int) ([]redis.XMessage, string) {
	n := pageSize(limit)
	if len(msgs) <= n {
		return msgs, ""
	}
	msgs = msgs[:n]
	return msgs, msgs[n-1].ID
}
