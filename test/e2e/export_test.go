package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// gatewayctl ledger export round-trips the ledger of a busy account: exports
// run while requests settle, one is cut mid-line, and the file ends with
// every entry exactly once. With a retention of a millisecond every exported
// entry is trimmed from Redis, and an unexported one never is.
func TestLedgerExport(t *testing.T) {
	s := launchtest.Start(t, launch.Options{
		SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken},
		Configure:  func(c *config.Config) { c.Store.LedgerRetention = config.Duration(time.Millisecond) },
	})
	ctl := adminCtl(t, s)
	const initial = 10_000_000_000
	acct := s.NewAccount(10, noLimits)
	// Trims as the sidecar does, with its retention.
	trimmer := store.New(s.RDB, store.Options{LedgerRetention: time.Millisecond})
	out := filepath.Join(t.TempDir(), "ledger.jsonl")
	export := func() {
		t.Helper()
		ctl.ok("ledger", "export", acct.ID, "--out", out, "--page-size", "40")
	}

	// 300 requests from 12 clients while exports run.
	const requests = 300
	var wg sync.WaitGroup
	work := make(chan int)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	for range 12 {
		wg.Go(func() {
			for i := range work {
				path, h, body := requestFor([]string{"alpha", "beta"}[i%2], acct.Key, i%3 == 0)
				if r := postAndRead(client, s.URL+path, h, body, 0, nil); r.status != 200 {
					t.Errorf("request %d: %d %v", i, r.status, r.err)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() {
		for i := range requests {
			work <- i
		}
		close(work)
		wg.Wait()
		close(done)
	}()
	exports := 0
	for running := true; running; exports++ {
		select {
		case <-done:
			running = false
		default:
		}
		export()
		if exports == 0 {
			// A crash mid-write leaves half a line; the next export cuts it.
			f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString(`{"id":"17`)
			f.Close()
		}
	}
	waitNoHolds(t, s, acct.ID)
	export()

	type line struct {
		ID          string `json:"id"`
		RequestID   string `json:"request_id"`
		CostNanoUSD string `json:"cost_nano_usd"`
		Status      int    `json:"status"`
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids, reqs := map[string]bool{}, map[string]bool{}
	var sum int64
	sc := bufio.NewScanner(f)
	var last string
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if ids[l.ID] || reqs[l.RequestID] {
			t.Fatalf("entry %s (request %s) exported twice", l.ID, l.RequestID)
		}
		if last != "" && !idLess(last, l.ID) {
			t.Fatalf("entries out of order: %s after %s", l.ID, last)
		}
		ids[l.ID], reqs[l.RequestID], last = true, true, l.ID
		c, _ := strconv.ParseInt(l.CostNanoUSD, 10, 64)
		sum += c
	}
	rep, err := s.Store.Usage(context.Background(), acct.ID, "total")
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != requests || sum != initial-rep.Balance || rep.Totals.Requests != requests {
		t.Fatalf("exported %d entries costing %d; %d requests made, balance change %d, counted %d",
			len(ids), sum, requests, initial-rep.Balance, rep.Totals.Requests)
	}
	// Everything exported is trimmed once past the one-millisecond retention
	// (the last page may have been committed within it: trim again).
	eventually.That(t, 5*time.Second, "every exported entry trimmed", func() (bool, string) {
		if _, err := trimmer.TrimLedger(context.Background(), acct.ID); err != nil {
			t.Fatal(err)
		}
		left := allLedgerEntries(t, s, acct.ID)
		return len(left) == 0, strconv.Itoa(len(left)) + " entries left"
	})

	// Unexported entries are never trimmed, however old.
	for range 5 {
		path, h, body := requestFor("alpha", acct.Key, false)
		if resp, b := s.Do("POST", path, h, body); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	time.Sleep(5 * time.Millisecond) // lets them age past the retention; not a synchronisation
	if n, err := trimmer.TrimLedger(context.Background(), acct.ID); err != nil || n != 0 {
		t.Fatalf("trimmed %d unexported entries (%v)", n, err)
	}
	if left := allLedgerEntries(t, s, acct.ID); len(left) != 5 {
		t.Fatalf("%d unexported entries left, want 5", len(left))
	}
	export()
	if n := countLines(t, out); n != requests+5 {
		t.Fatalf("%d lines after the last export, want %d", n, requests+5)
	}
	t.Logf("%d entries exported in %d runs during the load (one cut mid-line) and 2 after; all trimmed once exported", requests+5, exports)
}

func idLess(a, b string) bool {
	am, as, _ := cutID(a)
	bm, bs, _ := cutID(b)
	return am < bm || (am == bm && as < bs)
}

func cutID(id string) (int64, int64, bool) {
	for i := range len(id) {
		if id[i] == '-' {
			m, e1 := strconv.ParseInt(id[:i], 10, 64)
			s, e2 := strconv.ParseInt(id[i+1:], 10, 64)
			return m, s, e1 == nil && e2 == nil
		}
	}
	return 0, 0, false
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range b {
		if c == '\n' {
			n++
		}
	}
	return n
}

// An export file belongs to one account: each line names it, and exporting
// another account to the same file is refused before anything is read or
// committed, so that account's unexported entries are never skipped (and
// trimmed). A commit of an id the account's ledger does not hold is refused.
func TestLedgerExportBoundToItsAccount(t *testing.T) {
	s := launchtest.Start(t, launch.Options{
		SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken},
		Configure:  func(c *config.Config) { c.Store.LedgerRetention = config.Duration(time.Millisecond) },
	})
	ctl := adminCtl(t, s)
	a, b := s.NewAccount(10, noLimits), s.NewAccount(10, noLimits)
	for i := range 4 {
		for _, acct := range []launch.Account{a, b} {
			path, h, body := requestFor([]string{"alpha", "beta"}[i%2], acct.Key, false)
			if resp, rb := s.Do("POST", path, h, body); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, rb)
			}
		}
	}
	s.WaitSettled()
	out := filepath.Join(t.TempDir(), "acme.jsonl")
	ctl.ok("ledger", "export", a.ID, "--out", out)
	b2, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var first struct {
		AccountID string `json:"account_id"`
	}
	if err := json.Unmarshal(b2[:bytes.IndexByte(b2, '\n')], &first); err != nil || first.AccountID != a.ID {
		t.Fatalf("an exported line names account %q (%v), want %s", first.AccountID, err, a.ID)
	}
	_, errOut, err := ctl.run("ledger", "export", b.ID, "--out", out)
	if err == nil || !strings.Contains(errOut, a.ID) {
		t.Fatalf("exporting %s into %s's file: %v %s", b.ID, a.ID, err, errOut)
	}
	if after, _ := os.ReadFile(out); !bytes.Equal(after, b2) {
		t.Fatal("the refused export changed the file")
	}
	// None of b's entries was skipped or trimmed.
	if n := len(allLedgerEntries(t, s, b.ID)); n != 4 {
		t.Fatalf("%d of b's 4 entries left", n)
	}
	// A commit of an id b's ledger does not hold is refused (entry ids are
	// per ledger: another account's may coincide with one of b's); b's mark
	// stays unset.
	if _, _, err := s.Store.CommitExport(context.Background(), b.ID, "99999999999999-0"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("committing an id b's ledger does not hold: %v", err)
	}
	if _, mark, err := s.Store.ExportLedger(context.Background(), b.ID, "", 1); err != nil || mark != "" {
		t.Fatalf("b's export mark %q (%v)", mark, err)
	}
}
