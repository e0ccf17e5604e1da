package e2e

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Bursts of concurrent requests of one account, JSON and streams, in both
// wire formats, admitted from leases, with pauses between them long enough
// for the sidecar to return its lease and forget it, as a load that comes
// and goes does: every request the fake vendors served is in the ledger,
// the account's counters and its balance exactly once. (A lease taken
// after such a pause once reused the first lease's id, whose bitmap of
// recorded requests Redis keeps for a week: its requests' records and
// settlements were skipped as done already, silently.)
func TestLeasesBurstsLoseNothing(t *testing.T) {
	const interval = 100 * time.Millisecond
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.Leases = "on"
		c.Limits.LeaseInterval = config.Duration(interval)
	}})
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"event_delay_ms": 1, "reply_words": 12})
	}
	const initialUSD = 1000
	acct := s.NewAccount(initialUSD, noLimits)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	const bursts, perBurst, workers = 3, 700, 48

	ok := 0
	for b := range bursts {
		replies := make([]clientReply, perBurst)
		work := make(chan int)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := range work {
					path, h, body := requestFor([]string{"alpha", "beta"}[i%2], acct.Key, i%4 >= 2)
					replies[i] = postAndRead(client, s.URL+path, h, body, 0, nil)
				}
			})
		}
		for i := range perBurst {
			work <- i
		}
		close(work)
		wg.Wait()
		for i, r := range replies {
			if r.err != nil || r.status != 200 {
				t.Fatalf("burst %d request %d: %d %v %s", b, i, r.status, r.err, r.body)
			}
			if i%4 >= 2 && !r.complete {
				t.Fatalf("burst %d stream %d did not complete", b, i)
			}
		}
		ok += perBurst
		s.WaitSettled()
		if n := len(allLedgerEntries(t, s, acct.ID)); n != ok {
			t.Fatalf("after burst %d: %d ledger entries for %d requests served: settlements lost", b, n, ok)
		}
		// The load pauses: the idle lease is returned, and its sidecar
		// forgets it a few intervals later.
		eventually.True(t, 10*time.Second, "the idle lease returned", func() bool { return s.Leased(acct.ID) == 0 })
		time.Sleep(5 * interval) // the pause's length, not a synchronisation
	}
	if local := sidecarMetric(t, s, "gateway_admissions_total", `path="lease"`); local < float64(ok)/2 {
		t.Fatalf("%v of %d requests admitted from a lease: the scenario was not exercised", local, ok)
	}

	s.WaitSettled()
	waitNoHolds(t, s, acct.ID)
	served := s.Primary.APIRequests() + s.Reserve.APIRequests()
	if served != ok {
		t.Fatalf("the fake vendors served %d requests, the clients saw %d", served, ok)
	}
	entries := checkBooks(t, s, acct.ID, pricing.NanoUSD(initialUSD), map[string]bool{})
	ids := map[string]bool{}
	for _, e := range entries {
		if e.Status != 200 {
			t.Errorf("request %s: ledger status %d", e.RequestID, e.Status)
		}
		ids[e.RequestID] = true
	}
	if len(entries) != served || len(ids) != served {
		t.Fatalf("%d ledger entries of %d requests for %d served: settlements lost", len(entries), len(ids), served)
	}
	// Each lease has its own bitmap of recorded requests: one per burst at
	// least, none shared.
	bitmaps, err := s.RDB.Keys(context.Background(), "gw:{acct:"+acct.ID+"}:lbits:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(bitmaps) < bursts {
		t.Errorf("%d leases' bitmaps over %d bursts: %v", len(bitmaps), bursts, bitmaps)
	}
	t.Logf("%d requests in %d bursts, %d from %d leases; all in the ledger once", served, bursts,
		int(sidecarMetric(t, s, "gateway_admissions_total", `path="lease"`)), len(bitmaps))
}
