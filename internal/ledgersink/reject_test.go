package ledgersink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pgtest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
)

func TestDataError(t *testing.T) {
	for code, want := range map[string]bool{
		"22021": true, "22P05": true, "22001": true, "22003": true, "23502": true, "23514": true, "23505": true,
		"08006": false, "57014": false, "42P01": false, "42501": false, "53300": false, "": false,
	} {
		err := fmt.Errorf("copying: %w", &pgconn.PgError{Code: code})
		if _, got := dataError(err); got != want {
			t.Errorf("SQLSTATE %q: data error %v, want %v", code, got, want)
		}
	}
	if _, got := dataError(errors.New("connection reset")); got {
		t.Error("a connection error is a data error")
	}
	if _, got := dataError(nil); got {
		t.Error("nil is a data error")
	}
}

// A row with a NUL and invalid UTF-8 becomes JSON that PostgreSQL's
// jsonb stores: no NUL byte, no \u0000 escape, valid UTF-8, the bytes
// spelled out as text, every column named, the rest exact.
func TestRowJSONIsStorable(t *testing.T) {
	r := row("<lab\xffel>", ledger.Entry{ID: "1700000000000-3", Settlement: account.Settlement{
		RequestID: "req_1", AccountID: "acct_a", Priced: "bad\x00model", Requested: "x\xfe\xffy", Reported: "ok é", Cost: -42,
	}})
	s, err := rowJSON(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsRune(s, 0) || !utf8.ValidString(s) || strings.Contains(s, `\u0000`) && !strings.Contains(s, `\\u0000`) {
		t.Fatalf("not storable as jsonb: %q", s)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(s), &obj); err != nil {
		t.Fatal(err)
	}
	if len(obj) != len(insertColumns) {
		t.Fatalf("%d keys, %d columns", len(obj), len(insertColumns))
	}
	for k, want := range map[string]any{
		"model": `bad\u0000model`, "model_requested": `x\xFE\xFFy`, "model_reported": "ok é", "key_label": `<lab\xFFel>`,
		"cost_nano_usd": float64(-42), "request_id": "req_1", "entry_id": "1700000000000-3", "start_time": nil,
	} {
		if obj[k] != want {
			t.Errorf("%s = %#v, want %#v", k, obj[k], want)
		}
	}
}

// freshDatabase creates an empty database on test/integration's
// PostgreSQL server and returns its URL (TestMigrateKeepsRows leaves the
// provided one at a schema version no sink accepts).
func freshDatabase(t *testing.T, name string) string {
	t.Helper()
	base := pgtest.Provided(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+name); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// Entries PostgreSQL refuses (a NUL in the priced model, invalid UTF-8 in
// the requested one), in the account listed first, at the start, middle
// and end of pages: each is set aside in ledger_rejects with its SQLSTATE,
// every other entry of every account is copied exactly once, the cursor
// passes them, the database stays up, and the counter and the gauge the
// alert reads count them. A second pass changes nothing. On
// test/integration's PostgreSQL.
func TestRefusedEntriesSetAside(t *testing.T) {
	dbURL := freshDatabase(t, "ledgersink_rejects")
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	clk := testclock.New(time.Now())
	st := store.New(rdb, store.Options{Now: clk.Now})

	settle := func(acct, req, model string) {
		t.Helper()
		if d, err := st.Admit(ctx, &account.Admission{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Hold: 10}); err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit %s: %v %v", req, d.Outcome, err)
		}
		s := account.Settlement{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Requested: "m", Status: 200, Cost: 7}
		switch model {
		case "nul":
			s.Priced = "bad\x00model"
		case "utf8":
			s.Requested = "bad\xff\xfe"
		}
		if _, err := st.Settle(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	var accounts []string
	for i := range 3 {
		a, err := st.CreateAccount(ctx, fmt.Sprint("acct", i), 1_000_000_000, account.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		accounts = append(accounts, a.ID)
		clk.Advance(time.Second) // listed in order of creation
	}
	bad := accounts[0]
	// With pages of 3: the first page starts with a refused entry, the
	// second has one in the middle, the third ends with two.
	plan := []string{"nul", "", "", "", "utf8", "", "", "nul", "utf8"}
	want := map[string]bool{} // account|request id of every good entry
	var refused []string
	for i, kind := range plan {
		req := fmt.Sprintf("req_bad_%d", i)
		settle(bad, req, kind)
		if kind == "" {
			want[bad+"|"+req] = true
		} else {
			refused = append(refused, req)
		}
	}
	for _, a := range accounts[1:] {
		for i := range 5 {
			req := fmt.Sprintf("req_%s_%d", a, i)
			settle(a, req, "")
			want[a+"|"+req] = true
		}
	}
	if accts, err := st.ListAccounts(ctx); err != nil || accts[0].ID != bad {
		t.Fatalf("the account with refused entries is not listed first: %v", err)
	}

	reg := prometheus.NewRegistry()
	s := New(st, Options{DatabaseURL: dbURL, PageSize: 3, Registerer: reg})
	defer s.disconnect()
	n, err := s.Pass(ctx)
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	if n != len(want) || !s.CaughtUp() {
		t.Fatalf("inserted %d, want %d; caught up %v", n, len(want), s.CaughtUp())
	}

	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	check := func(when string) {
		t.Helper()
		rows, err := db.Query(ctx, `SELECT account_id, request_id FROM ledger`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for rows.Next() {
			var a, r string
			if err := rows.Scan(&a, &r); err != nil {
				t.Fatal(err)
			}
			if got[a+"|"+r] {
				t.Errorf("%s: %s %s copied twice", when, a, r)
			}
			got[a+"|"+r] = true
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: ledger holds %v, want %v", when, got, want)
		}
		rows, err = db.Query(ctx, `SELECT account_id, entry->>'request_id', entry->>'model', entry->>'model_requested', error_code, error
			FROM ledger_rejects ORDER BY entry_id`)
		if err != nil {
			t.Fatal(err)
		}
		var rejects []string
		for rows.Next() {
			var a, req, model, requested, code, msg string
			if err := rows.Scan(&a, &req, &model, &requested, &code, &msg); err != nil {
				t.Fatal(err)
			}
			if a != bad || code != "22021" || !strings.Contains(msg, "invalid byte sequence") {
				t.Errorf("%s: reject %s: account %s, code %s, %q", when, req, a, code, msg)
			}
			if i := strings.LastIndexByte(req, '_'); plan[req[i+1]-'0'] == "nul" && model != `bad\u0000model` ||
				plan[req[i+1]-'0'] == "utf8" && requested != `bad\xFF\xFE` {
				t.Errorf("%s: reject %s: model %s, requested %q", when, req, model, requested)
			}
			rejects = append(rejects, req)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(rejects) != fmt.Sprint(refused) {
			t.Fatalf("%s: rejects %v, want %v", when, rejects, refused)
		}
		last, _, err := st.Ledger(ctx, bad, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		var cursor string
		if err := db.QueryRow(ctx, `SELECT entry_id FROM ledger_sink_cursor WHERE account_id = $1`, bad).Scan(&cursor); err != nil || cursor != last[len(last)-1].ID {
			t.Fatalf("%s: cursor %q (%v), want the last entry %s", when, cursor, err, last[len(last)-1].ID)
		}
		if mark, err := st.SinkMark(ctx, bad); err != nil || mark != cursor {
			t.Fatalf("%s: sink mark %q (%v), want %s", when, mark, err, cursor)
		}
		for name, m := range map[string]prometheus.Collector{
			"rejected_total": s.reject, "rejects": s.rejects, "database_up": s.dbUp, "lag": s.lag, "database errors": s.errs,
		} {
			w := map[string]float64{"rejected_total": float64(len(refused)), "rejects": float64(len(refused)), "database_up": 1}[name]
			if got := testutil.ToFloat64(onlyDatabase(m)); got != w {
				t.Errorf("%s: %s = %v, want %v", when, name, got, w)
			}
		}
	}
	check("first pass")
	if n, err := s.Pass(ctx); err != nil || n != 0 {
		t.Fatalf("second pass: %d inserted, %v", n, err)
	}
	check("second pass")
}

// onlyDatabase picks the database series of the errors counter.
func onlyDatabase(c prometheus.Collector) prometheus.Collector {
	if v, ok := c.(*prometheus.CounterVec); ok {
		return v.WithLabelValues("database")
	}
	return c
}
