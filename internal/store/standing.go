package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// queueStanding queues, on a pipeline in the account's slot, the reads of
// what the account and its key keyID have left (account.Standing); the
// function returned decodes them once the pipeline has run. It reads what
// admit.lua reads, without writing: settled spends, the balance, holds and
// leases, and the requests in flight.
func queueStanding(ctx context.Context, p redis.Pipeliner, accountID, keyID string, now time.Time) func() account.Standing {
	day, month := dayStamp(now), monthStamp(now)
	acct := p.HMGet(ctx, acctKey(accountID, "acct"), "balance", "held", "leased", "daily", "monthly", "conc")
	daySpent := p.Get(ctx, acctKey(accountID, "day:"+day))
	monthSpent := p.Get(ctx, acctKey(accountID, "mon:"+month))
	inFlight := p.HLen(ctx, acctKey(accountID, "holds"))
	ks := p.HMGet(ctx, acctKey(accountID, "ks:"+keyID), "held", "leased", "dd", "dc", "md", "mc", "tc", "open")
	return func() account.Standing {
		a, k := acct.Val(), ks.Val()
		at := func(vs []any, i int) int64 {
			if i >= len(vs) {
				return 0
			}
			return parseInt(str(vs[i]))
		}
		s := account.Standing{
			Read: now, Day: day, Month: month,
			Balance: at(a, 0), Held: at(a, 1) + at(a, 2), Daily: at(a, 3), Monthly: at(a, 4), Concurrency: at(a, 5),
			DaySpent: parseInt(daySpent.Val()), MonthSpent: parseInt(monthSpent.Val()), InFlight: inFlight.Val(),
			KeyHeld: at(k, 0) + at(k, 1), KeyTotalSpent: at(k, 6), KeyOpen: at(k, 7),
		}
		// The key's day and month spends are kept beside their stamps.
		if len(k) > 2 && str(k[2]) == day {
			s.KeyDaySpent = at(k, 3)
		}
		if len(k) > 4 && str(k[4]) == month {
			s.KeyMonthSpent = at(k, 5)
		}
		return s
	}
}

// InFlight returns the requests in flight of the account (its open holds)
// and of its key keyID (0 unless a limit of the key counts them): what a
// request's headers read again before refusing on a concurrency limit the
// key's standing saw full.
func (s *Store) InFlight(ctx context.Context, accountID, keyID string) (acct, key int64, err error) {
	if !validID(accountID) || !validID(keyID) {
		return 0, 0, fmt.Errorf("store: in flight of %q, %q: %w", accountID, keyID, ErrNotFound)
	}
	var holds *redis.IntCmd
	var open *redis.StringCmd
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		holds = p.HLen(ctx, acctKey(accountID, "holds"))
		open = p.HGet(ctx, acctKey(accountID, "ks:"+keyID), "open")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("store: in flight of %s: %w", accountID, err)
	}
	return holds.Val(), parseInt(open.Val()), nil
}
