package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

// Holds live as long as their request. Admission records each hold with a
// lease (Options.HoldTTL) and an admission record; the sidecar running the
// request renews the lease while the request runs and checkpoints what it
// has used so far. A hold whose lease ran out belongs to a request whose
// sidecar died: a background sweeper settles it at its last checkpoint,
// flagged interrupted, so every admitted request ends in the ledger.
//
// All of it is one field of the account's holds hash per running request
// (lua/hold.lua): admission writes it, a renewal rewrites it, settlement
// deletes it, and the sweeper reads the account's hash whole.
//
// The sweeper finds accounts with holds through holdIndexKey, a global sorted
// set of account ids scored by the time to look at the account next. It lives
// outside every account's hash tag (it spans accounts), so it is written with
// plain commands next to the account's scripts, never inside them.

// holdIndexKey is the zset of accounts that may have open holds, scored by
// the earliest time (unix ms) one of them may expire.
const holdIndexKey = "gw:holdaccts"

// admissionRecord is what the sweeper needs to settle a request whose
// sidecar died before its first checkpoint: who made it, with which model,
// when. Stored with the hold, small since every admission writes it; read
// by the names of its ledger fields (recordFields).
type admissionRecord struct {
	KeyID     string               `json:"k"`
	ProjectID string               `json:"p,omitempty"`
	Priced    usage.PricedModel    `json:"m"`
	Requested usage.RequestedModel `json:"rq,omitempty"`
	Started   int64                `json:"s"` // unix ms
	Stream    bool                 `json:"st,omitempty"`
	Transport string               `json:"tr,omitempty"`
}

// A hold's checkpoint is a settlement in the ledger's encoding
// (LedgerFields), as a JSON object of its fields that are not zero. The
// sweeper settles the checkpoint's fields over the admission record's, so
// a field added to a settlement reaches a swept one with no list to keep.

// holdSettlement encodes the checkpoint st for a hold. It runs for every
// renewal of every open request, so it writes the JSON itself rather than
// through a map, and on the heap: a request path's stack stays small
// (TestStreamStackStaysSmall).
//
//go:noinline
func holdSettlement(st *account.Settlement) string {
	p := holdArgs.Get().(*[]any)
	args := appendLedger((*p)[:0], *st, st.Cost)
	b := append(make([]byte, 0, 256), '{')
	for i := 1; i+1 < len(args); i += 2 {
		// The hold's field is the request id, and the sweep ends it.
		if f := args[i].(string); f != ledgerRequestID && f != ledgerEnded {
			b = appendHoldField(b, f, args[i+1])
		}
	}
	clear(args)
	*p = args
	holdArgs.Put(p)
	if l := leaseField(st.Lease); l != "" {
		b = appendHoldField(b, ledgerLease, l)
	}
	return string(append(b, '}'))
}

// holdArgs are holdSettlement's scratch lists of ledger fields.
var holdArgs = sync.Pool{New: func() any { s := make([]any, 0, 4*len(usage.Kinds)+64); return &s }}

// appendHoldField appends "name":"value" to the object b, unless the value
// is zero.
func appendHoldField(b []byte, name string, v any) []byte {
	switch v := v.(type) {
	case string:
		if v == "" || v == "0" {
			return b
		}
		return appendJSONString(appendJSONString(comma(b), name), v, ':')
	case int64:
		if v == 0 {
			return b
		}
		b = append(appendJSONString(comma(b), name), ':', '"')
		return append(strconv.AppendInt(b, v, 10), '"')
	case int:
		return appendHoldField(b, name, int64(v))
	}
	panic(fmt.Sprintf("store: ledger field of type %T", v))
}

func comma(b []byte) []byte {
	if len(b) > 1 {
		return append(b, ',')
	}
	return b
}

// appendJSONString appends the JSON string s, after the bytes before (a
// separator), to b.
func appendJSONString(b []byte, s string, before ...byte) []byte {
	b = append(b, before...)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // rare: escapes and UTF-8 as encoding/json does
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// readHoldSettlement adds the ledger fields of a hold's JSON s to fields:
// a checkpoint holdSettlement wrote, or JSON whose short names names maps
// to ledger fields (the admission record; an older sidecar's checkpoint,
// its usage and prices as objects "u" and "r" by kind name). What cannot
// be read is left out.
func readHoldSettlement(s string, names map[string]string, fields map[string]string) {
	var m map[string]json.RawMessage
	if json.Unmarshal([]byte(s), &m) != nil {
		return
	}
	for f, raw := range m {
		if name, ok := names[f]; ok {
			f = name
		}
		var str string
		var b bool
		var n json.Number
		var kinds map[string]int64
		switch {
		case json.Unmarshal(raw, &str) == nil:
			fields[f] = str
		case json.Unmarshal(raw, &b) == nil:
			fields[f] = boolString(b)
		case json.Unmarshal(raw, &n) == nil:
			fields[f] = n.String()
		case (f == "u" || f == "r") && json.Unmarshal(raw, &kinds) == nil:
			for k, q := range kinds {
				if f == "r" {
					k = ledgerPricePrefix + k
				}
				fields[k] = strconv.FormatInt(q, 10)
			}
		}
	}
}

var (
	// recordFields names the admission record's fields as ledger fields.
	recordFields = map[string]string{
		"k": ledgerKeyID, "p": ledgerProjectID, "m": ledgerPriced, "rq": ledgerRequested, "s": ledgerStarted, "st": ledgerStream, "tr": ledgerTransport,
	}
	// legacyCheckpoint names the fields of a checkpoint as sidecars wrote
	// it before checkpoints were settlements in the ledger's encoding: a
	// hold checkpointed by one of those is still swept in full.
	legacyCheckpoint = map[string]string{
		"st": ledgerStatus, "ep": ledgerEndpoint, "vk": ledgerVendorKey, "rq": ledgerRequested, "pm": ledgerPriced,
		"rm": ledgerReported, "tier": ledgerServiceTier, "tu": ledgerTierUnknown, "rg": ledgerRegion, "up": ledgerUplift,
		"lc": ledgerLongContext, "fb": ledgerFallback, "c": ledgerCost,
	}
)

// HoldLease is how long a hold lives without renewal.
func (s *Store) HoldLease() time.Duration { return s.opts.HoldTTL }

// RenewHolds extends the leases of running requests to now+HoldLease and
// stores their checkpoints: one script call per account, all in one
// pipeline. It returns the request ids whose hold is gone: settled, or swept.
func (s *Store) RenewHolds(ctx context.Context, rs []account.Renewal) (gone []string, err error) {
	if len(rs) == 0 {
		return nil, nil
	}
	until := s.now().Add(s.opts.HoldTTL).UnixMilli()
	byAcct := map[string][]any{}
	var order []string
	for _, r := range rs {
		if !validID(r.AccountID) || r.RequestID == "" {
			continue
		}
		ck := ""
		if r.Checkpoint != nil {
			ck = holdSettlement(r.Checkpoint)
		}
		if _, ok := byAcct[r.AccountID]; !ok {
			order = append(order, r.AccountID)
			byAcct[r.AccountID] = []any{until}
		}
		byAcct[r.AccountID] = append(byAcct[r.AccountID], r.RequestID, ck)
	}
	run := func(p redis.Scripter, id string) *redis.Cmd {
		return renewScript.EvalSha(ctx, p, []string{acctKey(id, "holds")}, byAcct[id]...)
	}
	cmds := make([]*redis.Cmd, len(order))
	s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range order {
			cmds[i] = run(p, id)
		}
		return nil
	})
	for i, c := range cmds {
		v, cerr := c.StringSlice()
		if errNoScript(cerr) {
			v, cerr = renewScript.Run(ctx, s.rdb, []string{acctKey(order[i], "holds")}, byAcct[order[i]]...).StringSlice()
		}
		if cerr != nil {
			return gone, fmt.Errorf("store: renew holds of %s: %w", order[i], cerr)
		}
		gone = append(gone, v...)
	}
	return gone, nil
}

// DueHoldAccounts returns up to limit accounts that may have a hold expired
// by now.
func (s *Store) DueHoldAccounts(ctx context.Context, limit int64) ([]string, error) {
	ids, err := s.rdb.ZRangeByScore(ctx, holdIndexKey, &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(s.now().UnixMilli(), 10), Count: limit,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("store: due hold accounts: %w", err)
	}
	return ids, nil
}

// sweepBatch bounds the expired holds one sweep script call returns.
const sweepBatch = 100

// SweepHolds settles the account's requests whose hold lease ran out, at
// their last checkpoint, flagged interrupted and estimated, and keeps the
// account's place in the sweeper's index.
func (s *Store) SweepHolds(ctx context.Context, accountID string) (ledger.SweepResult, error) {
	var res ledger.SweepResult
	if !validID(accountID) {
		// A malformed index entry: drop it, it can never hold anything.
		s.rdb.ZRem(ctx, holdIndexKey, accountID)
		return res, nil
	}
	keys := []string{acctKey(accountID, "acct"), acctKey(accountID, "holds"), acctKey(accountID, "leases")}
	for {
		now := s.now()
		v, err := sweepScript.Run(ctx, s.rdb, keys, now.UnixMilli(), sweepBatch, s.opts.HoldTTL.Milliseconds()).Slice()
		if err != nil {
			return res, fmt.Errorf("store: sweep holds of %s: %w", accountID, err)
		}
		if len(v) < 3 {
			return res, fmt.Errorf("store: sweep holds of %s: unexpected reply %v", accountID, v)
		}
		if len(v) < 4 {
			return res, fmt.Errorf("store: sweep holds of %s: unexpected reply %v", accountID, v)
		}
		open, next, released := toInt(v[0]), toInt(v[1]), toInt(v[2])
		res.Released += released
		first := 4 + 2*int(toInt(v[3]))
		for i := 4; i+1 < first && i+1 < len(v); i += 2 {
			// A lease its sidecar stopped renewing: its amount goes back.
			amount, err := s.sweepLease(ctx, accountID, str(v[i]), str(v[i+1]), now)
			if err != nil {
				return res, fmt.Errorf("store: sweep holds of %s: %w", accountID, err)
			}
			if amount > 0 {
				res.LeasesReturned = append(res.LeasesReturned, amount)
			}
		}
		found := 0
		for i := first; i+2 < len(v); i += 3 {
			found++
			st := interruptedSettlement(accountID, str(v[i]), str(v[i+1]), str(v[i+2]), now)
			applied, err := s.Settle(ctx, st)
			if err != nil {
				return res, fmt.Errorf("store: sweep holds of %s: %w", accountID, err)
			}
			res.Interrupted = append(res.Interrupted, st)
			res.Applied = append(res.Applied, applied)
		}
		if found == sweepBatch {
			continue // more may have expired
		}
		return res, s.reindex(ctx, accountID, open-int64(found), next)
	}
}

// reindex sets when the sweeper looks at the account next: at its earliest
// hold expiry, or never when it has no hold left. Removal is checked again
// afterwards: an admission between the sweep and the removal added its hold
// before re-adding the account, and is seen by the check if not by the sweep.
func (s *Store) reindex(ctx context.Context, accountID string, open, next int64) error {
	if open > 0 && next > 0 {
		return s.rdb.ZAdd(ctx, holdIndexKey, redis.Z{Score: float64(next), Member: accountID}).Err()
	}
	if open > 0 {
		// Holds remain but none expires after now: they are being settled
		// right now; look again soon.
		return s.rdb.ZAdd(ctx, holdIndexKey, redis.Z{Score: float64(s.now().Add(time.Second).UnixMilli()), Member: accountID}).Err()
	}
	if err := s.rdb.ZRem(ctx, holdIndexKey, accountID).Err(); err != nil {
		return fmt.Errorf("store: reindex %s: %w", accountID, err)
	}
	n, err := s.rdb.HLen(ctx, acctKey(accountID, "holds")).Result()
	if err != nil {
		return fmt.Errorf("store: reindex %s: %w", accountID, err)
	}
	if n > 0 {
		// A hold admitted since the sweep: due now, so that the next pass
		// sweeps the account and indexes it at its earliest expiry.
		return s.rdb.ZAddLT(ctx, holdIndexKey, redis.Z{Score: float64(s.now().UnixMilli()), Member: accountID}).Err()
	}
	return nil
}

// interruptedSettlement builds the settlement of a request whose sidecar
// died: its last checkpoint over its admission record. A request that died
// before its vendor answered (or before its first checkpoint) is recorded
// with status 499 and charged nothing.
func interruptedSettlement(accountID, reqID, rec, ckpt string, now time.Time) account.Settlement {
	fields := map[string]string{}
	readHoldSettlement(rec, recordFields, fields)
	readHoldSettlement(ckpt, legacyCheckpoint, fields)
	st := decodeLedgerFields(accountID, func(f string) string { return fields[f] })
	st.RequestID, st.EndedAt = reqID, now
	st.Estimated, st.Interrupted = true, true
	// The sweep settles the hold: never a lease's (the sweeper returns a
	// dead lease on its own), and never as a reconciliation.
	st.Lease, st.Reconciled = account.LeaseRef{}, false
	st.Uplift, st.Cost = max(st.Uplift, 0), max(st.Cost, 0)
	if !st.Usage.Valid() || !st.Rates.Valid() {
		st.Usage, st.Rates, st.Cost = usage.Usage{}, usage.Usage{}, 0
	}
	if st.Status == 0 {
		st.Status = 499
	}
	return st
}

// toInt reads an integer element of a script reply.
func toInt(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case string:
		return parseInt(n)
	}
	return 0
}

// indexHold adds the account to the sweeper's index, keeping an earlier
// score: part of the admission's pipeline.
func indexHold(ctx context.Context, p redis.Pipeliner, accountID string, expiry time.Time) {
	p.ZAddLT(ctx, holdIndexKey, redis.Z{Score: float64(expiry.UnixMilli()), Member: accountID})
}

// errNoScript reports whether err says the server does not know a script.
func errNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// Checkpoints returns the account's open requests' last checkpoints, by
// request id.
func (s *Store) Checkpoints(ctx context.Context, accountID string) (map[string]account.Checkpoint, error) {
	if !validID(accountID) {
		return nil, fmt.Errorf("store: checkpoints of %q: %w", accountID, ErrNotFound)
	}
	m, err := s.rdb.HGetAll(ctx, acctKey(accountID, "holds")).Result()
	if err != nil {
		return nil, fmt.Errorf("store: checkpoints of %s: %w", accountID, err)
	}
	out := make(map[string]account.Checkpoint, len(m))
	for id, v := range m {
		if h := parseHold(v); h.Checkpoint != "" {
			fields := map[string]string{}
			readHoldSettlement(h.Checkpoint, legacyCheckpoint, fields)
			out[id] = decodeLedgerFields(accountID, func(f string) string { return fields[f] })
		}
	}
	return out, nil
}

// heldValue is one entry of an account's holds hash, as lua/hold.lua writes
// it: "<amount> <expiry> <record>", then "\n<checkpoint>" once a renewal
// wrote one.
type heldValue struct {
	Amount     int64
	Expiry     int64 // unix ms; 0 for a hold written without a lease
	Record     string
	Checkpoint string
}

// parseHold reads a hold's value; a bare amount (an older sidecar's) has
// no lease, record or checkpoint.
func parseHold(v string) heldValue {
	amount, rest, ok := strings.Cut(v, " ")
	if !ok {
		return heldValue{Amount: parseInt(v)}
	}
	expiry, rest, _ := strings.Cut(rest, " ")
	record, ckpt, _ := strings.Cut(rest, "\n")
	return heldValue{Amount: parseInt(amount), Expiry: parseInt(expiry), Record: record, Checkpoint: ckpt}
}
