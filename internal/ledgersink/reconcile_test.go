package ledgersink

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// The continuous run's kept windows are copied, a row per key and model;
// a pass again copies nothing twice, and a window kept again replaces its
// rows. On test/integration's PostgreSQL.
func TestReconciliationCopied(t *testing.T) {
	dbURL := freshDatabase(t, "ledgersink_reconcile")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	h := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	keep := func(start time.Time, rows ...reconcile.Row) {
		t.Helper()
		b, _ := json.Marshal(reconcile.Report{Rows: rows})
		if err := st.ReconcileWindow(ctx, "1h", start, start.Add(time.Hour), b); err != nil {
			t.Fatal(err)
		}
	}
	k1 := reconcile.Row{Upstream: "alpha", VendorKeyID: "key_1", VendorKey: "k1", Model: "m", Vendor: usage.Usage{Input: 1010}, Ledger: usage.Usage{Input: 10},
		Unexplained: reconcile.Difference{Usage: usage.Usage{Input: 1000}, Cost: 3000}, LedgerCost: 30, VendorCost: 3030, Entries: 2}
	k2 := reconcile.Row{Upstream: "alpha", VendorKeyID: "key_2", VendorKey: "k2", Model: "m", Vendor: usage.Usage{Output: 9}, Abandoned: 1,
		Explained: map[string]reconcile.Difference{reconcile.AbandonedAttempts: {Usage: usage.Usage{Output: 9}, Cost: 90}}, VendorCost: 90}
	keep(h, k1, k2)
	keep(h.Add(time.Hour))
	keep(h.Add(2*time.Hour), k2)

	s := New(st, Options{DatabaseURL: dbURL})
	defer s.disconnect()
	for range 2 {
		if _, err := s.Pass(ctx); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func() (n int, unexplained int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(unexplained_cost_nano_usd), 0) FROM reconciliation`).Scan(&n, &unexplained); err != nil {
			t.Fatal(err)
		}
		return n, unexplained
	}
	if n, u := count(); n != 3 || u != 3000 {
		t.Fatalf("%d rows, %d nano-USD unexplained; want 3 and 3000", n, u)
	}
	var class string
	var cost int64
	if err := conn.QueryRow(ctx, `SELECT e.key, (e.value->>'cost_nano_usd')::bigint FROM reconciliation, jsonb_each(explained) e
		WHERE vendor_key = 'k2' AND window_start = $1`, h).Scan(&class, &cost); err != nil || class != reconcile.AbandonedAttempts || cost != 90 {
		t.Fatalf("k2's explained: %s %d (%v)", class, cost, err)
	}
	// The last window kept again, differently (a run again after usage
	// came late): its rows are replaced.
	keep(h.Add(2*time.Hour), k1)
	if _, err := s.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n, u := count(); n != 3 || u != 6000 {
		t.Fatalf("after the window was kept again: %d rows, %d nano-USD; want 3 and 6000", n, u)
	}
	// A report's model that no text column can hold (a NUL, which the
	// kept JSON carries as \u0000) is copied spelled out, not refused at
	// every pass.
	odd := k2
	odd.Model = "m\x00"
	keep(h.Add(3*time.Hour), odd)
	if _, err := s.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	var model string
	if err := conn.QueryRow(ctx, `SELECT model FROM reconciliation WHERE window_start = $1`, h.Add(3*time.Hour)).Scan(&model); err != nil || model != `m\u0000` {
		t.Fatalf("the odd row's model: %q (%v)", model, err)
	}
}
