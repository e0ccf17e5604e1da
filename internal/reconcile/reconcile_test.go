package reconcile

import (
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

var hour = time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)

func entryCost(key, model string, at time.Time, u usage.Usage, cost int64) account.Settlement {
	st := entry(key, model, at, u, false)
	st.Cost = cost
	return st
}

func entry(key, model string, at time.Time, u usage.Usage, estimated bool) account.Settlement {
	return account.Settlement{VendorKey: key, Reported: usage.ReportedModel(model), StartedAt: at, Usage: u, Estimated: estimated}
}

// price is a catalogue of one price: 1,000 nano-USD an input token,
// 5,000 an output one.
func price(_ string, u usage.Usage) int64 { return u.Input*1000 + u.Output*5000 }

func TestReconcile(t *testing.T) {
	in := Input{
		Keys:  map[string]string{"k1": "key_1", "k2": "key_2"},
		Width: time.Hour,
		Price: price,
		Vendor: []vendorusage.Row{
			// k1 matches the ledger exactly.
			{Start: hour, KeyID: "key_1", Model: "m", Tokens: usage.Usage{Input: 30, Output: 12}},
			// k2 has 100 input and 7 output more: traffic outside.
			{Start: hour, KeyID: "key_2", Model: "m", Tokens: usage.Usage{Input: 110, Output: 12}},
			// k1, the next hour: one reply settled at an estimate.
			{Start: hour.Add(time.Hour), KeyID: "key_1", Model: "m", Tokens: usage.Usage{Input: 10, Output: 50}},
			// A key the configuration does not name.
			{Start: hour, KeyID: "key_x", Model: "m", Tokens: usage.Usage{Input: 5}},
			// An empty group is no row.
			{Start: hour, KeyID: "key_1", Model: "n"},
		},
		Ledger: []account.Settlement{
			entryCost("k1", "m", hour.Add(time.Minute), usage.Usage{Input: 10, Output: 6}, 40_001),
			entry("k1", "m", hour.Add(59*time.Minute), usage.Usage{Input: 20, Output: 6}, false),
			entry("k2", "m", hour.Add(time.Second), usage.Usage{Input: 10, Output: 5}, false),
			entry("k1", "m", hour.Add(61*time.Minute), usage.Usage{Input: 10, Output: 20}, true),
		},
	}
	rows := Reconcile(in)
	if len(rows) != 4 {
		t.Fatalf("%d rows: %+v", len(rows), rows)
	}
	k1, k2, kx, later := rows[0], rows[1], rows[2], rows[3]
	// The ledger's own cost stands, rounding and all; nothing unexplained
	// costs nothing.
	if k1.VendorKey != "k1" || k1.Entries != 2 || k1.Unexplained != (Difference{}) || k1.Explained != nil ||
		k1.LedgerCost != 40_001 || k1.VendorCost != 40_001 {
		t.Errorf("k1: %+v", k1)
	}
	if k2.VendorKey != "k2" || k2.Unexplained != (Difference{usage.Usage{Input: 100, Output: 7}, 135_000}) || k2.VendorCost != 135_000 {
		t.Errorf("k2: %+v", k2)
	}
	if kx.VendorKeyID != "key_x" || kx.VendorKey != "" || kx.Unexplained != (Difference{usage.Usage{Input: 5}, 5000}) {
		t.Errorf("unnamed key: %+v", kx)
	}
	if !later.Start.Equal(hour.Add(time.Hour)) || later.Estimated != 1 || later.Unexplained != (Difference{}) ||
		later.Explained[ClientDisconnect] != (Difference{usage.Usage{Output: 30}, 150_000}) {
		t.Errorf("estimated: %+v", later)
	}
	if Tokens(k2.Unexplained.Usage) != 107 {
		t.Errorf("tokens %d", Tokens(k2.Unexplained.Usage))
	}
}

// A bucket with abandoned attempts puts its difference to them; one with
// both them and estimates to both; the reserve's entries and attempts are
// not the primary's report's.
func TestReconcileAbandoned(t *testing.T) {
	reserved := entry("k1", "m", hour, usage.Usage{Input: 500}, false)
	reserved.Endpoint = Reserve
	rows := Reconcile(Input{
		Keys:  map[string]string{"k1": "key_1", "k2": "key_2"},
		Width: time.Hour,
		Price: price,
		Vendor: []vendorusage.Row{
			{Start: hour, KeyID: "key_1", Model: "m", Tokens: usage.Usage{Input: 40, Output: 20}},
			{Start: hour, KeyID: "key_2", Model: "m", Tokens: usage.Usage{Input: 10, Output: 9}},
		},
		Ledger: []account.Settlement{
			entry("k1", "m", hour.Add(time.Minute), usage.Usage{Input: 10, Output: 5}, false),
			reserved,
			entry("k2", "m", hour.Add(time.Minute), usage.Usage{Input: 10, Output: 1}, true),
		},
		Abandoned: []account.AbandonedAttempt{
			{At: hour.Add(time.Minute), Upstream: "u", VendorKey: "k1", Endpoint: "primary", Model: "m", Reason: "first_byte_timeout"},
			{At: hour.Add(2 * time.Minute), Upstream: "u", VendorKey: "k1", Endpoint: "primary", Model: "m", Reason: "reset"},
			{At: hour.Add(time.Minute), Upstream: "u", VendorKey: "k2", Endpoint: "primary", Model: "m", Reason: "status_5xx"},
			{At: hour.Add(time.Minute), Upstream: "u", VendorKey: "k1", Endpoint: Reserve, Model: "m", Reason: "reset"},
		},
	})
	if len(rows) != 2 {
		t.Fatalf("%+v", rows)
	}
	k1, k2 := rows[0], rows[1]
	if k1.Entries != 1 || k1.Abandoned != 2 || k1.Unexplained != (Difference{}) ||
		k1.Explained[AbandonedAttempts] != (Difference{usage.Usage{Input: 30, Output: 15}, 105_000}) {
		t.Errorf("k1: %+v", k1)
	}
	if k2.Abandoned != 1 || k2.Estimated != 1 || k2.Explained[BothClasses] != (Difference{usage.Usage{Output: 8}, 40_000}) {
		t.Errorf("k2: %+v", k2)
	}
}

// The ledger counting more than the vendor is a negative difference, and
// an entry of a key without a vendor id still names its key.
func TestReconcileLedgerAbove(t *testing.T) {
	rows := Reconcile(Input{
		Keys:   map[string]string{"default": ""},
		Width:  time.Hour,
		Price:  price,
		Ledger: []account.Settlement{entryCost("default", "m", hour, usage.Usage{Output: 3}, 15_000)},
	})
	// Mixed signs: 2 input more, 3 output fewer.
	want := Difference{usage.Usage{Input: 2, Output: -3}, 2000 - 15_000}
	if len(rows) != 1 || rows[0].VendorKey != "default" || rows[0].Unexplained != (Difference{usage.Usage{Output: -3}, -15_000}) || rows[0].VendorCost != 0 {
		t.Fatalf("%+v", rows)
	}
	if d := signedCost(price, "m", want.Usage); d != want.Cost {
		t.Errorf("signed cost %d, want %d", d, want.Cost)
	}
}
