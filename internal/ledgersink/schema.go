package ledgersink

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/modelgateway/gateway/internal/usage"
)

// migrations are the schema's versions, in order: migration i brings the
// schema from version i to i+1. A released migration is never edited; a
// change is a new one (a new ledger field becomes a column with a default,
// so that the rows already copied stay valid).
var migrations = []string{
	// 1: the ledger and the sink's cursor.
	`CREATE TABLE ledger (
	account_id             text        NOT NULL,
	entry_id               text        NOT NULL, -- the entry's id in the account's ledger (gatewayctl ledger export's "id")
	settled_at             timestamptz NOT NULL, -- when the store appended the entry (the time in entry_id)
	request_id             text        NOT NULL,
	key_id                 text        NOT NULL,
	key_label              text        NOT NULL,
	model                  text        NOT NULL, -- the priced catalogue entry
	model_requested        text        NOT NULL,
	model_reported         text        NOT NULL,
	input_tokens           bigint      NOT NULL,
	output_tokens          bigint      NOT NULL, -- reasoning included
	cache_read_tokens      bigint      NOT NULL,
	cache_write_5m_tokens  bigint      NOT NULL,
	cache_write_1h_tokens  bigint      NOT NULL,
	audio_input_tokens     bigint      NOT NULL,
	audio_output_tokens    bigint      NOT NULL,
	reasoning_tokens       bigint      NOT NULL, -- part of output_tokens, not priced on its own
	web_searches           bigint      NOT NULL,
	-- Unit prices applied, nano-USD per million units (tokens; searches).
	price_input            bigint      NOT NULL,
	price_output           bigint      NOT NULL,
	price_cache_read       bigint      NOT NULL,
	price_cache_write_5m   bigint      NOT NULL,
	price_cache_write_1h   bigint      NOT NULL,
	price_audio_input      bigint      NOT NULL,
	price_audio_output     bigint      NOT NULL,
	price_web_searches     bigint      NOT NULL,
	service_tier           text        NOT NULL, -- '' for the standard tier
	long_context_threshold bigint      NOT NULL, -- tokens; 0 for none
	cost_nano_usd          bigint      NOT NULL, -- 0 for a non-2xx status
	status                 integer     NOT NULL, -- the HTTP status the client saw
	flags                  text[]      NOT NULL, -- estimated, fallback_price, interrupted, and any added later
	endpoint               text        NOT NULL, -- primary or reserve; '' when unknown
	stream                 boolean     NOT NULL,
	start_time             timestamptz,
	end_time               timestamptz,
	copied_at              timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, entry_id)
);
CREATE INDEX ledger_account_end_time ON ledger (account_id, end_time);
CREATE INDEX ledger_end_time ON ledger (end_time);
CREATE TABLE ledger_sink_cursor (
	account_id text        PRIMARY KEY,
	entry_id   text        NOT NULL, -- the last entry copied
	updated_at timestamptz NOT NULL DEFAULT now()
);`,
	// 2: built-in tool calls of the Responses API, counted and priced.
	`ALTER TABLE ledger
	ADD COLUMN file_searches                   bigint NOT NULL DEFAULT 0,
	ADD COLUMN code_interpreter_sessions       bigint NOT NULL DEFAULT 0,
	ADD COLUMN image_generations               bigint NOT NULL DEFAULT 0,
	ADD COLUMN price_file_searches             bigint NOT NULL DEFAULT 0,
	ADD COLUMN price_code_interpreter_sessions bigint NOT NULL DEFAULT 0,
	ADD COLUMN price_image_generations         bigint NOT NULL DEFAULT 0;`,
	// 3: the regional processing uplift.
	`ALTER TABLE ledger
	ADD COLUMN regional_processing text   NOT NULL DEFAULT '', -- the region whose uplift applied; '' for none
	ADD COLUMN regional_uplift_ppm bigint NOT NULL DEFAULT 0;  -- the uplift applied, in millionths of the cost`,
	// 4: entries PostgreSQL refused, set aside so that the rest keep flowing.
	`CREATE TABLE ledger_rejects (
	account_id  text        NOT NULL,
	entry_id    text        NOT NULL,
	entry       jsonb       NOT NULL, -- the ledger row refused, by column name; a NUL as the text \u0000, a byte not UTF-8 as \xHH
	error_code  text        NOT NULL, -- the SQLSTATE PostgreSQL refused the row with
	error       text        NOT NULL, -- its message
	rejected_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (account_id, entry_id)
);`,
	// 5: input audio billed by duration.
	`ALTER TABLE ledger
	ADD COLUMN audio_seconds       bigint NOT NULL DEFAULT 0, -- whole seconds of input audio
	ADD COLUMN price_audio_seconds bigint NOT NULL DEFAULT 0; -- nano-USD per million seconds`,
	// 6: how the request came: '' for HTTP, 'websocket' for the Responses
	// API's WebSocket transport.
	`ALTER TABLE ledger ADD COLUMN transport text NOT NULL DEFAULT '';`,
	// 7: the vendor key that served, by name (a pool of keys).
	`ALTER TABLE ledger
	ADD COLUMN vendor_key text NOT NULL DEFAULT ''; -- upstreams[].keys name, "default" for credential_env; '' when unknown`,
	// 8: the project the request counted against.
	`ALTER TABLE ledger
	ADD COLUMN project_id text NOT NULL DEFAULT ''; -- '' for the account's default project`,
	// 9: image generation: image tokens, and images priced per image.
	`ALTER TABLE ledger
	ADD COLUMN image_input_tokens  bigint NOT NULL DEFAULT 0,
	ADD COLUMN image_output_tokens bigint NOT NULL DEFAULT 0,
	ADD COLUMN images              bigint NOT NULL DEFAULT 0,
	ADD COLUMN price_image_input   bigint NOT NULL DEFAULT 0, -- nano-USD per million tokens
	ADD COLUMN price_image_output  bigint NOT NULL DEFAULT 0,
	ADD COLUMN price_images        bigint NOT NULL DEFAULT 0; -- nano-USD per million images`,
	// 10: the audit trail (admin API and consoles), with its own cursor.
	`CREATE TABLE audit (
	entry_id   text        PRIMARY KEY, -- the entry's id in the store's audit stream
	at         timestamptz NOT NULL,
	actor      text        NOT NULL, -- the admin API's x-admin-actor, console:NAME, or sso:PERSON
	origin     text        NOT NULL, -- the client address; '' for entries older than it
	action     text        NOT NULL, -- e.g. account.limits, key.create; a refused change names its console route
	account_id text        NOT NULL,
	key_id     text        NOT NULL,
	detail     text        NOT NULL,
	before     jsonb,                -- the changed state before; NULL for none
	after      jsonb,                -- and after
	outcome    text        NOT NULL, -- '' for a change made, 'refused' for one the actor's role did not allow
	copied_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_account_at ON audit (account_id, at);
CREATE TABLE audit_sink_cursor (
	one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
	entry_id   text        NOT NULL, -- the last audit entry copied
	updated_at timestamptz NOT NULL DEFAULT now()
);`,
	// 11: the continuous reconciliation's kept windows, a row per vendor
	// key and model, and the sink's cursor over them.
	`CREATE TABLE reconciliation (
	bucket_width              text        NOT NULL, -- '1h' or '1m'
	window_start              timestamptz NOT NULL,
	upstream                  text        NOT NULL,
	vendor_key_id             text        NOT NULL, -- the vendor's id of the key
	vendor_key                text        NOT NULL, -- the gateway's name for it; '' for an id the configuration does not name
	model                     text        NOT NULL,
	vendor                    jsonb       NOT NULL, -- the vendor's usage by kind (the ledger's kind names)
	ledger                    jsonb       NOT NULL,
	explained                 jsonb       NOT NULL, -- by class: {"usage": {...}, "cost_nano_usd": N}
	unexplained               jsonb       NOT NULL, -- usage by kind, either sign
	ledger_cost_nano_usd      bigint      NOT NULL,
	vendor_cost_nano_usd      bigint      NOT NULL, -- the vendor's usage at the ledger's prices
	unexplained_cost_nano_usd bigint      NOT NULL,
	entries                   integer     NOT NULL,
	estimated                 integer     NOT NULL,
	abandoned                 integer     NOT NULL,
	copied_at                 timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (bucket_width, window_start, upstream, vendor_key_id, vendor_key, model)
);
CREATE TABLE reconciliation_sink_cursor (
	bucket_width text        PRIMARY KEY,
	window_start timestamptz NOT NULL, -- the last window copied
	updated_at   timestamptz NOT NULL DEFAULT now()
);`,
}

// SchemaVersion is the version the sink migrates a database to.
var SchemaVersion = len(migrations)

// schemaLock is the transaction-level advisory lock under which the schema
// is migrated, so that two sinks starting at once do not both migrate.
const schemaLock = 0x6c656467 // "ledg"

// usageColumns names the column of each usage kind (usage.Kind.Column) and
// of its unit price ("price_" and its name; empty for a kind that is not
// priced). A usage kind added to the ledger needs its columns in a
// migration; a test fails until it has them.
var usageColumns = func() map[string][2]string {
	m := map[string][2]string{}
	for _, k := range usage.Kinds {
		c := [2]string{k.Column(), ""}
		if k.Priced() {
			c[1] = "price_" + k.Name
		}
		m[k.Name] = c
	}
	return m
}()

// migrate brings the database's schema to SchemaVersion in one transaction
// (a failed step leaves the schema as it was), and refuses a database
// migrated by a newer sink.
func migrate(ctx context.Context, conn *pgx.Conn) error { return migrateTo(ctx, conn, SchemaVersion) }

// migrateTo migrates to version want (tests stop at older versions).
func migrateTo(ctx context.Context, conn *pgx.Conn, want int) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS ledger_schema_version (version integer NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var v int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM ledger_schema_version`).Scan(&v); err != nil {
		return fmt.Errorf("migrate: reading the version: %w", err)
	}
	if v > SchemaVersion {
		return fmt.Errorf("migrate: the database has schema version %d, newer than this sink's %d; run a newer sink", v, SchemaVersion)
	}
	for ; v < want; v++ {
		if _, err := tx.Exec(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrate: to version %d: %w", v+1, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger_schema_version (version) VALUES ($1)`, v+1); err != nil {
			return fmt.Errorf("migrate: to version %d: %w", v+1, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// insertColumns are the columns insertSQL fills, in row's order.
var insertColumns = func() []string {
	cols := []string{"account_id", "entry_id", "settled_at", "request_id", "key_id", "key_label",
		"model", "model_requested", "model_reported"}
	for _, k := range usage.Kinds {
		c := usageColumns[k.Name]
		cols = append(cols, c[0])
		if k.Priced() {
			cols = append(cols, c[1])
		}
	}
	return append(cols, "service_tier", "long_context_threshold", "cost_nano_usd", "status", "flags",
		"endpoint", "stream", "start_time", "end_time", "regional_processing", "regional_uplift_ppm", "transport", "vendor_key", "project_id")
}()

// insertSQL is the statement that copies one entry; a replay does nothing.
var insertSQL = func() string {
	q := "INSERT INTO ledger ("
	vals := ""
	for i, c := range insertColumns {
		if i > 0 {
			q += ", "
			vals += ", "
		}
		q += c
		vals += fmt.Sprintf("$%d", i+1)
	}
	return q + ") VALUES (" + vals + ") ON CONFLICT (account_id, entry_id) DO NOTHING"
}()
