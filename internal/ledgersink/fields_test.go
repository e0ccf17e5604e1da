package ledgersink

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/gateway/internal/filltest"
	"github.com/modelgateway/gateway/internal/ledger"
)

// Every field of a ledger entry reaches the sink's row: changing any one
// field of a filled entry changes the row's values.
func TestRowHasEveryField(t *testing.T) {
	show := func(e ledger.Entry) string {
		s, err := rowJSON(row("label", e))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := show(filltest.Filled[ledger.Entry]())
	filltest.Vary(func(path string, changed ledger.Entry) {
		if !filltest.NotInLedger(path) && show(changed) == base {
			t.Errorf("the sink's row does not have %s", path)
		}
	})
}

// Every field of a ledger entry reaches the table: each variant of a
// filled entry, inserted on its own, reads back differently. On
// test/integration's PostgreSQL.
func TestTableHasEveryField(t *testing.T) {
	dbURL := freshDatabase(t, "ledgersink_fields")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := migrate(ctx, conn); err != nil {
		t.Fatal(err)
	}
	stored := func(e ledger.Entry) string {
		t.Helper()
		if _, err := conn.Exec(ctx, `TRUNCATE ledger`); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, insertSQL, row("label", e)...); err != nil {
			t.Fatal(err)
		}
		var s string
		if err := conn.QueryRow(ctx, `SELECT (to_jsonb(l) - 'copied_at')::text FROM ledger l`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	base := stored(filltest.Filled[ledger.Entry]())
	filltest.Vary(func(path string, changed ledger.Entry) {
		if !filltest.NotInLedger(path) && stored(changed) == base {
			t.Errorf("the ledger table does not keep %s", path)
		}
	})
}
