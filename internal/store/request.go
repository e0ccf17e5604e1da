package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

// Admit decides whether a request may start and, when it may, holds its
// worst-case cost against the account's balance until it settles or the hold
// lease runs out (the sweeper then settles it as interrupted). Checks run in
// order: the rate limit, the daily limit and the balance. The admission
// record (what the sweeper settles with) is kept with the hold. One round
// trip: the sweeper's index entry rides in the same pipeline.
func (s *Store) Admit(ctx context.Context, a *account.Admission) (account.Decision, error) {
	// Three steps, each its own function taking a by address, so that only
	// Admit's small frame stays on the stack under the round trip: the
	// request's goroutine keeps its deepest stack for as long as its
	// stream is open.
	now := s.now()
	keys, args, err := s.admitCall(a, now)
	if err != nil {
		return account.Decision{}, err
	}
	r, err := s.runAdmit(ctx, a.AccountID, now, keys, args)
	return decodeAdmit(a, now, r, err)
}

// admitCall checks an admission and builds admit.lua's KEYS and ARGV.
//
//go:noinline
func (s *Store) admitCall(a *account.Admission, now time.Time) ([]string, []any, error) {
	if a.RequestID == "" {
		return nil, nil, errors.New("store: admit: empty request id")
	}
	if a.Hold < 0 {
		return nil, nil, fmt.Errorf("store: admit %s: negative hold", a.RequestID)
	}
	if !validID(a.AccountID) {
		return nil, nil, fmt.Errorf("store: admit %s: account %q: %w", a.RequestID, a.AccountID, ErrNotFound)
	}
	id := a.AccountID
	if a.Tokens < 0 {
		return nil, nil, fmt.Errorf("store: admit %s: negative token bound", a.RequestID)
	}
	hasKey := validID(a.KeyID)
	// Without a key, its two KEYS name an unused key of the account's slot.
	keyID := a.KeyID
	if !hasKey {
		keyID = ""
	}
	keys := []string{
		acctKey(id, "acct"),
		acctKey(id, "holds"),
		acctKey(id, "rl"),
		acctKey(id, "day:"+dayStamp(now)),
		acctKey(id, "mon:"+monthStamp(now)),
		acctKey(id, "krl:"+keyID),
		acctKey(id, "ks:"+keyID),
	}
	// The project's two KEYS, used only while it has a limit.
	hasProject := hasKey && !a.ProjectLimits.IsZero() && namedProject(a.ProjectID)
	projectID := ""
	if hasProject {
		projectID = a.ProjectID
	}
	keys = append(keys, acctKey(id, "prl:"+projectID), acctKey(id, "ps:"+projectID))
	started := a.StartedAt
	if started.IsZero() {
		started = now
	}
	rec, err := json.Marshal(admissionRecord{KeyID: a.KeyID, ProjectID: a.ProjectID, Priced: a.Priced, Requested: a.Requested, Started: started.UnixMilli(), Stream: a.Stream, Transport: a.Transport})
	if err != nil {
		return nil, nil, fmt.Errorf("store: admit %s: %w", a.RequestID, err)
	}
	kl := a.KeyLimits
	// Lua compares numbers as doubles: a bound beyond 2^53 is beyond any
	// limit anyway.
	tokens := min(a.Tokens, 1<<53)
	args := []any{now.UnixMilli(), a.RequestID, a.Hold, s.opts.HoldTTL.Milliseconds(), string(rec),
		tokens, boolString(hasKey),
		kl.RPM, kl.WindowMinutes, kl.TPM, kl.Concurrency, kl.DailyNanoUSD, kl.MonthlyNanoUSD, kl.TotalNanoUSD,
		dayStamp(now), monthStamp(now)}
	pl := a.ProjectLimits
	if !hasProject {
		pl = account.Limits{}
	}
	args = append(args, boolString(hasProject),
		pl.RPM, pl.WindowMinutes, pl.TPM, pl.Concurrency, pl.DailyNanoUSD, pl.MonthlyNanoUSD, pl.TotalNanoUSD)
	return keys, args, nil
}

// runAdmit runs admit.lua.
//
//go:noinline
func (s *Store) runAdmit(ctx context.Context, id string, now time.Time, keys []string, args []any) ([]int64, error) {
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
	return cmd.Int64Slice()
}

// decodeAdmit reads admit.lua's reply (or its error).
func decodeAdmit(a *account.Admission, now time.Time, r []int64, err error) (account.Decision, error) {
	if err != nil {
		return account.Decision{}, fmt.Errorf("store: admit %s: %w", a.RequestID, err)
	}
	id := a.AccountID
	if len(r) != 7 {
		return account.Decision{}, fmt.Errorf("store: admit %s: unexpected reply %v", a.RequestID, r)
	}
	d := account.Decision{Level: account.Level(r[2]), Limit: r[3], Used: r[4], Held: r[5], Request: r[6]}
	switch r[0] {
	case -1:
		return account.Decision{}, fmt.Errorf("store: admit %s: account %s: %w", a.RequestID, id, ErrNotFound)
	case -2:
		return account.Decision{}, fmt.Errorf("store: admit %s: %w", a.RequestID, ErrDuplicateRequest)
	case 0:
		d.Outcome = account.Admitted
	case 1:
		d.Outcome = account.RateLimited
		d.RetryAfter = time.Duration(r[1]) * time.Millisecond
	case 2:
		d.Outcome = account.DailyLimited
		d.RetryAfter = account.NextDay(now).Sub(now)
	case 3:
		d.Outcome = account.InsufficientBalance
	case 4:
		d.Outcome = account.TokenLimited
		if r[1] > 0 {
			d.RetryAfter = time.Duration(r[1]) * time.Millisecond
		}
	case 5:
		d.Outcome = account.ConcurrencyLimited
		d.RetryAfter = time.Duration(r[1]) * time.Millisecond
	case 6:
		d.Outcome = account.MonthlyLimited
		d.RetryAfter = account.NextMonth(now).Sub(now)
	case 7:
		d.Outcome = account.TotalLimited
	default:
		return account.Decision{}, fmt.Errorf("store: admit %s: unexpected outcome %d", a.RequestID, r[0])
	}
	return d, nil
}

// Settle ends an admitted request: it releases the hold and, for a 2xx reply,
// charges Cost and counts usage; it always appends one ledger entry. Only a
// held request settles, and settling removes the hold: settling a RequestID
// again does nothing and returns applied false, so a settlement replayed from
// a spool charges exactly once. A request the sweeper settled first (its
// lease ran out while its sidecar could not reach Redis) is reconciled: the
// difference from what the sweep charged is posted once, flagged
// reconciled, within Options.SweptRecordTTL of the sweep.
// Usage counts towards the UTC day and month of the store's clock. One round
// trip.
func (s *Store) Settle(ctx context.Context, st account.Settlement) (applied bool, err error) {
	r := s.SettleBatch(ctx, []account.Settlement{st})[0]
	return r.Applied, r.Err
}

// maxSettleGroup bounds the requests of one account's part of a script
// call.
const maxSettleGroup = 64

// maxSettleCall bounds the requests of one script call, so that one call
// never holds Redis for long.
const maxSettleCall = 128

// maxGroupCost bounds the sum of the costs of one account's part of a
// script call (see MaxNanoUSD).
const maxGroupCost = 1 << 52

// SettleBatch settles many requests, of any accounts, as Settle would each:
// atomically and at most once. The requests of one account go to one part
// of a script call (settle.lua), which writes what adds up (balance, usage
// counters, last_used) once for all of them; the accounts of one Redis
// Cluster slot (of all of them, on a server that is not a cluster) go to
// one script call (settlebatch.lua), and the calls go in one pipelined
// round trip (one per Cluster node). Results are in the order of sts.
func (s *Store) SettleBatch(ctx context.Context, sts []account.Settlement) []ledger.SettleResult {
	res := make([]ledger.SettleResult, len(sts))
	// Group by account, keeping each account's order.
	var groups [][]int
	var sums []int64 // the costs of each group
	byAccount := map[string]int{}
	for i, st := range sts {
		if err := CheckSettlement(st); err != nil {
			res[i].Err = err
			continue
		}
		// The script sums a group's costs in Lua numbers: a group's sum
		// stays within 2^52, where they are exact (a reconciliation's
		// difference adds at most one more cost).
		g, ok := byAccount[st.AccountID]
		if !ok || len(groups[g]) == maxSettleGroup || sums[g]+st.Cost > maxGroupCost {
			g = len(groups)
			groups = append(groups, nil)
			sums = append(sums, 0)
			byAccount[st.AccountID] = g
		}
		groups[g] = append(groups[g], i)
		sums[g] += st.Cost
	}
	if len(groups) == 0 {
		return res
	}
	_, cluster := s.rdb.(*redis.ClusterClient)
	calls := s.settleCalls(sts, groups, cluster)
	pipe := s.rdb.Pipeline()
	for i := range calls {
		c := &calls[i]
		c.cmd = redis.NewCmd(ctx, c.command...)
		c.cmd.SetFirstKeyPos(3)
		pipe.Process(ctx, c.cmd)
	}
	pipe.Exec(ctx) // errors are read per command below
	members := make([]account.Settlement, 0, maxSettleGroup)
	defer func() {
		for _, c := range calls {
			reuseSettleCommand(c.command)
		}
	}()
	for _, c := range calls {
		cmd := c.cmd
		if errNoScript(cmd.Err()) {
			// A server that lost its script cache (a restart, a failover):
			// Run loads the script again.
			cmd = settleScript.Run(ctx, s.rdb, c.keys, c.args...)
		}
		replies, err := cmd.Slice()
		if err == nil && len(replies) != len(c.groups) {
			err = fmt.Errorf("unexpected reply of %d parts for %d accounts", len(replies), len(c.groups))
		}
		for j, g := range c.groups {
			members = members[:0]
			for _, i := range groups[g] {
				members = append(members, sts[i])
			}
			var r []int64
			gerr := err
			if gerr == nil {
				r, gerr = groupReply(replies[j])
			}
			out := settleReplies(members, r, gerr)
			s.markUsed(members, out)
			for m, i := range groups[g] {
				res[i] = out[m]
			}
		}
	}
	return res
}

// settleCallArgs is one script call of a batch: the groups it settles
// (indexes into SettleBatch's groups), its KEYS and ARGV, and the whole
// EVALSHA command (the command name, the script's hash, the count of
// KEYS, KEYS, then ARGV, which args is the tail of), built in place so
// that no copy of a batch's arguments is made to send it.
type settleCallArgs struct {
	groups  []int
	keys    []string
	args    []any
	command []any
	cmd     *redis.Cmd
}

// settleCalls packs groups into script calls: on a cluster, one call per
// slot of the groups' accounts (a script's keys are all in one slot), on
// any other server one call for all, each call at most maxSettleCall
// requests.
func (s *Store) settleCalls(sts []account.Settlement, groups [][]int, cluster bool) []settleCallArgs {
	var calls []settleCallArgs
	var sizes []int       // requests per call
	open := map[int]int{} // slot -> its open call
	for g, idx := range groups {
		slot := 0
		if cluster {
			slot = accountSlot(sts[idx[0]].AccountID)
		}
		c, ok := open[slot]
		if !ok || sizes[c]+len(idx) > maxSettleCall {
			c = len(calls)
			calls = append(calls, settleCallArgs{})
			sizes = append(sizes, 0)
			open[slot] = c
		}
		calls[c].groups = append(calls[c].groups, g)
		sizes[c] += len(idx)
	}
	members := make([]account.Settlement, 0, maxSettleGroup)
	for i := range calls {
		c := &calls[i]
		// ARGV is built after room for the most KEYS the call's groups
		// can have, then moved down next to them.
		room := 0
		for _, g := range c.groups {
			room += settleKeysMax(len(groups[g]))
		}
		base := 3 + room
		c.command = settleCommand(base, base+9*len(c.groups)+sizes[i]*settleArgsPerRequest+1+2*len(c.groups))
		// Each group's KEYS and ARGV are appended in place; the counts of
		// each group's KEYS and ARGV, and of groups, follow them.
		counts := make([]any, 0, 1+2*len(c.groups))
		for _, g := range c.groups {
			members = members[:0]
			for _, m := range groups[g] {
				members = append(members, sts[m])
			}
			k0, a0 := len(c.keys), len(c.command)
			c.keys, c.command = s.settleCall(c.keys, c.command, members)
			counts = append(counts, len(c.keys)-k0, len(c.command)-a0)
		}
		c.command = append(append(c.command, counts...), len(c.groups))
		nk := len(c.keys)
		if extra := nk - room; extra > 0 {
			// More KEYS than settleKeysMax says: no ARGV is overwritten.
			c.command = slices.Insert(c.command, base, make([]any, extra)...)
			base += extra
		}
		end := copy(c.command[3+nk:], c.command[base:])
		clear(c.command[3+nk+end:])
		c.command = c.command[:3+nk+end]
		c.command[0], c.command[1], c.command[2] = "evalsha", settleScript.Hash(), nk
		for k, key := range c.keys {
			c.command[3+k] = key
		}
		c.args = c.command[3+nk:]
	}
	return calls
}

// settleCommands keeps the script calls' argument slices for the next
// batch: a call sized for its requests' most ARGV is about 2.6 KB a
// request, allocated at every batch otherwise.
var settleCommands sync.Pool

// settleCommand is a command slice of length n and at least capacity
// room, reused when one is kept. A new one is made a power of two long:
// batches differ in size by a request or two, and a slice made to measure
// would be too short for the next, larger one and be dropped.
func settleCommand(n, room int) []any {
	if p, ok := settleCommands.Get().(*[]any); ok {
		if cap(*p) >= room {
			return (*p)[:n]
		}
		room = max(room, 2*cap(*p))
	}
	return make([]any, n, 1<<bits.Len(uint(room-1)))
}

// reuseSettleCommand keeps cmd for another batch once its call has been
// answered, its values cleared (they hold the batch's strings).
func reuseSettleCommand(cmd []any) {
	cmd = cmd[:cap(cmd)]
	clear(cmd)
	settleCommands.Put(&cmd)
}

// groupReply reads one account's part of the batch script's reply:
// settle.lua's list of results, or {-2, message} for an error it raised.
func groupReply(v any) ([]int64, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	if len(l) == 2 && l[0] == int64(-2) {
		return nil, fmt.Errorf("settle.lua: %v", l[1])
	}
	r := make([]int64, len(l))
	for i, e := range l {
		if r[i], ok = e.(int64); !ok {
			return nil, fmt.Errorf("unexpected reply %v", l)
		}
	}
	return r, nil
}

// settleReplies reads the settlement script's reply for a group.
func settleReplies(group []account.Settlement, r []int64, err error) []ledger.SettleResult {
	res := make([]ledger.SettleResult, len(group))
	for i, st := range group {
		switch {
		case err != nil:
			res[i].Err = fmt.Errorf("store: settle %s: %w", st.RequestID, err)
		case len(r) == 1 && r[0] == -1:
			res[i].Err = fmt.Errorf("store: settle %s: account %s: %w", st.RequestID, st.AccountID, ErrNotFound)
		case len(r) != len(group):
			res[i].Err = fmt.Errorf("store: settle %s: unexpected reply %v", st.RequestID, r)
		default:
			res[i].Applied = r[i] == 1 || r[i] == 2
			res[i].Reconciled = r[i] == 2
		}
	}
	return res
}

// CheckSettlement refuses what the store would never apply, whatever its
// state (the spool uses it so that no such record waits for a replay).
func CheckSettlement(st account.Settlement) error {
	if st.RequestID == "" {
		return errors.New("store: settle: empty request id")
	}
	if st.Cost < 0 || !st.Usage.Valid() || !st.Rates.Valid() {
		return fmt.Errorf("store: settle %s: negative cost or token count", st.RequestID)
	}
	if st.Cost > MaxNanoUSD {
		return fmt.Errorf("store: settle %s: cost: %w", st.RequestID, ErrTooLarge)
	}
	if !validID(st.AccountID) {
		return fmt.Errorf("store: settle %s: account %q: %w", st.RequestID, st.AccountID, ErrNotFound)
	}
	return nil
}

// settleCall appends settle.lua's KEYS and ARGV for a group of checked
// settlements of one account to keys and args.
func (s *Store) settleCall(keys []string, args []any, group []account.Settlement) ([]string, []any) {
	now := s.now()
	id := group[0].AccountID
	keys = append(keys,
		acctKey(id, "acct"),
		acctKey(id, "holds"),
		acctKey(id, "day:"+dayStamp(now)),
		acctKey(id, "u:d:"+dayStamp(now)),
		acctKey(id, "u:t"),
		acctKey(id, "ledger"),
		acctKey(id, "mon:"+monthStamp(now)),
	)
	// A credential's last_used is written once a minute at most: one
	// already written for the minute of its use is left out of the call.
	keyIndex := map[string]int{}
	for _, st := range group {
		if _, ok := keyIndex[st.KeyID]; !ok && validID(st.KeyID) && !s.lastUsed.written(st.KeyID, usedMinute(st, now)) {
			keyIndex[st.KeyID] = len(keyIndex) + 1
			keys = append(keys, acctKey(id, "key:"+st.KeyID))
		}
	}
	for _, st := range group {
		keys = append(keys, acctKey(id, "swept:"+st.RequestID))
	}
	// Every credential of the batch has its state (in flight, spend), and
	// so has every project named (the default project's spend is the
	// account's less theirs): both kinds are states of settle.lua, named
	// "ks:KEYID" and "ps:PROJECTID".
	// The index is keyed by prefix and id apart, so that looking a
	// request's states up below builds no string.
	type stateName struct{ prefix, id string }
	stateIndex := map[stateName]int{}
	addState := func(name stateName) {
		if _, ok := stateIndex[name]; !ok {
			stateIndex[name] = len(stateIndex) + 1
		}
	}
	for _, st := range group {
		if validID(st.KeyID) {
			addState(stateName{"ks:", st.KeyID})
		}
		if namedProject(st.ProjectID) {
			addState(stateName{"ps:", st.ProjectID})
		}
	}
	states := make([]string, len(stateIndex))
	for k, i := range stateIndex {
		states[i-1] = acctKey(id, k.prefix+k.id)
	}
	keys = append(keys, states...)
	// The leases the batch's requests were admitted from: the leases hash,
	// then each lease's bitmap.
	leaseIndex := map[string]int{}
	for _, st := range group {
		if _, ok := leaseIndex[st.Lease.ID]; !ok && validLeaseID(st.Lease.ID) {
			if len(leaseIndex) == 0 {
				keys = append(keys, acctKey(id, "leases"))
			}
			leaseIndex[st.Lease.ID] = len(leaseIndex) + 1
			keys = append(keys, acctKey(id, "lbits:"+st.Lease.ID))
		}
	}
	args = slices.Grow(args, 9+len(group)*settleArgsPerRequest)
	args = append(args, len(group), len(keyIndex), int64(dayKeyTTL/time.Second), int64(s.opts.SweptRecordTTL/time.Second),
		len(stateIndex), dayStamp(now), monthStamp(now), int64(monthKeyTTL/time.Second), len(leaseIndex))
	for _, st := range group {
		charged := st.Status >= 200 && st.Status < 300
		cost := st.Cost
		var tokens int64
		if charged {
			// What a tokens-per-minute limit counts: every input and
			// output token; none for a reply that is not charged.
			tokens = st.Usage.Tokens()
		} else {
			cost = 0
		}
		// Only the sweeper settles a request as interrupted: its charge is
		// recorded, to be reconciled with a later settlement.
		args = append(args, st.RequestID, boolString(charged), boolString(st.Interrupted), cost, string(st.Priced), keyIndex[st.KeyID], ms(lastUsedAt(st, now)),
			stateIndex[stateName{"ks:", st.KeyID}], tokens, leaseIndex[st.Lease.ID], st.Lease.Seq, st.Lease.Hold,
			st.Lease.Tokens, st.Lease.Bucket, st.Lease.TokenLevels)
		args = appendCounters(args, st, cost)
		args = appendLedger(args, st, cost)
		args = append(args, stateIndex[stateName{"ps:", st.ProjectID}])
	}
	return keys, args
}

// settleKeysMax is the most KEYS settleCall gives a group of n requests:
// seven, the leases hash, and per request at most its credential, its
// sweep record, its credential's state, its project's state and its
// lease's bitmap.
func settleKeysMax(n int) int { return 8 + 5*n }

// settleArgsPerRequest is the most ARGV one request takes (a charged
// settlement with every field set; TestSettleArgsPerRequest): fifteen of
// its own, its counters and its ledger fields, each with their count.
const settleArgsPerRequest = 164

// lastUsedAt is when a settlement's credential was last used: when its
// request ended.
func lastUsedAt(st account.Settlement, now time.Time) time.Time {
	if st.EndedAt.IsZero() {
		return now
	}
	return st.EndedAt
}

// usedMinute is the minute (unix minutes) of a settlement's credential use.
func usedMinute(st account.Settlement, now time.Time) int64 {
	return lastUsedAt(st, now).Unix() / 60
}

// usedMinutes remembers, per credential, the latest minute whose last_used
// this store has written, so that settlement writes it once a minute at
// most. Only the last few minutes are kept: an older use is not written
// again anyway (last_used never moves back).
type usedMinutes struct {
	mu     sync.Mutex
	m      map[string]int64 // key id -> unix minute
	pruned int64            // the minute of the last pruning
}

// usedMinutesKept is how many minutes back an entry is kept.
const usedMinutesKept = 3

// written reports whether last_used was written for keyID in minute (or a
// later one).
func (u *usedMinutes) written(keyID string, minute int64) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	w, ok := u.m[keyID]
	return ok && w >= minute
}

// mark records that last_used was written for keyID in minute.
func (u *usedMinutes) mark(keyID string, minute int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = map[string]int64{}
	}
	if minute > u.m[keyID] {
		u.m[keyID] = minute
	}
	if minute > u.pruned {
		u.pruned = minute
		for k, w := range u.m {
			if w < minute-usedMinutesKept {
				delete(u.m, k)
			}
		}
	}
}

// markUsed records the credential uses a settlement call wrote: those of its
// applied settlements (the script writes last_used only for those).
func (s *Store) markUsed(group []account.Settlement, res []ledger.SettleResult) {
	now := s.now()
	for i, st := range group {
		if st.KeyID != "" && res[i].Applied {
			s.lastUsed.mark(st.KeyID, usedMinute(st, now))
		}
	}
}

// usageKeys names the usage hashes whose sum is period p at time now: a
// month is the sum of its days so far (day hashes outlive a month), so that
// settlement writes one hash fewer.
func usageKeys(id string, p ledger.Period, now time.Time) ([]string, bool) {
	switch p {
	case ledger.Day:
		return []string{acctKey(id, "u:d:"+dayStamp(now))}, true
	case ledger.Month:
		now = now.UTC()
		y, m, d := now.Date()
		keys := make([]string, 0, d)
		for day := 1; day <= d; day++ {
			keys = append(keys, acctKey(id, "u:d:"+dayStamp(time.Date(y, m, day, 0, 0, 0, 0, time.UTC))))
		}
		return keys, true
	case ledger.Total:
		return []string{acctKey(id, "u:t")}, true
	}
	return nil, false
}

// Usage reports the account's balance, limits, today's spend and its usage
// over period p, which ends now. One round trip.
func (s *Store) Usage(ctx context.Context, accountID string, p ledger.Period) (ledger.UsageReport, error) {
	if !validID(accountID) {
		return ledger.UsageReport{}, fmt.Errorf("store: usage of %q: %w", accountID, ErrNotFound)
	}
	now := s.now()
	ukeys, ok := usageKeys(accountID, p, now)
	if !ok {
		return ledger.UsageReport{}, fmt.Errorf("store: usage of %s: unknown period %q", accountID, p)
	}
	var (
		acct       *redis.SliceCmd
		spent      *redis.StringCmd
		monthSpent *redis.StringCmd
		open       *redis.IntCmd
		usage      = make([]*redis.MapStringStringCmd, len(ukeys))
	)
	// All the keys share the account's slot: one round trip to one node.
	_, err := s.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		acct = pl.HMGet(ctx, acctKey(accountID, "acct"), append(append([]string{"balance", "held", "tw"}, limitFieldNames...), "leased")...)
		spent = pl.Get(ctx, acctKey(accountID, "day:"+dayStamp(now)))
		monthSpent = pl.Get(ctx, acctKey(accountID, "mon:"+monthStamp(now)))
		open = pl.HLen(ctx, acctKey(accountID, "holds"))
		for i, k := range ukeys {
			usage[i] = pl.HGetAll(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return ledger.UsageReport{}, fmt.Errorf("store: usage of %s: %w", accountID, err)
	}
	cmds := []redis.Cmder{acct, spent, monthSpent, open}
	for _, c := range usage {
		cmds = append(cmds, c)
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return ledger.UsageReport{}, fmt.Errorf("store: usage of %s: %w", accountID, err)
		}
	}
	v := acct.Val()
	if len(v) != 4+len(limitFieldNames) || v[0] == nil {
		return ledger.UsageReport{}, fmt.Errorf("store: usage of %s: %w", accountID, ErrNotFound)
	}
	r := ledger.UsageReport{
		Balance:      parseInt(str(v[0])),
		Held:         parseInt(str(v[1])),
		MinuteTokens: windowTokens(str(v[2]), now),
		Limits:       decodeLimits(v[3 : 3+len(limitFieldNames)]),
		Leased:       parseInt(str(v[3+len(limitFieldNames)])),
		DailyUsed:    parseInt(spent.Val()),
		MonthUsed:    parseInt(monthSpent.Val()),
		InFlight:     open.Val(),
		Period:       p,
	}
	hs := make([]map[string]string, len(usage))
	for i, c := range usage {
		hs[i] = c.Val()
	}
	r.Totals, r.ByModel = decodeUsage(hs...)
	return r, nil
}

// decodeUsage reads usage hashes of per-model counters, "m:NAME:MODEL", and
// sums them by model and into the account's totals.
func decodeUsage(hs ...map[string]string) (ledger.Counters, []ledger.ModelCounters) {
	models := map[usage.PricedModel]*ledger.Counters{}
	for _, h := range hs {
		for field, value := range h {
			rest, ok := strings.CutPrefix(field, "m:")
			if !ok {
				continue
			}
			name, model, ok := strings.Cut(rest, ":")
			if !ok {
				continue
			}
			c := models[usage.PricedModel(model)]
			if c == nil {
				c = new(ledger.Counters)
				models[usage.PricedModel(model)] = c
			}
			addCounter(c, name, parseInt(value))
		}
	}
	var total ledger.Counters
	byModel := make([]ledger.ModelCounters, 0, len(models))
	for m, c := range models {
		byModel = append(byModel, ledger.ModelCounters{Model: m, Counters: *c})
		total.Requests += c.Requests
		total.Usage = total.Usage.Add(c.Usage)
		total.Cost += c.Cost
	}
	slices.SortFunc(byModel, func(a, b ledger.ModelCounters) int { return cmp.Compare(a.Model, b.Model) })
	return total, byModel
}

// Ledger returns up to limit of the account's ledger entries after the entry
// id after ("" for the oldest), oldest first, and the id to pass as after for
// the next page, "" when there is none. One round trip.
func (s *Store) Ledger(ctx context.Context, accountID, after string, limit int) ([]ledger.Entry, string, error) {
	if !validID(accountID) {
		return nil, "", fmt.Errorf("store: ledger of %q: %w", accountID, ErrNotFound)
	}
	return s.ledgerPage(ctx, accountID, limit, func(p redis.Pipeliner, key string) *redis.XMessageSliceCmd {
		return rangeCmd(ctx, p, key, after, limit)
	})
}

// ledgerPage reads one page of the account's ledger with read, in the round
// trip that tells a missing account from an empty ledger.
func (s *Store) ledgerPage(ctx context.Context, accountID string, limit int, read func(p redis.Pipeliner, key string) *redis.XMessageSliceCmd) ([]ledger.Entry, string, error) {
	var (
		exists *redis.IntCmd
		rng    *redis.XMessageSliceCmd
	)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, acctKey(accountID, "acct"))
		rng = read(p, acctKey(accountID, "ledger"))
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("store: ledger of %s: %w", accountID, err)
	}
	if exists.Val() == 0 {
		return nil, "", fmt.Errorf("store: ledger of %s: %w", accountID, ErrNotFound)
	}
	msgs, next := trimPage(rng.Val(), limit)
	entries := make([]ledger.Entry, len(msgs))
	for i, m := range msgs {
		entries[i] = decodeLedger(accountID, m)
	}
	return entries, next, nil
}

func decodeLedger(accountID string, m redis.XMessage) ledger.Entry {
	return ledger.Entry{ID: m.ID, Settlement: decodeLedgerFields(accountID, func(f string) string { return str(m.Values[f]) })}
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

// The token window's bucket (admit.lua).
const tokenBucketMs = 5000

// windowTokens reads a token window ("tw", admit.lua): the tokens counted
// in its buckets that ended less than 60 s before now, settled and held.
func windowTokens(v string, now time.Time) int64 {
	oldest := (now.UnixMilli() - 60000) / tokenBucketMs
	f := strings.Fields(v)
	var n int64
	for i := 0; i+2 < len(f); i += 3 {
		if parseInt(f[i]) >= oldest {
			n += parseInt(f[i+1]) + parseInt(f[i+2])
		}
	}
	return n
}

// KeyStates returns the state of each of the account's credentials ids, in
// their order; one never used has zero counters. One round trip.
func (s *Store) KeyStates(ctx context.Context, accountID string, ids ...string) ([]ledger.KeyState, error) {
	return s.states(ctx, accountID, "ks:", ids)
}

// states reads the states named prefix+id of the account: its keys'
// ("ks:") or its projects' ("ps:").
func (s *Store) states(ctx context.Context, accountID, prefix string, ids []string) ([]ledger.KeyState, error) {
	if !validID(accountID) {
		return nil, fmt.Errorf("store: key states of %q: %w", accountID, ErrNotFound)
	}
	now := s.now()
	cmds := make([]*redis.SliceCmd, len(ids))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HMGet(ctx, acctKey(accountID, prefix+id), "held", "open", "tw", "dd", "dc", "dr", "md", "mc", "mr", "tc", "tr")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: key states of %s: %w", accountID, err)
	}
	out := make([]ledger.KeyState, len(ids))
	for i, c := range cmds {
		v := c.Val()
		k := ledger.KeyState{
			KeyID:        ids[i],
			Held:         parseInt(str(v[0])),
			InFlight:     parseInt(str(v[1])),
			MinuteTokens: windowTokens(str(v[2]), now),
			Total:        ledger.Counters{Cost: parseInt(str(v[9])), Requests: parseInt(str(v[10]))},
		}
		if str(v[3]) == dayStamp(now) {
			k.Day = ledger.Counters{Cost: parseInt(str(v[4])), Requests: parseInt(str(v[5]))}
		}
		if str(v[6]) == monthStamp(now) {
			k.Month = ledger.Counters{Cost: parseInt(str(v[7])), Requests: parseInt(str(v[8]))}
		}
		out[i] = k
	}
	return out, nil
}
