package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Admit decides whether a request may start and, when it may, holds its
// worst-case cost against the account's balance until it settles or the hold
// expires. Checks run in order: expired holds are released, then the rate
// limit, the daily limit and the balance are checked. A rejected request
// leaves no trace. One round trip.
func (s *Store) Admit(ctx context.Context, a Admission) (Decision, error) {
	if a.RequestID == "" {
		return Decision{}, errors.New("store: admit: empty request id")
	}
	if a.Hold < 0 {
		return Decision{}, fmt.Errorf("store: admit %s: negative hold", a.RequestID)
	}
	if !validID(a.AccountID) {
		return Decision{}, fmt.Errorf("store: admit %s: account %q: %w", a.RequestID, a.AccountID, ErrNotFound)
	}
	now := s.now()
	id := a.AccountID
	keys := []string{
		acctKey(id, "acct"),
		acctKey(id, "holds"),
		acctKey(id, "holdexp"),
		acctKey(id, "rl"),
		acctKey(id, "day:"+dayStamp(now)),
		acctKey(id, "settled:"+a.RequestID),
		acctKey(id, "holdrec"),
	}
	started := a.StartedAt
	if started.IsZero() {
		started = now
	}
	rec, err := json.Marshal(admissionRecord{KeyID: a.KeyID, Model: a.Model, Started: started.UnixMilli(), Stream: a.Stream})
	if err != nil {
		return Decision{}, fmt.Errorf("store: admit %s: %w", a.RequestID, err)
	}
	args := []any{now.UnixMilli(), a.RequestID, a.Hold, s.opts.HoldTTL.Milliseconds(), string(rec)}
	// The sweeper's index entry rides in the same round trip; it is written
	// whatever the outcome (a refused request leaves it for the sweeper to
	// drop) because the index lives in another slot than the script's keys.
	var cmd *redis.Cmd
	// Errors are read from each command: the index write's is not the
	// admission's (the account's next admission re-adds the entry).
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = admitScript.EvalSha(ctx, p, keys, args...)
		indexHold(ctx, p, id, now.Add(s.opts.HoldTTL))
		return nil
	})
	if errNoScript(cmd.Err()) {
		cmd = admitScript.Run(ctx, s.rdb, keys, args...)
	}
	r, err := cmd.Int64Slice()
	if err != nil {
		return Decision{}, fmt.Errorf("store: admit %s: %w", a.RequestID, err)
	}
	if len(r) != 3 {
		return Decision{}, fmt.Errorf("store: admit %s: unexpected reply %v", a.RequestID, r)
	}
	d := Decision{ExpiredHolds: r[2]}
	switch r[0] {
	case -1:
		return d, fmt.Errorf("store: admit %s: account %s: %w", a.RequestID, id, ErrNotFound)
	case -2:
		return d, fmt.Errorf("store: admit %s: %w", a.RequestID, ErrDuplicateRequest)
	case 0:
		d.Outcome = Admitted
	case 1:
		d.Outcome = RateLimited
		d.RetryAfter = time.Duration(r[1]) * time.Millisecond
	case 2:
		d.Outcome = DailyLimited
		d.RetryAfter = nextMidnight(now).Sub(now)
	case 3:
		d.Outcome = InsufficientBalance
	default:
		return d, fmt.Errorf("store: admit %s: unexpected outcome %d", a.RequestID, r[0])
	}
	return d, nil
}

// nextMidnight returns the start of the UTC day after t's.
func nextMidnight(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
}

// Settle ends an admitted request: it releases the hold and, for a 2xx reply,
// charges Cost and counts usage; it always appends one ledger entry. Settling
// a RequestID again does nothing and returns applied false, so a settlement
// replayed from a spool charges exactly once, even after its hold expired.
// Usage counts towards the UTC day and month of the store's clock. One round
// trip.
func (s *Store) Settle(ctx context.Context, st Settlement) (applied bool, err error) {
	if st.RequestID == "" {
		return false, errors.New("store: settle: empty request id")
	}
	if st.Cost < 0 || st.Input < 0 || st.Output < 0 || st.CacheWrite < 0 || st.CacheRead < 0 {
		return false, fmt.Errorf("store: settle %s: negative cost or token count", st.RequestID)
	}
	if !validID(st.AccountID) {
		return false, fmt.Errorf("store: settle %s: account %q: %w", st.RequestID, st.AccountID, ErrNotFound)
	}
	now := s.now()
	id := st.AccountID
	charged := st.Status >= 200 && st.Status < 300
	cost := st.Cost
	if !charged {
		cost = 0
	}
	lastUsed := st.EndedAt
	if lastUsed.IsZero() {
		lastUsed = now
	}
	keys := []string{
		acctKey(id, "acct"),
		acctKey(id, "holds"),
		acctKey(id, "holdexp"),
		acctKey(id, "settled:"+st.RequestID),
		acctKey(id, "day:"+dayStamp(now)),
		acctKey(id, "u:d:"+dayStamp(now)),
		acctKey(id, "u:m:"+monthStamp(now)),
		acctKey(id, "u:t"),
		acctKey(id, "ledger"),
		acctKey(id, "key:"+st.KeyID),
		acctKey(id, "holdrec"),
		acctKey(id, "holdckpt"),
	}
	args := []any{
		st.RequestID,
		boolString(charged),
		cost,
		st.Input, st.Output, st.CacheWrite, st.CacheRead,
		st.Model,
		s.opts.SettledTTL.Milliseconds(),
		int64(dayKeyTTL / time.Second),
		int64(monthKeyTTL / time.Second),
		0, // unused: the ledger is trimmed after export only
		ms(lastUsed),
		// The ledger entry.
		"request_id", st.RequestID,
		"key_id", st.KeyID,
		"model", st.Model,
		"input", st.Input,
		"output", st.Output,
		"cache_write", st.CacheWrite,
		"cache_read", st.CacheRead,
		"cost", cost,
		"estimated", boolString(st.Estimated),
		"status", st.Status,
		"endpoint", st.Endpoint,
		"stream", boolString(st.Stream),
		"started", ms(st.StartedAt),
		"ended", ms(st.EndedAt),
		"interrupted", boolString(st.Interrupted),
	}
	n, err := settleScript.Run(ctx, s.rdb, keys, args...).Int64()
	if err != nil {
		return false, fmt.Errorf("store: settle %s: %w", st.RequestID, err)
	}
	if n < 0 {
		return false, fmt.Errorf("store: settle %s: account %s: %w", st.RequestID, id, ErrNotFound)
	}
	return n == 1, nil
}

// usageKey names the usage hash of period p at time now.
func usageKey(id string, p Period, now time.Time) (string, bool) {
	switch p {
	case Day:
		return acctKey(id, "u:d:"+dayStamp(now)), true
	case Month:
		return acctKey(id, "u:m:"+monthStamp(now)), true
	case Total:
		return acctKey(id, "u:t"), true
	}
	return "", false
}

// Usage reports the account's balance, limits, today's spend and its usage
// over period p, which ends now. One round trip.
func (s *Store) Usage(ctx context.Context, accountID string, p Period) (UsageReport, error) {
	if !validID(accountID) {
		return UsageReport{}, fmt.Errorf("store: usage of %q: %w", accountID, ErrNotFound)
	}
	now := s.now()
	ukey, ok := usageKey(accountID, p, now)
	if !ok {
		return UsageReport{}, fmt.Errorf("store: usage of %s: unknown period %q", accountID, p)
	}
	var (
		acct  *redis.SliceCmd
		spent *redis.StringCmd
		usage *redis.MapStringStringCmd
	)
	// All three keys share the account's slot: one round trip to one node.
	_, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		acct = pl.HMGet(ctx, acctKey(accountID, "acct"), "balance", "daily", "rpm", "window")
		spent = pl.Get(ctx, acctKey(accountID, "day:"+dayStamp(now)))
		usage = pl.HGetAll(ctx, ukey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return UsageReport{}, fmt.Errorf("store: usage of %s: %w", accountID, err)
	}
	for _, c := range []redis.Cmder{acct, spent, usage} {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return UsageReport{}, fmt.Errorf("store: usage of %s: %w", accountID, err)
		}
	}
	v := acct.Val()
	if len(v) != 4 || v[0] == nil {
		return UsageReport{}, fmt.Errorf("store: usage of %s: %w", accountID, ErrNotFound)
	}
	r := UsageReport{
		Balance: parseInt(str(v[0])),
		Limits: Limits{
			DailyNanoUSD:  parseInt(str(v[1])),
			RPM:           parseInt(str(v[2])),
			WindowMinutes: parseInt(str(v[3])),
		},
		DailyUsed: parseInt(spent.Val()),
		Period:    p,
	}
	r.Totals, r.ByModel = decodeUsage(usage.Val())
	return r, nil
}

// decodeUsage reads a usage hash of per-model counters, "m:NAME:MODEL", and
// sums them into the account's totals.
func decodeUsage(h map[string]string) (Counters, []ModelCounters) {
	models := map[string]*Counters{}
	for field, value := range h {
		rest, ok := strings.CutPrefix(field, "m:")
		if !ok {
			continue
		}
		name, model, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		c := models[model]
		if c == nil {
			c = new(Counters)
			models[model] = c
		}
		n := parseInt(value)
		switch name {
		case "requests":
			c.Requests = n
		case "input":
			c.Input = n
		case "output":
			c.Output = n
		case "cache_write":
			c.CacheWrite = n
		case "cache_read":
			c.CacheRead = n
		case "cost":
			c.Cost = n
		}
	}
	var total Counters
	byModel := make([]ModelCounters, 0, len(models))
	for m, c := range models {
		byModel = append(byModel, ModelCounters{Model: m, Counters: *c})
		total.Requests += c.Requests
		total.Input += c.Input
		total.Output += c.Output
		total.CacheWrite += c.CacheWrite
		total.CacheRead += c.CacheRead
		total.Cost += c.Cost
	}
	slices.SortFunc(byModel, func(a, b ModelCounters) int { return cmp.Compare(a.Model, b.Model) })
	return total, byModel
}

// Ledger returns up to limit of the account's ledger entries after the entry
// id after ("" for the oldest), oldest first, and the id to pass as after for
// the next page, "" when there is none. One round trip.
func (s *Store) Ledger(ctx context.Context, accountID, after string, limit int) ([]LedgerEntry, string, error) {
	if !validID(accountID) {
		return nil, "", fmt.Errorf("store: ledger of %q: %w", accountID, ErrNotFound)
	}
	var (
		exists *redis.IntCmd
		rng    *redis.XMessageSliceCmd
	)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, acctKey(accountID, "acct"))
		rng = rangeCmd(ctx, p, acctKey(accountID, "ledger"), after, limit)
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("store: ledger of %s: %w", accountID, err)
	}
	if exists.Val() == 0 {
		return nil, "", fmt.Errorf("store: ledger of %s: %w", accountID, ErrNotFound)
	}
	msgs, next := trimPage(rng.Val(), limit)
	entries := make([]LedgerEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = decodeLedger(accountID, m)
	}
	return entries, next, nil
}

func decodeLedger(accountID string, m redis.XMessage) LedgerEntry {
	v := func(f string) string { return str(m.Values[f]) }
	status, _ := strconv.Atoi(v("status"))
	return LedgerEntry{
		ID: m.ID,
		Settlement: Settlement{
			RequestID:   v("request_id"),
			AccountID:   accountID,
			KeyID:       v("key_id"),
			Model:       v("model"),
			Input:       parseInt(v("input")),
			Output:      parseInt(v("output")),
			CacheWrite:  parseInt(v("cache_write")),
			CacheRead:   parseInt(v("cache_read")),
			Cost:        parseInt(v("cost")),
			Estimated:   v("estimated") == "1",
			Interrupted: v("interrupted") == "1",
			Status:      status,
			Endpoint:    v("endpoint"),
			Stream:      v("stream") == "1",
			StartedAt:   parseMS(v("started")),
			EndedAt:     parseMS(v("ended")),
		},
	}
}

// OpenHolds returns the number and total amount of the account's recorded
// holds. Expired holds count until the sweeper settles them.
func (s *Store) OpenHolds(ctx context.Context, accountID string) (count int64, amount int64, err error) {
	if !validID(accountID) {
		return 0, 0, fmt.Errorf("store: open holds of %q: %w", accountID, ErrNotFound)
	}
	var (
		held *redis.StringCmd
		n    *redis.IntCmd
	)
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		held = p.HGet(ctx, acctKey(accountID, "acct"), "held")
		n = p.HLen(ctx, acctKey(accountID, "holds"))
		return nil
	})
	if errors.Is(held.Err(), redis.Nil) {
		return 0, 0, fmt.Errorf("store: open holds of %s: %w", accountID, ErrNotFound)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("store: open holds of %s: %w", accountID, err)
	}
	return n.Val(), parseInt(held.Val()), nil
}
