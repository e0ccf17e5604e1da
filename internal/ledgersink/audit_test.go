package ledgersink

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/store"
)

// Every audit entry is copied once, its fields exact, before and after as
// jsonb (NULL for none), a refusal kept as refused; a second pass and a
// new sink (a restart) copy nothing again, and a later entry follows. On
// test/integration's PostgreSQL.
func TestAuditCopied(t *testing.T) {
	dbURL := freshDatabase(t, "ledgersink_audit")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	entries := []audit.Entry{
		{Actor: "console:sso:ann@example.com", Origin: "10.0.0.7", Action: "account.limits", AccountID: "acct_a",
			Before: `{"limits":{"RPM":10}}`, After: `{"limits":{"RPM":20}}`, Detail: "rpm=20", At: at},
		{Actor: "sso:bill@example.com", Origin: "10.0.0.8", Action: "POST /console/api/keys", AccountID: "acct_a",
			Outcome: audit.OutcomeRefused, At: at.Add(time.Second)},
		{Actor: "gatewayctl", Origin: "127.0.0.1:5000", Action: "key.create", AccountID: "acct_b", KeyID: "key_1",
			After: `{"kind":"model","label":"ci"}`, At: at.Add(2 * time.Second)},
	}
	for _, e := range entries {
		if err := st.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	pass := func(want int) {
		t.Helper()
		sink := New(st, Options{DatabaseURL: dbURL})
		defer sink.disconnect()
		n, err := sink.Pass(ctx)
		if err != nil || n != want {
			t.Fatalf("pass: %d inserted (%v), want %d", n, err, want)
		}
		if n, err := sink.Pass(ctx); err != nil || n != 0 {
			t.Fatalf("a second pass: %d inserted (%v)", n, err)
		}
	}
	pass(len(entries))
	pass(0) // a restart resumes after its cursor
	if err := st.AppendAudit(ctx, audit.Entry{Actor: "gatewayctl", Action: "account.suspend", AccountID: "acct_b",
		Before: `{"suspended":false}`, After: `{"suspended":true}`}); err != nil {
		t.Fatal(err)
	}
	pass(1)

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT at, actor, origin, action, account_id, key_id, detail, before::text, after::text, outcome FROM audit ORDER BY at, entry_id`)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		at                                                   time.Time
		actor, origin, action, account, key, detail, outcome string
		before, after                                        *string
	}
	var all []got
	for rows.Next() {
		var g got
		if err := rows.Scan(&g.at, &g.actor, &g.origin, &g.action, &g.account, &g.key, &g.detail, &g.before, &g.after, &g.outcome); err != nil {
			t.Fatal(err)
		}
		all = append(all, g)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(all) != len(entries)+1 {
		t.Fatalf("%d rows, want %d", len(all), len(entries)+1)
	}
	str := func(p *string) string {
		if p == nil {
			return "NULL"
		}
		return *p
	}
	for i, e := range entries {
		g := all[i]
		if !g.at.Equal(e.At) || g.actor != e.Actor || g.origin != e.Origin || g.action != e.Action || g.account != e.AccountID ||
			g.key != e.KeyID || g.detail != e.Detail || g.outcome != e.Outcome {
			t.Errorf("row %d: %+v, want %+v", i, g, e)
		}
	}
	if b, a := str(all[0].before), str(all[0].after); b != `{"limits": {"RPM": 10}}` || a != `{"limits": {"RPM": 20}}` {
		t.Errorf("before/after of the limits change: %s → %s", b, a)
	}
	if all[1].before != nil || all[1].after != nil || all[1].outcome != audit.OutcomeRefused {
		t.Errorf("the refusal: %s → %s, outcome %q", str(all[1].before), str(all[1].after), all[1].outcome)
	}
	if all[2].before != nil || str(all[2].after) != `{"kind": "model", "label": "ci"}` {
		t.Errorf("the creation: %s → %s", str(all[2].before), str(all[2].after))
	}
}
