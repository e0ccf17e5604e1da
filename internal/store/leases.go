package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// Leases are escrow: a slice of an account's spendable money moved out of
// the spendable pool into one sidecar's lease (lua/lease.lua), against
// which that sidecar admits requests in memory (package leases). A request
// admitted from a lease is recorded as an ordinary hold within a few
// milliseconds (lua/record.lua), moving its hold from the lease to the
// account's held sum; a settlement that arrives first settles it from the
// lease (lua/settle.lua). The sweeper returns the amount of a lease whose
// sidecar stopped renewing it (SweepHolds).
//
// Where the account or key has a request-rate limit, a lease also holds
// request slots: placeholders in the rate logs admit.lua counts, each
// replaced by the id of the request that used it when its record lands,
// so that no window holds more admissions than admit.lua allows.
//
// Where the account or key has a concurrency limit, a lease also holds
// seats: counted by admit.lua as requests in flight (the "seats" sums of
// the account and the key state), each moved into the holds hash by the
// record (or given back by the settlement) of the request that took it.
//
// Where the account or key has a tokens-per-minute limit, a lease also
// holds tokens: counted as held in a future bucket of the token windows
// admit.lua counts, each request using them recorded as held there (its
// bound), so that no window counts more than admit.lua allows.
//
// Where the key's project has limits, a lease counts against them as
// against the key's: its amount is in the project state's "leased" sum
// (a spend budget), its slots in the project's rate log, its seats in the
// project state's "seats", its tokens in the project's token window.

// LeaseBitsTTL is how long a lease's bitmap of recorded requests is kept
// after its last use: as long as a swept record, so that a spooled
// settlement replayed within it is applied once.
const LeaseBitsTTL = 7 * 24 * time.Hour

// validLeaseID reports whether id can name a lease: the characters of an
// id and dots, at most 128 bytes.
func validLeaseID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// TokenBucket is the 5 s bucket of the token windows (admit.lua) t is in:
// the unit of account.LeaseResult.TokenBucket and account.LeaseRef.Bucket.
func TokenBucket(t time.Time) int64 { return t.UnixMilli() / tokenBucketMs }

// Leases runs lease calls in one pipelined round trip (one script call per
// lease), each lease renewed to expire one HoldLease from now; the
// sweeper's index learns of each account.
func (s *Store) Leases(ctx context.Context, calls []account.LeaseCall) []account.LeaseResult {
	res := make([]account.LeaseResult, len(calls))
	if len(calls) == 0 {
		return res
	}
	now := s.now()
	expiry := now.Add(s.opts.HoldTTL)
	cmds := make([]*redis.Cmd, len(calls))
	keys := make([][]string, len(calls))
	args := make([][]any, len(calls))
	pipe := s.rdb.Pipeline()
	for i, c := range calls {
		if !validID(c.AccountID) || !validID(c.KeyID) || !validLeaseID(c.LeaseID) || c.Free < 0 || c.Want < 0 || c.Share < 1 || c.FreeSeats < 0 || c.FreeTokens < 0 {
			res[i].Err = fmt.Errorf("store: lease %q of %q: invalid call", c.LeaseID, c.AccountID)
			continue
		}
		keys[i], args[i] = s.leaseCall(c, now, expiry, c.Free)
		cmds[i] = leaseScript.EvalSha(ctx, pipe, keys[i], args[i]...)
		indexHold(ctx, pipe, c.AccountID, expiry)
	}
	pipe.Exec(ctx)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if errNoScript(cmd.Err()) {
			cmd = leaseScript.Run(ctx, s.rdb, keys[i], args[i]...)
		}
		v, err := cmd.Int64Slice()
		if err == nil && len(v) != 9 {
			err = fmt.Errorf("unexpected reply %v", v)
		}
		if err != nil {
			res[i].Err = fmt.Errorf("store: lease %s of %s: %w", calls[i].LeaseID, calls[i].AccountID, err)
			continue
		}
		res[i] = account.LeaseResult{Delta: v[0], Reason: int(v[1]), Hi: v[2], Rates: int(v[3]), Seats: v[4], Seated: int(v[5]),
			Tokens: v[6], TokenLevels: int(v[7]), TokenBucket: v[8]}
	}
	return res
}

// leaseCall builds lease.lua's KEYS and ARGV; free -1 sweeps.
func (s *Store) leaseCall(c account.LeaseCall, now, expiry time.Time, free int64) ([]string, []any) {
	id := c.AccountID
	keys := []string{
		acctKey(id, "acct"),
		acctKey(id, "leases"),
		acctKey(id, "ks:"+c.KeyID),
		acctKey(id, "day:"+dayStamp(now)),
		acctKey(id, "mon:"+monthStamp(now)),
		acctKey(id, "key:"+c.KeyID),
		acctKey(id, "rl"),
		acctKey(id, "krl:"+c.KeyID),
		acctKey(id, "holds"),
	}
	projectID, pl := LeaseProject(c.ProjectID, c.ProjectLimits)
	keys = append(keys, acctKey(id, "ps:"+projectID), acctKey(id, "prl:"+projectID))
	kl := c.KeyLimits
	args := []any{now.UnixMilli(), expiry.UnixMilli(), c.LeaseID, c.KeyID, free, c.Want, c.Min, max(c.Share, 1),
		kl.RPM, kl.TPM, kl.Concurrency, kl.DailyNanoUSD, kl.MonthlyNanoUSD, kl.TotalNanoUSD,
		dayStamp(now), monthStamp(now), kl.WindowMinutes, max(c.Cursor, 1), c.WantSlots, c.MinSlots,
		c.FreeSeats, c.WantSeats, c.MinSeats, c.FreeTokens, c.WantTokens, c.MinTokens, boolString(c.Taken),
		projectID, pl.DailyNanoUSD, pl.MonthlyNanoUSD, pl.TotalNanoUSD, pl.RPM, pl.TPM, pl.Concurrency, pl.WindowMinutes}
	return keys, args
}

// LeaseProject is the project a lease of a key in project id, with limits
// l, counts against, and its limits: none ("") for the default project
// and a project without limits, as admission counts them.
func LeaseProject(id string, l account.Limits) (string, account.Limits) {
	if !namedProject(id) || l.IsZero() {
		return "", account.Limits{}
	}
	return id, l
}

// sweepLease returns an expired lease's amount and seats to its account
// (the lease's sidecar stopped renewing it); a lease renewed meanwhile is
// left alone. It returns the amount.
func (s *Store) sweepLease(ctx context.Context, accountID, leaseID, keyID string, now time.Time) (int64, error) {
	if !validLeaseID(leaseID) {
		return 0, s.rdb.HDel(ctx, acctKey(accountID, "leases"), leaseID).Err()
	}
	if !validID(keyID) {
		keyID = ""
	}
	// The project the lease counts against, named in its field: a lease's
	// project never changes, so it is still the same when the script runs.
	// Its limits are passed only to say that it has some.
	v, err := s.rdb.HGet(ctx, acctKey(accountID, "leases"), leaseID).Result()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("sweep lease %s: %w", leaseID, err)
	}
	c := account.LeaseCall{AccountID: accountID, KeyID: keyID, LeaseID: leaseID, Share: 1}
	if p := leaseFieldProject(v); p != "" {
		c.ProjectID, c.ProjectLimits = p, account.Limits{TotalNanoUSD: 1}
	}
	keys, args := s.leaseCall(c, now, now, -1)
	r, err := leaseScript.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("sweep lease %s: %w", leaseID, err)
	}
	if len(r) != 9 {
		return 0, fmt.Errorf("sweep lease %s: unexpected reply %v", leaseID, r)
	}
	return r[0], nil
}

// leaseFieldProject is the project a lease counts against, from its field
// of the leases hash (lua/leasefield.lua: the 14th word): "" for none, and
// for a lease written before projects.
func leaseFieldProject(v string) string {
	f := strings.Split(v, " ")
	if len(f) < 14 {
		return ""
	}
	return f[13]
}

// RecordLeased records the holds of requests admitted from leases, each at
// most once: one script call per lease, in one pipelined round trip. It
// returns the first error; a call that failed may be made again (recording
// is idempotent).
func (s *Store) RecordLeased(ctx context.Context, rs []account.LeasedRequest) error {
	if len(rs) == 0 {
		return nil
	}
	now := s.now()
	expiry := now.Add(s.opts.HoldTTL)
	type call struct {
		keys []string
		args []any
		cmd  *redis.Cmd
	}
	byLease := map[string]*call{}
	var order []*call
	accounts := map[string]bool{}
	for _, r := range rs {
		a := r.Admission
		if !validID(a.AccountID) || !validLeaseID(r.Lease.ID) || a.RequestID == "" {
			continue
		}
		c := byLease[r.Lease.ID]
		if c == nil {
			keyID := a.KeyID
			if !validID(keyID) {
				keyID = ""
			}
			// The lease's project, whose state and rate log its requests'
			// records touch (a lease counts against its key's project).
			projectID, _ := LeaseProject(a.ProjectID, a.ProjectLimits)
			c = &call{
				keys: []string{acctKey(a.AccountID, "acct"), acctKey(a.AccountID, "holds"), acctKey(a.AccountID, "leases"),
					acctKey(a.AccountID, "lbits:"+r.Lease.ID), acctKey(a.AccountID, "ks:"+keyID),
					acctKey(a.AccountID, "rl"), acctKey(a.AccountID, "krl:"+keyID), acctKey(a.AccountID, "ps:"+projectID),
					acctKey(a.AccountID, "prl:"+projectID)},
				args: []any{r.Lease.ID, expiry.UnixMilli(), int64(LeaseBitsTTL / time.Second), boolString(r.KeyCounted),
					r.Rates, max(a.KeyLimits.WindowMinutes, a.ProjectLimits.WindowMinutes)},
			}
			byLease[r.Lease.ID] = c
			order = append(order, c)
			accounts[a.AccountID] = true
		}
		started := a.StartedAt
		if started.IsZero() {
			started = now
		}
		rec, err := json.Marshal(admissionRecord{KeyID: a.KeyID, ProjectID: a.ProjectID, Priced: a.Priced, Requested: a.Requested, Started: started.UnixMilli(), Stream: a.Stream, Transport: a.Transport})
		if err != nil {
			return fmt.Errorf("store: record %s: %w", a.RequestID, err)
		}
		// admit.lua's prefix: the token windows its bound is held in, in
		// the bucket of the lease's tokens it used (0: none).
		kc, ta, tk, tp := 0, int64(0), int64(0), int64(0)
		if r.KeyCounted {
			kc = 1
		}
		if r.Lease.Tokens > 0 {
			if r.Lease.TokenLevels&account.LevelAccount != 0 {
				ta = r.Lease.Bucket
			}
			if r.Lease.TokenLevels&account.LevelKey != 0 {
				tk = r.Lease.Bucket
			}
			if r.Lease.TokenLevels&account.LevelProject != 0 {
				tp = r.Lease.Bucket
			}
		}
		record := fmt.Sprintf(`{"tb":%d,"ta":%d,"tk":%d,"kc":%d`, min(a.Tokens, 1<<53), ta, tk, kc)
		if r.ProjectCounted && namedProject(a.ProjectID) {
			// admit.lua's project part: the bucket of the project's tokens
			// it used (0: none), counted in its held and open.
			record += fmt.Sprintf(`,"tp":%d,"pc":1`, tp)
		}
		if rest := string(rec[1:]); rest != "}" {
			record += "," + rest
		} else {
			record += rest
		}
		at := r.At
		if at.IsZero() {
			at = started
		}
		c.args = append(c.args, a.RequestID, r.Lease.Seq, r.Lease.Hold, record, max(r.Slot, 0), at.UnixMilli())
	}
	pipe := s.rdb.Pipeline()
	for _, c := range order {
		c.cmd = recordScript.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	for id := range accounts {
		indexHold(ctx, pipe, id, expiry)
	}
	pipe.Exec(ctx)
	for _, c := range order {
		err := c.cmd.Err()
		if errNoScript(err) {
			err = recordScript.Run(ctx, s.rdb, c.keys, c.args...).Err()
		}
		if err != nil {
			return fmt.Errorf("store: record leased holds: %w", err)
		}
	}
	return nil
}

// Leased returns the account's leases: amount by lease id.
func (s *Store) Leased(ctx context.Context, accountID string) (map[string]int64, error) {
	if !validID(accountID) {
		return nil, fmt.Errorf("store: leases of %q: %w", accountID, ErrNotFound)
	}
	m, err := s.rdb.HGetAll(ctx, acctKey(accountID, "leases")).Result()
	if err != nil {
		return nil, fmt.Errorf("store: leases of %s: %w", accountID, err)
	}
	out := make(map[string]int64, len(m))
	for id, v := range m {
		a, _, _ := cutSpace(v)
		out[id] = parseInt(a)
	}
	return out, nil
}

func cutSpace(v string) (string, string, bool) {
	for i := 0; i < len(v); i++ {
		if v[i] == ' ' {
			return v[:i], v[i+1:], true
		}
	}
	return v, "", false
}
