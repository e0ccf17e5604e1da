package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/test/launch"
)

// reconcileJSON is gatewayctl reconcile --json's rows.
type reconcileJSON struct {
	Rows []struct {
		Upstream    string            `json:"upstream"`
		VendorKey   string            `json:"vendor_key"`
		Model       string            `json:"model"`
		Entries     int               `json:"entries"`
		Abandoned   int               `json:"abandoned"`
		Unexplained map[string]string `json:"unexplained,omitempty"`
		UnexplCost  int64             `json:"unexplained_cost_nano_usd,string"`
		Explained   []struct {
			Class string            `json:"class"`
			Usage map[string]string `json:"usage"`
			Cost  int64             `json:"cost_nano_usd,string"`
		} `json:"explained"`
	} `json:"rows"`
}

// A hung primary whose abandoned attempts the vendor bills: each attempt
// is given up on after the first-byte bound and retried on the pool's next
// key (hung too) or the reserve; the client sees the reserve's reply or a
// 504. Each abandoned attempt is an operator-side entry (no customer's),
// and the primary's report's extra usage is explained as abandoned
// attempts, to the token and nano-USD of the fake's own log, on the keys
// tried.
func TestReconcileAbandonedAttempts(t *testing.T) {
	s := reconcileStack(t, func(c *config.Config) {
		for i := range c.Upstreams {
			c.Upstreams[i].Failover.FirstByteTimeout = config.Duration(time.Second)
		}
	})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	from := time.Now().UTC().Truncate(time.Hour)
	s.Primary.BillAbandoned(config.FormatMessages, true)
	s.Primary.BillAbandoned(config.FormatChatCompletions, true)
	s.Primary.Control(map[string]any{"hang": true})
	routes := []string{"alpha", "alpha", "beta", "beta"}
	var wg sync.WaitGroup
	replies := make([]clientReply, len(routes))
	for i, route := range routes {
		wg.Go(func() {
			path, h, body := requestFor(route, acct.Key, true)
			h["x-claude-code-session-id"] = fmt.Sprintf("ab-%d", i)
			replies[i] = postAndRead(http.DefaultClient, s.URL+path, h, body, 0, nil)
		})
	}
	wg.Wait()
	s.Primary.Control(map[string]any{"hang": false})
	for i, r := range replies {
		if (r.status != 200 || r.header.Get("x-gateway-endpoint") != "reserve") && r.status != 504 {
			t.Fatalf("request %d: %d from %q; want 200 from the reserve or 504", i, r.status, r.header.Get("x-gateway-endpoint"))
		}
	}
	// What the hung primary billed, by upstream and key, from its own log.
	billed := map[string]usage.Usage{}
	n := 0
	for format, upstream := range map[string]string{config.FormatMessages: "alpha", config.FormatChatCompletions: "beta"} {
		for _, b := range s.Primary.Billed(format) {
			for _, k := range []string{"k1", "k2", "k3"} {
				if b.KeyID == launch.VendorKeyID(launch.PoolSecret(upstream, k)) {
					billed[upstream+"/"+k] = billed[upstream+"/"+k].Add(b.Usage())
					n++
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("the hung primary billed nothing: the test shows nothing")
	}
	eventually.That(t, 10*time.Second, "an abandoned attempt recorded for each billed one", func() (bool, string) {
		got, err := s.Store.AbandonedBetween(t.Context(), from, time.Now().Add(time.Minute))
		return err == nil && len(got) >= n, fmt.Sprintf("%d recorded of %d billed (%v): %+v", len(got), n, err, got)
	})
	got, _ := s.Store.AbandonedBetween(t.Context(), from, time.Now().Add(time.Minute))
	for _, a := range got {
		if a.Reason != "first_byte_timeout" || a.Endpoint != "primary" || a.RequestID == "" ||
			a.Model != upstreamModel[a.Upstream] {
			t.Errorf("abandoned attempt %+v", a)
		}
	}
	// No customer pays for them: the account's ledger holds an entry per
	// request, a charge only for a reply the reserve served.
	s.WaitSettled()
	entries, _, err := s.Store.Ledger(t.Context(), acct.ID, "", 1000)
	if err != nil || len(entries) != len(routes) {
		t.Fatalf("%d ledger entries (%v); want %d", len(entries), err, len(routes))
	}
	for _, e := range entries {
		if e.Endpoint != reconcile.Reserve && (e.Cost != 0 || reconcile.Tokens(e.Usage) != 0) {
			t.Errorf("entry %+v charges for an abandoned attempt", e.Settlement)
		}
	}

	out := adminCtl(t, s).ok("reconcile", "--from", from.Format(time.RFC3339), "--to", from.Add(time.Hour).Format(time.RFC3339), "--json")
	var rep reconcileJSON
	mustJSON(t, []byte(out), &rep)
	explained := map[string]usage.Usage{}
	for _, r := range rep.Rows {
		if len(r.Unexplained) > 0 || r.UnexplCost != 0 {
			t.Errorf("%s %s: unexplained %v (%d nano-USD); want none (the reserve's entries are not the primary's report's)", r.Upstream, r.VendorKey, r.Unexplained, r.UnexplCost)
		}
		for _, d := range r.Explained {
			u, err := usage.FromNames(int64s(d.Usage))
			if d.Class != reconcile.AbandonedAttempts || err != nil || d.Cost != catalogueCost(t, s, r.Upstream, u) {
				t.Errorf("%s %s: explained %+v (%v); want abandoned attempts at the catalogue's price %d", r.Upstream, r.VendorKey, d, err, catalogueCost(t, s, r.Upstream, u))
			}
			explained[r.Upstream+"/"+r.VendorKey] = explained[r.Upstream+"/"+r.VendorKey].Add(u)
		}
	}
	if fmt.Sprint(explained) != fmt.Sprint(billed) {
		t.Errorf("explained as abandoned attempts %v; the fake billed %v\n%s", explained, billed, out)
	}
	t.Logf("%d abandoned attempts billed, %d recorded: %v", n, len(got), billed)
}

// int64s reads protojson's int64 strings.
func int64s(m map[string]string) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		var n int64
		fmt.Sscan(v, &n)
		out[k] = n
	}
	return out
}
