package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// abandonedKey is the stream of abandoned attempts (account.
// AbandonedAttempt), the operator's side of the ledger: entry ids are the
// time each was recorded.
const abandonedKey = "gw:abandoned"

// abandonedMaxLen bounds the stream: about a month of an attempt a minute
// a key on a dozen keys, far more than a reconciliation looks back.
const abandonedMaxLen = 500_000

// RecordAbandoned appends a to the abandoned attempts.
func (s *Store) RecordAbandoned(ctx context.Context, a account.AbandonedAttempt) error {
	err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: abandonedKey,
		MaxLen: abandonedMaxLen,
		Approx: true,
		Values: []any{
			"at", ms(a.At),
			"upstream", a.Upstream,
			"vendor_key", a.VendorKey,
			"endpoint", a.Endpoint,
			"model", a.Model,
			"reason", a.Reason,
			"status", a.Status,
			"request_id", a.RequestID,
		},
	}).Err()
	if err != nil {
		return fmt.Errorf("store: record abandoned attempt: %w", err)
	}
	return nil
}

// AbandonedBetween returns the abandoned attempts recorded in [from, to),
// oldest first.
func (s *Store) AbandonedBetween(ctx context.Context, from, to time.Time) ([]account.AbandonedAttempt, error) {
	var out []account.AbandonedAttempt
	start := strconv.FormatInt(from.UnixMilli(), 10) + "-0"
	end := strconv.FormatInt(to.UnixMilli()-1, 10)
	for {
		msgs, err := s.rdb.XRangeN(ctx, abandonedKey, start, end, 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("store: abandoned attempts: %w", err)
		}
		for _, m := range msgs {
			v := m.Values
			status, _ := strconv.Atoi(str(v["status"]))
			at, _ := strconv.ParseInt(str(v["at"]), 10, 64)
			out = append(out, account.AbandonedAttempt{
				At:       time.UnixMilli(at).UTC(),
				Upstream: str(v["upstream"]), VendorKey: str(v["vendor_key"]), Endpoint: str(v["endpoint"]),
				Model: str(v["model"]), Reason: str(v["reason"]), Status: status, RequestID: str(v["request_id"]),
			})
		}
		if len(msgs) < 1000 {
			return out, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}
