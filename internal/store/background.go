package store

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// Background responses run at the vendor after their create request has
// been answered, so they cannot be settled when the request ends. The
// request's hold stays, and the request is parked: its settlement as far
// as it is known (who, which model, when) is kept in the account's
// background hash (gw:{acct:ID}:bg, one field per response id), and the
// response is put on a schedule (bgScheduleKey) of when to look at it
// next. The settlement happens when a final state of the response is seen:
// by the client's own poll or stream, or by a sidecar's reconciler polling
// the vendor when the schedule says so. Settling twice is harmless
// (settlement is idempotent by request id), so several sidecars may race.
//
// The schedule spans accounts, so like the hold index it lives outside
// every account's hash tag and is written with plain commands next to the
// account's; it is only ever scripted alone (lua/claim.lua).

// bgScheduleKey is the sorted set of parked responses, "ACCOUNT RESPONSE",
// scored by when (unix ms) a reconciler should look at each next.
const bgScheduleKey = "gw:bg:due"

//go:embed lua/claim.lua
var claimLua string

var claimScript = redis.NewScript(claimLua)

// Park keeps a background response's request until its final state is
// seen; a reconciler looks at it first at next.
func (s *Store) Park(ctx context.Context, p account.Parked, next time.Time) error {
	acct := p.Settlement.AccountID
	if !validID(acct) || p.ResponseID == "" || strings.ContainsRune(p.ResponseID, ' ') {
		return fmt.Errorf("store: park %q of %q: invalid ids", p.ResponseID, acct)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("store: park: %w", err)
	}
	if err := s.rdb.HSet(ctx, acctKey(acct, "bg"), p.ResponseID, b).Err(); err != nil {
		return fmt.Errorf("store: park: %w", err)
	}
	// Written after the record, so that a reconciler never finds a
	// scheduled response without one.
	if err := s.rdb.ZAdd(ctx, bgScheduleKey, redis.Z{Score: float64(next.UnixMilli()), Member: acct + " " + p.ResponseID}).Err(); err != nil {
		return fmt.Errorf("store: park: %w", err)
	}
	return nil
}

// Parked returns the account's parked response id, if it has one.
func (s *Store) Parked(ctx context.Context, accountID, responseID string) (account.Parked, bool, error) {
	if !validID(accountID) {
		return account.Parked{}, false, nil
	}
	b, err := s.rdb.HGet(ctx, acctKey(accountID, "bg"), responseID).Bytes()
	if errors.Is(err, redis.Nil) {
		return account.Parked{}, false, nil
	}
	if err != nil {
		return account.Parked{}, false, fmt.Errorf("store: parked: %w", err)
	}
	var p account.Parked
	if err := json.Unmarshal(b, &p); err != nil {
		return account.Parked{}, false, fmt.Errorf("store: parked %s: %w", responseID, err)
	}
	return p, true, nil
}

// Unpark forgets a parked response once its request has settled.
func (s *Store) Unpark(ctx context.Context, accountID, responseID string) error {
	if err := s.rdb.HDel(ctx, acctKey(accountID, "bg"), responseID).Err(); err != nil {
		return fmt.Errorf("store: unpark: %w", err)
	}
	if err := s.rdb.ZRem(ctx, bgScheduleKey, accountID+" "+responseID).Err(); err != nil {
		return fmt.Errorf("store: unpark: %w", err)
	}
	return nil
}

// ClaimDue takes up to limit parked responses due by now and schedules
// each again at next: until then no other reconciler takes them.
func (s *Store) ClaimDue(ctx context.Context, now, next time.Time, limit int) ([]account.BackgroundRef, error) {
	members, err := claimScript.Run(ctx, s.rdb, []string{bgScheduleKey},
		now.UnixMilli(), strconv.FormatInt(next.UnixMilli(), 10), limit).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("store: claim background responses: %w", err)
	}
	refs := make([]account.BackgroundRef, 0, len(members))
	for _, m := range members {
		acct, id, ok := strings.Cut(m, " ")
		if ok {
			refs = append(refs, account.BackgroundRef{AccountID: acct, ResponseID: id})
		}
	}
	return refs, nil
}
