package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// sinkProc is a running `gateway ledger-sink`.
type sinkProc struct {
	t       *testing.T
	proc    *launch.Process
	metrics string // its /metrics URL
	start   func() *launch.Process
}

// startLedgerSink starts the sink on the stack's config with retention as
// its store.ledger_retention.
func startLedgerSink(t *testing.T, s *launch.Stack, pg *launch.Postgres, retention time.Duration) *sinkProc {
	t.Helper()
	addrs, err := launch.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg := *s.Config
	cfg.Store.LedgerRetention = config.Duration(retention)
	b, err := yaml.Marshal(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(s.Dir, "ledger-sink.yaml")
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := launchtest.Binary(t, "gateway")
	sp := &sinkProc{t: t, metrics: "http://" + addrs[0] + "/metrics"}
	sp.start = func() *launch.Process {
		p, err := launch.StartProcess("ledger-sink", bin,
			[]string{"ledger-sink", "--config", cfgPath, "--listen", addrs[0], "--log-level", "debug"},
			[]string{"REDIS_URL=redis://" + s.RedisAddr, "DATABASE_URL=" + pg.URL},
			filepath.Join(s.Dir, "ledger-sink.log"))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := launch.WaitHTTP(ctx, "http://"+addrs[0]+"/health", p); err != nil {
			t.Fatalf("%v\n%s", err, p.Tail(20))
		}
		return p
	}
	sp.proc = sp.start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("--- ledger sink log ---\n" + sp.proc.Log())
		}
		sp.proc.Stop()
	})
	return sp
}

// metric reads one unlabelled sample of the sink's /metrics; -1 when absent.
func (sp *sinkProc) metric(name string) float64 {
	resp, err := http.Get(sp.metrics)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// exportLine is one line of `gatewayctl ledger export`.
type exportLine struct {
	ID             string            `json:"id"`
	RequestID      string            `json:"request_id"`
	KeyID          string            `json:"key_id"`
	Model          string            `json:"model"`
	ModelRequested string            `json:"model_requested"`
	ModelReported  string            `json:"model_reported"`
	Usage          map[string]string `json:"usage"`
	Prices         map[string]string `json:"prices_nano_usd_per_million"`
	CostNanoUSD    int64             `json:"cost_nano_usd,string"`
	Status         int               `json:"status"`
	Endpoint       string            `json:"endpoint"`
	Stream         bool              `json:"stream"`
	Estimated      bool              `json:"estimated"`
	Fallback       bool              `json:"fallback_price"`
	Interrupted    bool              `json:"interrupted"`
	Reconciled     bool              `json:"reconciled"`
	Capped         bool              `json:"capped"`
	TierUnknown    bool              `json:"tier_unknown"`
	EndTime        time.Time         `json:"end_time"`
}

func readExport(t *testing.T, path string) []exportLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []exportLine
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l exportLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// sqlQueries reads the named queries of docs/ledger-sink.sql.
func sqlQueries(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(launchtest.RepoRoot(t), "docs", "ledger-sink.sql"))
	if err != nil {
		t.Fatal(err)
	}
	qs := map[string]string{}
	for _, part := range strings.Split(string(b), "-- name: ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		qs[strings.TrimSpace(name)] = body
	}
	return qs
}

// The ledger arrives in PostgreSQL, every entry exactly once, while requests
// settle on three accounts, from a backlog on: across a sink killed mid-stream and restarted,
// and across a database stopped and started again (requests keep being
// served meanwhile; the sink's lag grows, and trimming after exports with a
// one-millisecond retention removes nothing the sink has not copied).
// SUM(cost_nano_usd) per account equals the balance change; the invoice
// query of docs/ledger-sink.sql equals the export summed by month; each row
// equals its export line; the reconciliation query finds exactly the
// difference planted in a vendor report.
func TestLedgerSink(t *testing.T) {
	pg := launchtest.Postgres(t)
	s := launchtest.Start(t, launch.Options{
		SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken},
		// The sidecar's exports do not trim; the sink (and the test's
		// trimmer, as an export would) trim with a retention of 1ms.
		Configure: func(c *config.Config) { c.LedgerSink.Interval = config.Duration(20 * time.Millisecond) },
	})
	ctl := adminCtl(t, s)
	const initial = 10_000_000_000
	accounts := []launch.Account{s.NewAccount(10, noLimits), s.NewAccount(10, noLimits), s.NewAccount(10, noLimits)}
	exports := make([]string, len(accounts))
	for i := range accounts {
		exports[i] = filepath.Join(t.TempDir(), "ledger.jsonl")
	}
	exportAll := func() {
		t.Helper()
		for i, a := range accounts {
			ctl.ok("ledger", "export", a.ID, "--out", exports[i], "--page-size", "50")
		}
	}
	ctx := context.Background()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	next := 0
	// load sends n requests from 8 clients across the accounts and routes,
	// some streamed, some cut by the client; midway calls during (if any)
	// while the rest are in flight.
	load := func(n int, during func()) {
		t.Helper()
		var wg sync.WaitGroup
		work := make(chan int)
		for range 8 {
			wg.Go(func() {
				for i := range work {
					a := accounts[i%len(accounts)]
					path, h, body := requestFor([]string{"alpha", "beta"}[i/3%2], a.Key, i%4 == 0)
					cut := 0
					if i%4 == 0 && i%8 == 0 {
						cut = 200
					}
					r := postAndRead(client, s.URL+path, h, body, cut, nil)
					if r.status != 200 {
						t.Errorf("request %d: %d %v", i, r.status, r.err)
					}
				}
			})
		}
		for k := range n {
			if k == n/2 && during != nil {
				during()
			}
			work <- next
			next++
		}
		close(work)
		wg.Wait()
	}

	// 0: a backlog the exports have copied (and so hold back the sink's
	// trimming from then on) before the sink starts.
	load(12, nil)
	for _, a := range accounts {
		waitNoHolds(t, s, a.ID)
	}
	exportAll()
	trimmer := store.New(s.RDB, store.Options{LedgerRetention: time.Millisecond})
	sink := startLedgerSink(t, s, pg, time.Millisecond)
	db, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close(context.Background()) }()
	rowCount := func() (int, error) {
		var n int
		err := db.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&n)
		return n, err
	}
	// 1: the sink is killed mid-stream, once it has copied the backlog, and
	// started again.
	load(78, func() {
		eventually.That(t, 10*time.Second, "the backlog copied", func() (bool, string) {
			n, err := rowCount()
			return err == nil && n >= 12, fmt.Sprint(n, err)
		})
		sink.proc.Signal(syscall.SIGKILL)
		sink.proc.Wait(10 * time.Second)
		sink.proc = sink.start()
	})
	exportAll()
	// 2: the database goes away; requests are served as before, exports
	// commit and trim, and the sink only falls behind.
	pg.Stop()
	load(60, nil)
	for _, a := range accounts {
		waitNoHolds(t, s, a.ID)
	}
	exportAll()
	// Exported, not copied: trimming keeps every entry the sink has not.
	for _, a := range accounts {
		if _, err := trimmer.TrimLedger(ctx, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	eventually.That(t, 10*time.Second, "the sink to report the database down and a lag", func() (bool, string) {
		up, lag := sink.metric("gateway_ledger_sink_database_up"), sink.metric("gateway_ledger_sink_lag_seconds")
		return up == 0 && lag > 0, fmt.Sprintf("database_up %v, lag %v", up, lag)
	})
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	// 3: the database is back while requests settle.
	load(90, nil)
	for _, a := range accounts {
		waitNoHolds(t, s, a.ID)
	}
	exportAll()
	const total = 240

	// The test's session did not survive the restart.
	db.Close(ctx)
	if db, err = pgx.Connect(ctx, pg.URL); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 20*time.Second, "every entry in PostgreSQL and the lag back to 0", func() (bool, string) {
		n, err := rowCount()
		if err != nil {
			return false, err.Error()
		}
		lag := sink.metric("gateway_ledger_sink_lag_seconds")
		return n == total && lag == 0, fmt.Sprintf("%d rows, lag %v", n, lag)
	})

	// Every row equals its export line, exactly once.
	byMonth := map[string]int64{} // account|YYYY-MM-01 -> cost, from the exports
	for i, a := range accounts {
		lines := readExport(t, exports[i])
		rows, err := db.Query(ctx, `SELECT entry_id, request_id, key_id, key_label, model, model_requested, model_reported,
			input_tokens, output_tokens, cache_read_tokens, cache_write_5m_tokens, price_input, price_output,
			cost_nano_usd, status, flags, endpoint, stream, end_time
			FROM ledger WHERE account_id = $1`, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		type dbRow struct {
			requestID, keyID, label, model, requested, reported, endpoint string
			in, out, cacheRead, cacheWrite, priceIn, priceOut, cost       int64
			status                                                        int
			flags                                                         []string
			stream                                                        bool
			end                                                           time.Time
		}
		got := map[string]dbRow{}
		var sum int64
		for rows.Next() {
			var id string
			var r dbRow
			if err := rows.Scan(&id, &r.requestID, &r.keyID, &r.label, &r.model, &r.requested, &r.reported,
				&r.in, &r.out, &r.cacheRead, &r.cacheWrite, &r.priceIn, &r.priceOut,
				&r.cost, &r.status, &r.flags, &r.endpoint, &r.stream, &r.end); err != nil {
				t.Fatal(err)
			}
			got[id] = r
			sum += r.cost
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(lines) != len(got) || len(lines) != total/len(accounts) {
			t.Fatalf("%s: %d export lines, %d rows, %d requests sent", a.ID, len(lines), len(got), total/len(accounts))
		}
		for _, l := range lines {
			r, ok := got[l.ID]
			var flags []string
			for f, on := range map[string]bool{"estimated": l.Estimated, "fallback_price": l.Fallback, "interrupted": l.Interrupted,
				"reconciled": l.Reconciled, "capped": l.Capped, "tier_unknown": l.TierUnknown} {
				if on {
					flags = append(flags, f)
				}
			}
			slices.Sort(flags)
			slices.Sort(r.flags)
			n := func(m map[string]string, k string) int64 { v, _ := strconv.ParseInt(m[k], 10, 64); return v }
			want := dbRow{l.RequestID, l.KeyID, "test", l.Model, l.ModelRequested, l.ModelReported, l.Endpoint,
				n(l.Usage, "input"), n(l.Usage, "output"), n(l.Usage, "cache_read"), n(l.Usage, "cache_write_5m"),
				n(l.Prices, "input"), n(l.Prices, "output"), l.CostNanoUSD, l.Status, flags, l.Stream, l.EndTime}
			r.end, want.end = r.end.UTC(), want.end.UTC()
			if !ok || fmt.Sprint(r) != fmt.Sprint(want) {
				t.Errorf("%s entry %s: row %+v, export %+v", a.ID, l.ID, r, want)
			}
			m := time.Date(l.EndTime.UTC().Year(), l.EndTime.UTC().Month(), 1, 0, 0, 0, 0, time.UTC)
			byMonth[a.ID+"|"+m.Format("2006-01-02")] += l.CostNanoUSD
		}
		rep, err := s.Store.Usage(ctx, a.ID, "total")
		if err != nil {
			t.Fatal(err)
		}
		if sum != initial-rep.Balance {
			t.Errorf("%s: SUM(cost_nano_usd) %d, balance change %d", a.ID, sum, initial-rep.Balance)
		}
	}
	var dup int
	if err := db.QueryRow(ctx, `SELECT count(*) - count(DISTINCT request_id) FROM ledger`).Scan(&dup); err != nil || dup != 0 {
		t.Fatalf("%d requests in the table more than once (%v)", dup, err)
	}

	// The invoice query equals the exports summed by month.
	qs := sqlQueries(t)
	rows, err := db.Query(ctx, qs["invoice"])
	if err != nil {
		t.Fatal(err)
	}
	invoiced := map[string]int64{}
	for rows.Next() {
		var acct string
		var month time.Time
		var ok, failed, est, cost int64
		var usd any
		if err := rows.Scan(&acct, &month, &ok, &failed, &est, &cost, &usd); err != nil {
			t.Fatal(err)
		}
		invoiced[acct+"|"+month.Format("2006-01-02")] = cost
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if fmt.Sprint(invoiced) != fmt.Sprint(byMonth) {
		t.Fatalf("invoice query %v, exports summed by month %v", invoiced, byMonth)
	}

	// The other queries run; reconciliation finds exactly a planted
	// difference in a vendor report otherwise equal to the ledger.
	month := time.Now().UTC().Format("2006-01") + "-01"
	for _, name := range []string{"invoice_lines", "spend_per_key_per_day", "vendor_usage_table"} {
		if _, err := db.Exec(ctx, strings.ReplaceAll(qs[name], ":'month'", "'"+month+"'")); err != nil {
			t.Fatalf("query %s: %v", name, err)
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO vendor_usage (day, model, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
		SELECT (end_time AT TIME ZONE 'UTC')::date, coalesce(nullif(model_reported, ''), model), sum(input_tokens), sum(output_tokens),
			sum(cache_read_tokens), sum(cache_write_5m_tokens + cache_write_1h_tokens)
		FROM ledger WHERE status BETWEEN 200 AND 299 GROUP BY 1, 2`); err != nil {
		t.Fatal(err)
	}
	var planted string
	if err := db.QueryRow(ctx, `UPDATE vendor_usage SET output_tokens = output_tokens + 7
		WHERE (day, model) = (SELECT day, model FROM vendor_usage ORDER BY model LIMIT 1) RETURNING model`).Scan(&planted); err != nil {
		t.Fatal(err)
	}
	rows, err = db.Query(ctx, qs["reconciliation"])
	if err != nil {
		t.Fatal(err)
	}
	var diffs []string
	for rows.Next() {
		var day time.Time
		var model string
		var in, out, cr, cw int64
		var ours, theirs any
		if err := rows.Scan(&day, &model, &in, &out, &cr, &cw, &ours, &theirs); err != nil {
			t.Fatal(err)
		}
		diffs = append(diffs, fmt.Sprintf("%s:%d/%d/%d/%d", model, in, out, cr, cw))
	}
	if want := []string{planted + ":0/-7/0/0"}; fmt.Sprint(diffs) != fmt.Sprint(want) {
		t.Fatalf("reconciliation found %v, want %v", diffs, want)
	}

	// Copied by the sink and exported, every entry is trimmed from Redis by
	// the one-millisecond retention.
	eventually.That(t, 10*time.Second, "every copied and exported entry trimmed", func() (bool, string) {
		left := 0
		for _, a := range accounts {
			if _, err := trimmer.TrimLedger(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			left += len(allLedgerEntries(t, s, a.ID))
		}
		return left == 0, strconv.Itoa(left) + " entries left"
	})
	t.Logf("%d entries copied exactly once across a sink kill and a database restart", total)
}

// An entry PostgreSQL refuses (a NUL in its priced model name), planted in
// the ledger of the account the sink reads first, among every account's
// entries from real requests before and after it: the sink copies every
// other entry of every account exactly once, sets the refused one aside in
// ledger_rejects, counts it, stays connected, and the series
// GatewayLedgerSinkRejects reads holds the value that fires it. The docs'
// rejects query lists it, and their replay statement moves it into the
// ledger, after which each account's SUM(cost_nano_usd) equals its balance
// change and the alert's series is back to 0.
func TestLedgerSinkRejects(t *testing.T) {
	pg := launchtest.Postgres(t)
	s := launchtest.Start(t, launch.Options{
		Configure: func(c *config.Config) { c.LedgerSink.Interval = config.Duration(20 * time.Millisecond) },
	})
	const initial = 10_000_000_000
	var accounts []launch.Account
	byID := map[string]launch.Account{}
	for range 3 {
		a := s.NewAccount(10, noLimits)
		byID[a.ID] = a
	}
	ctx := context.Background()
	listed, err := s.Store.ListAccounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range listed {
		accounts = append(accounts, byID[a.ID])
	}
	bad := accounts[0] // listed first: a stall would hold back the others
	client := &http.Client{}
	send := func(n int) {
		t.Helper()
		for i := range n {
			for _, a := range accounts {
				path, h, body := requestFor([]string{"alpha", "beta"}[i%2], a.Key, i%3 == 0)
				if r := postAndRead(client, s.URL+path, h, body, 0, nil); r.status != 200 {
					t.Fatalf("request: %d %v", r.status, r.err)
				}
			}
		}
		for _, a := range accounts {
			waitNoHolds(t, s, a.ID)
		}
	}
	send(3)
	// The refused entry, written by the store's own settlement path as a
	// sidecar would have (the gateway itself now refuses such a name).
	const plantedCost = 12_345
	if d, err := s.Store.Admit(ctx, &account.Admission{RequestID: "req_planted_nul", AccountID: bad.ID, KeyID: "key_planted",
		Priced: "m", Hold: plantedCost}); err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %+v %v", d, err)
	}
	if _, err := s.Store.Settle(ctx, account.Settlement{RequestID: "req_planted_nul", AccountID: bad.ID, KeyID: "key_planted",
		Requested: "bad\x00model", Priced: "bad\x00model", Status: 200, Cost: plantedCost, Usage: usage.Usage{Input: 5}}); err != nil {
		t.Fatal(err)
	}
	send(2)

	sink := startLedgerSink(t, s, pg, 0)
	send(2) // and more while it runs
	db, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())

	// What the store holds, the refused entry apart.
	want := map[string]bool{} // account|entry id
	var plantedID string
	for _, a := range accounts {
		for _, e := range allLedgerEntries(t, s, a.ID) {
			if e.RequestID == "req_planted_nul" {
				plantedID = e.ID
				continue
			}
			want[a.ID+"|"+e.ID] = true
		}
	}
	if plantedID == "" || len(want) != 3*7 {
		t.Fatalf("planted entry %q, %d other entries, want 21", plantedID, len(want))
	}
	eventually.That(t, 20*time.Second, "every other entry copied, the refused one set aside, the alert's series at 1", func() (bool, string) {
		var rows, rejects int
		if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM ledger), (SELECT count(*) FROM ledger_rejects)`).Scan(&rows, &rejects); err != nil {
			return false, err.Error()
		}
		gauge, lag := sink.metric("gateway_ledger_sink_rejects"), sink.metric("gateway_ledger_sink_lag_seconds")
		return rows == len(want) && rejects == 1 && gauge == 1 && lag == 0,
			fmt.Sprintf("%d rows, %d rejects, gateway_ledger_sink_rejects %v, lag %v", rows, rejects, gauge, lag)
	})
	got := map[string]bool{}
	rows, err := db.Query(ctx, `SELECT account_id, entry_id FROM ledger`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a, id string
		if err := rows.Scan(&a, &id); err != nil {
			t.Fatal(err)
		}
		got[a+"|"+id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ledger holds %v, want every entry but the refused one: %v", got, want)
	}
	for name, v := range map[string]float64{
		"gateway_ledger_sink_rejected_total":                 1,
		"gateway_ledger_sink_database_up":                    1,
		`gateway_ledger_sink_errors_total{stage="database"}`: 0,
		"gateway_ledger_sink_entries_total":                  float64(len(want)),
	} {
		if m := sink.metric(name); m != v {
			t.Errorf("%s = %v, want %v", name, m, v)
		}
	}

	// The docs' query lists it.
	var acct, entryID, code, reqID, model string
	var cost int64
	var at time.Time
	var msg, requested string
	if err := db.QueryRow(ctx, sqlQueries(t)["rejects"]).Scan(&acct, &entryID, &at, &code, &msg, &reqID, &model, &requested, &cost); err != nil {
		t.Fatal(err)
	}
	if acct != bad.ID || entryID != plantedID || code != "22021" || reqID != "req_planted_nul" ||
		model != `bad\u0000model` || cost != plantedCost || !strings.Contains(msg, "0x00") {
		t.Fatalf("reject: %s %s %s %q %s %q %d", acct, entryID, code, msg, reqID, model, cost)
	}

	// The docs' replay statement moves it into the ledger.
	if _, err := db.Exec(ctx, replayStatement(t, bad.ID, plantedID)); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM ledger WHERE account_id = $1 AND entry_id = $2 AND model = $3 AND cost_nano_usd = $4 AND input_tokens = 5`,
		bad.ID, plantedID, `bad\u0000model`, plantedCost).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the replayed row: %d (%v)", n, err)
	}
	for _, a := range accounts {
		var sum int64
		if err := db.QueryRow(ctx, `SELECT coalesce(sum(cost_nano_usd), 0) FROM ledger WHERE account_id = $1`, a.ID).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		rep, err := s.Store.Usage(ctx, a.ID, "total")
		if err != nil {
			t.Fatal(err)
		}
		if sum != initial-rep.Balance {
			t.Errorf("%s: SUM(cost_nano_usd) %d, balance change %d", a.ID, sum, initial-rep.Balance)
		}
	}
	eventually.That(t, 10*time.Second, "the alert's series back to 0", func() (bool, string) {
		v := sink.metric("gateway_ledger_sink_rejects")
		return v == 0, fmt.Sprint(v)
	})
}

// replayStatement is the statement docs/ledger-sink.md gives to move a
// refused entry into the ledger, its psql variables filled in.
func replayStatement(t *testing.T, account, entry string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(launchtest.RepoRoot(t), "docs", "ledger-sink.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(string(b), "```sql\n")[1:] {
		stmt, _, _ := strings.Cut(block, "```")
		if strings.Contains(stmt, "DELETE FROM ledger_rejects") {
			stmt = strings.ReplaceAll(stmt, ":'account'", "'"+account+"'")
			return strings.ReplaceAll(stmt, ":'entry'", "'"+entry+"'")
		}
	}
	t.Fatal("docs/ledger-sink.md has no replay statement")
	return ""
}
