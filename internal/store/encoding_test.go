package store

import (
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/filltest"
	"github.com/modelgateway/gateway/internal/usage"
)

// filledSettlement is a settlement with every field filled (filltest),
// less the unit prices of the kinds not priced on their own, which no
// encoding keeps.
func filledSettlement() account.Settlement {
	st := filltest.Filled[account.Settlement]()
	for _, k := range usage.Kinds {
		if !k.Priced() {
			k.Set(&st.Rates, 0)
		}
	}
	for _, t := range []*time.Time{&st.StartedAt, &st.EndedAt} {
		*t = t.Truncate(time.Millisecond) // the ledger keeps milliseconds
	}
	return st
}

// The ledger's encoding of a settlement, which the spool keeps too,
// gives back every field.
func TestLedgerFieldsRoundTrip(t *testing.T) {
	st := filledSettlement()
	if got := SettlementFromLedger(st.AccountID, LedgerFields(st)); !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, st)
	}
}

// A swept settlement is the request's last checkpoint, every field of it
// (Capped among them), with only what the sweep itself says changed: ended
// now, estimated and interrupted, settling the hold rather than a lease.
// Through a real admission, renewal and sweep.
func TestSweptSettlementKeepsEveryField(t *testing.T) {
	e := newEnv(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	acct := e.account(1e15, account.Limits{})
	ck := filledSettlement()
	ck.AccountID, ck.RequestID = acct, "r1"
	ck.Status = 200
	ck.Reconciled = false
	if d, err := e.s.Admit(e.ctx, &account.Admission{RequestID: "r1", AccountID: acct, KeyID: "key_1", Priced: "m", Hold: 1e12, Stream: true, Transport: "websocket"}); err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %v %v", d.Outcome, err)
	}
	if _, err := e.s.RenewHolds(e.ctx, []account.Renewal{{AccountID: acct, RequestID: "r1", Checkpoint: ck.Checkpoint()}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * holdTTL)
	res, err := e.s.SweepHolds(e.ctx, acct)
	if err != nil || len(res.Interrupted) != 1 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	want := ck
	want.EndedAt = e.clock.Now()
	want.Estimated, want.Interrupted = true, true
	want.Lease = account.LeaseRef{}
	if got := res.Interrupted[0]; !reflect.DeepEqual(got, want) {
		t.Fatalf("swept:\n got %+v\nwant %+v", got, want)
	}
}

// Before its first checkpoint a swept request is what its admission said,
// at status 499, charged nothing.
func TestSweptBeforeCheckpoint(t *testing.T) {
	e := newEnv(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	acct := e.account(1e9, account.Limits{})
	a := account.Admission{RequestID: "r1", AccountID: acct, KeyID: "key_1", Priced: "m", Requested: "m-alias", Hold: 100, Stream: true, Transport: "websocket"}
	if d, err := e.s.Admit(e.ctx, &a); err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %v %v", d.Outcome, err)
	}
	started := e.clock.Now()
	e.clock.Advance(2 * holdTTL)
	res, err := e.s.SweepHolds(e.ctx, acct)
	if err != nil || len(res.Interrupted) != 1 {
		t.Fatalf("sweep: %+v %v", res, err)
	}
	want := account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_1", Priced: "m", Requested: "m-alias", Stream: true, Transport: "websocket",
		StartedAt: started, EndedAt: e.clock.Now(), Status: 499, Estimated: true, Interrupted: true}
	if got := res.Interrupted[0]; !reflect.DeepEqual(got, want) {
		t.Fatalf("swept:\n got %+v\nwant %+v", got, want)
	}
}

// A hold whose checkpoint an older sidecar wrote (short names, numbers and
// usage by kind) is swept at it in full.
func TestSweptFromOlderSidecar(t *testing.T) {
	rec := `{"tb":10,"ta":0,"tk":0,"kc":0,"k":"key_1","m":"m","rq":"m-alias","s":1764000000000,"st":true,"tr":"websocket"}`
	ckpt := `{"st":200,"ep":"primary","vk":"org-b","pm":"m2","rm":"m2-2026","u":{"input":10,"output":5},"r":{"input":3000},` +
		`"tier":"priority","tu":true,"rg":"us","up":100000,"lc":200000,"fb":true,"c":42}`
	now := time.UnixMilli(1764000060000).UTC()
	got := interruptedSettlement("acct_a", "r1", rec, ckpt, now)
	want := account.Settlement{RequestID: "r1", AccountID: "acct_a", KeyID: "key_1", Requested: "m-alias", Priced: "m2", Reported: "m2-2026",
		Usage: usage.Usage{Input: 10, Output: 5}, Rates: usage.Usage{Input: 3000}, ServiceTier: "priority", TierUnknown: true,
		Region: "us", Uplift: 100000, LongContext: 200000, Fallback: true, Cost: 42, Estimated: true, Interrupted: true,
		Status: 200, Endpoint: "primary", VendorKey: "org-b", Stream: true, Transport: "websocket",
		StartedAt: time.UnixMilli(1764000000000).UTC(), EndedAt: now}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("swept:\n got %+v\nwant %+v", got, want)
	}
}

// A hold's settlement is the JSON encoding/json reads, whatever its text.
func TestHoldSettlementIsJSON(t *testing.T) {
	st := account.Settlement{Priced: "a \"model\" \\ é <x>\n", Status: 200, Cost: -3}
	fields := map[string]string{}
	readHoldSettlement(holdSettlement(&st), nil, fields)
	if got := SettlementFromLedger("", fields); got.Priced != st.Priced || got.Status != 200 || got.Cost != -3 {
		t.Fatalf("read back %+v from %s", got, holdSettlement(&st))
	}
}

// A field whose value is zero is left out of the entry and read back as
// zero: a settlement with every field zero but its request id and times
// round-trips, and its entry holds only the fields always written.
func TestLedgerZeroFieldsLeftOut(t *testing.T) {
	at := time.UnixMilli(1_780_000_000_000).UTC()
	st := account.Settlement{RequestID: "req_1", AccountID: "acct_1", StartedAt: at, EndedAt: at}
	fields := LedgerFields(st)
	if got := SettlementFromLedger(st.AccountID, fields); !reflect.DeepEqual(got, st) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, st)
	}
	written := slices.Sorted(maps.Keys(fields))
	if want := []string{ledgerEnded, ledgerRequestID, ledgerStarted, ledgerStatus}; !slices.Equal(written, want) {
		t.Errorf("entry %v: want %v alone", fields, want)
	}
}
