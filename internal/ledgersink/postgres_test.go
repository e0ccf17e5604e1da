package ledgersink

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/gateway/internal/pgtest"
)

// A database at an older schema version is migrated in place, its rows
// kept (new columns take their defaults); migrating again changes nothing;
// a database from a newer sink is refused. On test/integration's
// PostgreSQL.
func TestMigrateKeepsRows(t *testing.T) {
	url := pgtest.Provided(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := migrateTo(ctx, conn, 1); err != nil {
		t.Fatal(err)
	}
	// A row as the first version wrote it.
	cols := "account_id, entry_id, settled_at, request_id, key_id, key_label, model, model_requested, model_reported, " +
		"input_tokens, output_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, audio_input_tokens, " +
		"audio_output_tokens, reasoning_tokens, web_searches, price_input, price_output, price_cache_read, price_cache_write_5m, " +
		"price_cache_write_1h, price_audio_input, price_audio_output, price_web_searches, service_tier, long_context_threshold, " +
		"cost_nano_usd, status, flags, endpoint, stream"
	if _, err := conn.Exec(ctx, `INSERT INTO ledger (`+cols+`) VALUES ('acct_a', '1-0', now(), 'r1', 'k1', 'l', 'm', 'm', 'm',
		1, 2, 0, 0, 0, 0, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0, 0, '', 0, 11, 200, '{}', 'primary', false)`); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := migrate(ctx, conn); err != nil {
			t.Fatal(err)
		}
	}
	var v, n, cost, files int64
	if err := conn.QueryRow(ctx, `SELECT max(version), count(*) FROM ledger_schema_version`).Scan(&v, &n); err != nil || v != int64(SchemaVersion) || n != int64(SchemaVersion) {
		t.Fatalf("schema version %d in %d rows (%v), want %d", v, n, err, SchemaVersion)
	}
	if err := conn.QueryRow(ctx, `SELECT cost_nano_usd, file_searches FROM ledger WHERE entry_id = '1-0'`).Scan(&cost, &files); err != nil || cost != 11 || files != 0 {
		t.Fatalf("the old row after migrating: cost %d, file_searches %d (%v)", cost, files, err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO ledger_schema_version (version) VALUES (999)`); err != nil {
		t.Fatal(err)
	}
	if err := migrate(ctx, conn); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("a newer schema was not refused: %v", err)
	}
}
