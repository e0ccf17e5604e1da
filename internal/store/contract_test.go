package store

import (
	"reflect"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

// distinct returns a Usage with a different non-zero figure in every kind,
// so that two kinds swapped anywhere along the way show.
func distinct(base int64) usage.Usage {
	var u usage.Usage
	for i, k := range usage.Kinds {
		k.Set(&u, base+int64(i)*base/7+int64(i)+1)
	}
	return u
}

// testSettlementRoundTrip pins the Go↔Lua contract: every field of a
// settlement comes back from the ledger as it was settled, and every usage
// kind reaches the counters of the priced model.
func testSettlementRoundTrip(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{})
	st := account.Settlement{
		RequestID: "rt1", AccountID: acct, KeyID: "key_rt",
		Requested: "model-x-20260101", Priced: "model-x", Reported: "model-x-20260101-internal",
		Usage: distinct(1000), Rates: distinct(5_000_000), ServiceTier: "priority", LongContext: 200_000,
		Fallback: true, Cost: 987_654, Estimated: true, Status: 200, Endpoint: "reserve", Stream: true,
		StartedAt: start, EndedAt: start.Add(2500 * time.Millisecond),
	}
	// Reasoning has no price of its own: the ledger records none.
	st.Rates.Reasoning = 0
	e.mustAdmit(acct, st.RequestID, 1_000_000)
	if !e.settle(st) {
		t.Fatal("not applied")
	}
	l := e.ledger(acct)
	if len(l) != 1 || !reflect.DeepEqual(l[0].Settlement, st) {
		t.Fatalf("ledger\n got %+v\nwant %+v", l, st)
	}
	for _, p := range []ledger.Period{ledger.Day, ledger.Month, ledger.Total} {
		r := e.usage(acct, p)
		want := ledger.Counters{Requests: 1, Usage: st.Usage, Cost: st.Cost}
		if r.Totals != want || len(r.ByModel) != 1 || r.ByModel[0].Model != st.Priced || r.ByModel[0].Counters != want {
			t.Fatalf("%s counters\n got %+v\nwant %+v under %s", p, r, want, st.Priced)
		}
	}
	// Each kind is its own counter: a second settlement with only one kind
	// adds to that one only.
	for i, k := range usage.Kinds {
		var u usage.Usage
		k.Set(&u, 1)
		id := "one-" + k.Name
		e.mustAdmit(acct, id, 10)
		e.settle(account.Settlement{RequestID: id, AccountID: acct, Priced: st.Priced, Usage: u, Status: 200})
		got := e.usage(acct, ledger.Total).Totals.Usage
		for j, o := range usage.Kinds {
			want := o.Of(st.Usage)
			if j <= i {
				want++
			}
			if o.Of(got) != want {
				t.Fatalf("after one %s: %s = %d, want %d", k.Name, o.Name, o.Of(got), want)
			}
		}
	}
}

// Counters written before cache writes were split by lifetime are read as
// 5-minute writes.
func TestOldCacheWriteCounterIsFiveMinutes(t *testing.T) {
	total, by := decodeUsage(map[string]string{"m:cache_write:m": "7", "m:requests:m": "1"})
	if total.Usage.CacheWrite5m != 7 || total.Requests != 1 || len(by) != 1 {
		t.Fatalf("%+v %+v", total, by)
	}
	st := decodeLedgerFields("a", func(f string) string { return map[string]string{"cache_write": "9", "model": "m"}[f] })
	if st.Usage.CacheWrite5m != 9 || st.Priced != "m" {
		t.Fatalf("%+v", st)
	}
}
