package store

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

// The Go↔Lua contract of settlement, in one place. settle.lua knows no field
// names: it receives the counter increments and the ledger entry as
// name/value pairs built here, and the readers below decode the same names.
// TestSettlementRoundTrip pins it: a settlement read back from the ledger and
// the counters equals what was settled, field by field.
//
// Usage hashes hold each priced model's counters as "m:NAME:MODEL" where NAME
// is "requests", "cost" or a usage kind (usage.Kinds); names never hold a
// colon, so a model name may.
const (
	counterRequests = "requests"
	counterCost     = "cost"
	// counterCacheWriteV1 is the name cache writes were counted under before
	// they were split by lifetime; it is read as 5-minute writes.
	counterCacheWriteV1 = "cache_write"
)

// appendCounters appends settle.lua's counter increments to args: the
// number of pairs, then name, increment pairs. Zero increments are left out
// (the script would skip them). It appends in place, as does appendLedger:
// a settlement's arguments are built for every request.
func appendCounters(args []any, st account.Settlement, cost int64) []any {
	at := len(args)
	args = append(args, 0, counterRequests, 1)
	if cost != 0 {
		args = append(args, counterCost, cost)
	}
	for _, k := range usage.Kinds {
		if v := k.Of(st.Usage); v != 0 {
			args = append(args, k.Name, v)
		}
	}
	args[at] = (len(args) - at - 1) / 2
	return args
}

// addCounter adds one usage-hash counter to c.
func addCounter(c *ledger.Counters, name string, n int64) {
	switch name {
	case counterRequests:
		c.Requests += n
	case counterCost:
		c.Cost += n
	case counterCacheWriteV1:
		c.Usage.CacheWrite5m += n
	default:
		if k, ok := usage.KindNamed(name); ok {
			k.Set(&c.Usage, k.Of(c.Usage)+n)
		}
	}
}

// Ledger entry fields. Each usage kind is recorded under its name, and its
// unit price under "price_" + its name.
const (
	ledgerRequestID   = "request_id"
	ledgerKeyID       = "key_id"
	ledgerProjectID   = "project_id" // "" for the default project
	ledgerRequested   = "model_requested"
	ledgerPriced      = "model"
	ledgerReported    = "model_reported"
	ledgerServiceTier = "service_tier"
	ledgerLongContext = "long_context"
	ledgerFallback    = "fallback"
	ledgerCost        = "cost"
	ledgerEstimated   = "estimated"
	ledgerStatus      = "status"
	ledgerEndpoint    = "endpoint"
	ledgerVendorKey   = "vendor_key"
	ledgerStream      = "stream"
	ledgerTransport   = "transport" // "" (HTTP) or "websocket"
	ledgerStarted     = "started"
	ledgerEnded       = "ended"
	ledgerInterrupted = "interrupted"
	ledgerReconciled  = "reconciled" // settle.lua sets it
	ledgerTierUnknown = "tier_unknown"
	ledgerCapped      = "capped"
	ledgerRegion      = "regional_processing"
	ledgerUplift      = "regional_uplift_ppm"
	ledgerPricePrefix = "price_"
	// ledgerLease is the lease a request was admitted from, "ID SEQ HOLD",
	// then " TOKENS BUCKET LEVELS" where it used the lease's tokens: kept
	// by the spool only (LedgerFields), never in the ledger itself.
	ledgerLease = "lease"
)

// kindField and priceField name the ledger fields of each kind's quantity
// and unit price, by kind index in usage.Kinds, as script arguments made
// once: a string made an argument (an interface) is allocated each time.
var kindField, priceField = func() (kinds, prices []any) {
	kinds, prices = make([]any, len(usage.Kinds)), make([]any, len(usage.Kinds))
	for i, k := range usage.Kinds {
		kinds[i], prices[i] = k.Name, ledgerPricePrefix+k.Name
	}
	return kinds, prices
}()

// appendLedger appends the ledger entry to args: the number of field,
// value pairs, then the pairs. A field whose value is zero ("", 0 or
// false) is left out and reads back as zero: most of an entry's fields are
// (a text reply has no audio, images or searches, no project, no flags),
// and every field written is parsed by each request's script call and kept
// in its stream entry (a text reply's: 21 fields of 55, about 300 bytes of
// Redis memory rather than 490).
func appendLedger(args []any, st account.Settlement, cost int64) []any {
	at := len(args)
	args = append(args, 0, ledgerRequestID, st.RequestID)
	args = appendText(args, ledgerKeyID, st.KeyID)
	args = appendText(args, ledgerProjectID, st.ProjectID)
	args = appendText(args, ledgerRequested, string(st.Requested))
	args = appendText(args, ledgerPriced, string(st.Priced))
	args = appendText(args, ledgerReported, string(st.Reported))
	for i, k := range usage.Kinds {
		args = appendInt(args, kindField[i], k.Of(st.Usage))
		if k.Priced() {
			args = appendInt(args, priceField[i], k.Of(st.Rates))
		}
	}
	args = appendText(args, ledgerServiceTier, st.ServiceTier)
	args = appendFlag(args, ledgerTierUnknown, st.TierUnknown)
	args = appendText(args, ledgerRegion, st.Region)
	args = appendInt(args, ledgerUplift, st.Uplift)
	args = appendInt(args, ledgerLongContext, st.LongContext)
	args = appendFlag(args, ledgerFallback, st.Fallback)
	args = appendInt(args, ledgerCost, cost)
	args = appendFlag(args, ledgerEstimated, st.Estimated)
	args = appendFlag(args, ledgerCapped, st.Capped)
	args = append(args, ledgerStatus, st.Status)
	args = appendText(args, ledgerEndpoint, st.Endpoint)
	args = appendText(args, ledgerVendorKey, st.VendorKey)
	args = appendFlag(args, ledgerStream, st.Stream)
	args = appendText(args, ledgerTransport, st.Transport)
	args = append(args, ledgerStarted, ms(st.StartedAt), ledgerEnded, ms(st.EndedAt))
	args = appendFlag(args, ledgerInterrupted, st.Interrupted)
	args = appendFlag(args, ledgerReconciled, st.Reconciled)
	args[at] = (len(args) - at - 1) / 2
	return args
}

// appendText, appendInt and appendFlag append one ledger field unless its
// value is zero. A name is an interface already (a constant, or made one
// once as kindField is), so that passing it allocates nothing.
func appendText(args []any, name any, v string) []any {
	if v == "" {
		return args
	}
	return append(args, name, v)
}

func appendInt(args []any, name any, v int64) []any {
	if v == 0 {
		return args
	}
	return append(args, name, v)
}

func appendFlag(args []any, name any, v bool) []any {
	if !v {
		return args
	}
	return append(args, name, "1")
}

// LedgerFields returns st's ledger entry, charging st.Cost, field by field
// as settle.lua writes it to Redis: the one encoding of a settlement outside
// Go, which the spool keeps on disk too. The account is not a field: the
// ledger is the account's own.
func LedgerFields(st account.Settlement) map[string]string {
	args := appendLedger(nil, st, st.Cost)
	m := make(map[string]string, args[0].(int))
	for i := 1; i+1 < len(args); i += 2 {
		m[args[i].(string)] = argString(args[i+1])
	}
	if l := leaseField(st.Lease); l != "" {
		m[ledgerLease] = l
	}
	return m
}

// leaseField is the lease field of a settlement admitted from lease l, ""
// for none.
func leaseField(l account.LeaseRef) string {
	if l == (account.LeaseRef{}) {
		return ""
	}
	f := l.ID + " " + strconv.FormatInt(l.Seq, 10) + " " + strconv.FormatInt(l.Hold, 10)
	if l.Tokens != 0 || l.Bucket != 0 || l.TokenLevels != 0 {
		f += " " + strconv.FormatInt(l.Tokens, 10) + " " + strconv.FormatInt(l.Bucket, 10) + " " + strconv.Itoa(l.TokenLevels)
	}
	return f
}

// SettlementFromLedger is the reverse of LedgerFields: the settlement of a
// ledger entry of the account's, absent fields zero.
func SettlementFromLedger(accountID string, fields map[string]string) account.Settlement {
	return decodeLedgerFields(accountID, func(f string) string { return fields[f] })
}

// argString formats a script argument as Redis stores it.
func argString(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	case int:
		return strconv.Itoa(v)
	}
	panic(fmt.Sprintf("store: ledger field of type %T", v))
}

// decodeLedgerFields reads a ledger entry written by appendLedger (or by an
// older sidecar, whose cache writes were one "cache_write" field).
func decodeLedgerFields(accountID string, v func(string) string) account.Settlement {
	status, _ := strconv.Atoi(v(ledgerStatus))
	st := account.Settlement{
		RequestID:   v(ledgerRequestID),
		AccountID:   accountID,
		KeyID:       v(ledgerKeyID),
		ProjectID:   v(ledgerProjectID),
		Requested:   usage.RequestedModel(v(ledgerRequested)),
		Priced:      usage.PricedModel(v(ledgerPriced)),
		Reported:    usage.ReportedModel(v(ledgerReported)),
		ServiceTier: v(ledgerServiceTier),
		TierUnknown: v(ledgerTierUnknown) == "1",
		Region:      v(ledgerRegion),
		Uplift:      parseInt(v(ledgerUplift)),
		LongContext: parseInt(v(ledgerLongContext)),
		Fallback:    v(ledgerFallback) == "1",
		Cost:        parseInt(v(ledgerCost)),
		Estimated:   v(ledgerEstimated) == "1",
		Capped:      v(ledgerCapped) == "1",
		Status:      status,
		Endpoint:    v(ledgerEndpoint),
		VendorKey:   v(ledgerVendorKey),
		Stream:      v(ledgerStream) == "1",
		Transport:   v(ledgerTransport),
		StartedAt:   parseMS(v(ledgerStarted)),
		EndedAt:     parseMS(v(ledgerEnded)),
		Interrupted: v(ledgerInterrupted) == "1",
		Reconciled:  v(ledgerReconciled) == "1",
	}
	for _, k := range usage.Kinds {
		k.Set(&st.Usage, parseInt(v(k.Name)))
		if k.Priced() {
			k.Set(&st.Rates, parseInt(v(ledgerPricePrefix+k.Name)))
		}
	}
	// "id seq hold", then "tokens bucket levels" where it used tokens.
	if f := strings.SplitN(v(ledgerLease), " ", 6); len(f) == 3 || len(f) == 6 {
		st.Lease = account.LeaseRef{ID: f[0], Seq: parseInt(f[1]), Hold: parseInt(f[2])}
		if len(f) == 6 {
			st.Lease.Tokens, st.Lease.Bucket, st.Lease.TokenLevels = parseInt(f[3]), parseInt(f[4]), int(parseInt(f[5]))
		}
	}
	if old := v(counterCacheWriteV1); old != "" && st.Usage.CacheWrite5m == 0 {
		st.Usage.CacheWrite5m = parseInt(old)
	}
	return st
}
