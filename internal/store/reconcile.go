package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The continuous reconciliation's state, under one hash tag so that a
// window's result and the cursor move in one transaction on a Redis
// Cluster too: the lease of the one runner across sidecars, the cursor
// (the start of the next window to reconcile, per bucket width) and each
// window's result, kept as the runner wrote it.
const reconcileTag = "gw:{reconcile}:"

// reconcileKeep is how long a window's result is kept.
const reconcileKeep = 90 * 24 * time.Hour

var reconcileLeaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == false or cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0`)

// ReconcileLease takes or renews the runner's lease for holder, for ttl;
// false when another holder has it.
func (s *Store) ReconcileLease(ctx context.Context, holder string, ttl time.Duration) (bool, error) {
	n, err := reconcileLeaseScript.Run(ctx, s.rdb, []string{reconcileTag + "lease"}, holder, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("store: reconcile lease: %w", err)
	}
	return n == 1, nil
}

// ReconcileCursor returns the start of the next window of width to
// reconcile; zero when none was reconciled yet.
func (s *Store) ReconcileCursor(ctx context.Context, width string) (time.Time, error) {
	v, err := s.rdb.Get(ctx, reconcileTag+"cursor:"+width).Result()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("store: reconcile cursor: %w", err)
	}
	return parseMS(v), nil
}

// ReconcileWindow keeps the result of the window of width starting at
// start and moves the cursor to next, in one transaction: a window is
// written again (the same result) rather than skipped when a run stops
// between the two.
func (s *Store) ReconcileWindow(ctx context.Context, width string, start, next time.Time, result []byte) error {
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, windowKey(width, start), result, reconcileKeep)
		idx := reconcileTag + "windows:" + width
		p.ZAdd(ctx, idx, redis.Z{Score: float64(start.UnixMilli()), Member: ms(start)})
		p.ZRemRangeByScore(ctx, idx, "-inf", "("+strconv.FormatInt(start.Add(-reconcileKeep).UnixMilli(), 10))
		p.Set(ctx, reconcileTag+"cursor:"+width, ms(next), 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: reconcile window %s: %w", start.UTC().Format(time.RFC3339), err)
	}
	return nil
}

// ReconcileWindows returns the kept results of the windows of width that
// start in [from, to), by start: two round trips whatever their number.
func (s *Store) ReconcileWindows(ctx context.Context, width string, from, to time.Time) (map[time.Time][]byte, error) {
	starts, err := s.rdb.ZRangeByScore(ctx, reconcileTag+"windows:"+width, &redis.ZRangeBy{
		Min: strconv.FormatInt(from.UnixMilli(), 10), Max: "(" + strconv.FormatInt(to.UnixMilli(), 10),
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("store: reconcile windows: %w", err)
	}
	times := make([]time.Time, len(starts))
	cmds := make([]*redis.StringCmd, len(starts))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, st := range starts {
			times[i] = parseMS(st)
			cmds[i] = p.Get(ctx, windowKey(width, times[i]))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("store: reconcile window: %w", err)
	}
	out := make(map[time.Time][]byte, len(starts))
	for i, c := range cmds {
		b, err := c.Bytes()
		if errors.Is(err, redis.Nil) {
			continue // expired
		}
		if err != nil {
			return nil, fmt.Errorf("store: reconcile window: %w", err)
		}
		out[times[i]] = b
	}
	return out, nil
}

func windowKey(width string, start time.Time) string {
	return reconcileTag + "window:" + width + ":" + ms(start)
}
