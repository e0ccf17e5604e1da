package e2e

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// outboxResult is what the client saw of one request of the SIGKILL run.
type outboxResult struct {
	account    int
	status     int
	start, end time.Time
}

// With limits.leases on and a vendor that answers at once, most requests
// are admitted from a lease in memory and end before their hold record
// (sent in batches every 10–20 ms) reaches Redis; their settlement settles
// them from the lease. A sidecar SIGKILLed while such requests flow must
// still leave every request the vendor served in the ledger: the restarted
// sidecar, on the same configuration and spool directory, sends what the
// dead one left in its outbox (the records of requests Redis did not know
// and the settlements it had queued), and the sweeper settles the rest one
// hold lease later. For every account the ledger has at least one entry
// per request the vendor served, only requests in flight at the kill are
// settled as interrupted (a reply that ended before it is charged as it
// was served), and the balance, the ledger and the counters agree with no
// hold or lease left. With leases off the same holds of the settlements.
func TestLeasedRequestsSurviveSIGKILL(t *testing.T) {
	for _, leases := range []string{"on", "off"} {
		t.Run("leases "+leases, func(t *testing.T) { testSurviveSIGKILL(t, leases) })
	}
}

func testSurviveSIGKILL(t *testing.T, leases string) {
	const (
		clients      = 16
		killAfter    = 400 // requests completed before the kill
		afterRestart = 300 // requests completed after the restart before the load stops
		maxRequests  = 20_000
		initial      = 20_000_000_000
	)
	rs := redistest.NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	s := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: func(c *config.Config) {
		c.Limits.Leases = leases
		c.Limits.HoldLease = config.Duration(time.Second)
	}})
	if s.Config.Limits.LeasesOn() != (leases == "on") {
		t.Fatalf("limits.leases is %q, want %s", s.Config.Limits.Leases, leases)
	}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"event_delay_ms": 0, "first_event_delay_ms": 0, "latency_ms": 0, "reply_words": 3})
	}
	accounts := []launch.Account{s.NewAccount(20, noLimits), s.NewAccount(20, noLimits)}

	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * clients}}
	results := make([]outboxResult, maxRequests)
	var (
		next      atomic.Int64 // the next request's number (its x-test-id)
		completed atomic.Int64 // requests answered (or failed) so far
		inFlight  atomic.Int64
		after     atomic.Int64 // requests started after the restart and completed
		restarted atomic.Bool
		stop      atomic.Bool
		// gate holds back new requests while the sidecar is down, so that
		// they are not spent on refusals; requests in flight go on.
		gate sync.Mutex
		wg   sync.WaitGroup
	)
	work := make(chan int)
	go func() {
		defer close(work)
		for !stop.Load() {
			gate.Lock()
			i := int(next.Add(1) - 1)
			if i >= maxRequests {
				gate.Unlock()
				return
			}
			work <- i
			gate.Unlock()
		}
	}()
	for range clients {
		wg.Go(func() {
			for i := range work {
				// Alternate /alpha and /beta, JSON and streamed, and the
				// accounts.
				p := holdStep{account: (i >> 2) % len(accounts), route: []string{"alpha", "beta"}[i%2], stream: (i>>1)%2 == 1, shape: shapePlain}
				path, h, body := holdRequest(p, accounts[p.account].Key, i)
				wasRestarted := restarted.Load()
				inFlight.Add(1)
				r := outboxResult{account: p.account, start: time.Now()}
				reply := postAndRead(client, s.URL+path, h, body, 0, nil)
				r.end, r.status = time.Now(), reply.status
				inFlight.Add(-1)
				results[i] = r
				completed.Add(1)
				if wasRestarted {
					after.Add(1)
				}
			}
		})
	}

	// Kill the sidecar mid-load, once requests have been admitted from
	// leases, then start it again on the same configuration and spool.
	var (
		killAt, restartedAt time.Time
		inFlightAtKill      int64
		leasedBeforeKill    float64
		killErr             string
	)
	func() {
		defer func() {
			if killErr != "" {
				stop.Store(true)
			}
		}()
		for deadline := time.Now().Add(30 * time.Second); completed.Load() < killAfter; {
			if time.Now().After(deadline) || next.Load() >= maxRequests {
				killErr = "the load did not reach " + strconv.Itoa(killAfter) + " requests before the kill"
				return
			}
			time.Sleep(5 * time.Millisecond) // polling interval
		}
		if leases == "on" {
			leasedBeforeKill = sidecarMetric(t, s, "gateway_admissions_total", `path="lease"`)
		}
		gate.Lock()
		defer gate.Unlock()
		killAt = time.Now()
		inFlightAtKill = inFlight.Load()
		s.Sidecar.Signal(syscall.SIGKILL)
		if !s.Sidecar.Wait(10 * time.Second) {
			killErr = "the sidecar survived SIGKILL"
			return
		}
		if err := s.StartSidecar(); err != nil {
			killErr = "restarting the sidecar: " + err.Error()
			return
		}
		restartedAt = time.Now()
		restarted.Store(true)
	}()
	if killErr == "" {
		for deadline := time.Now().Add(30 * time.Second); after.Load() < afterRestart; {
			if time.Now().After(deadline) || next.Load() >= maxRequests {
				killErr = "the load did not reach " + strconv.Itoa(afterRestart) + " requests after the restart"
				break
			}
			time.Sleep(5 * time.Millisecond) // polling interval
		}
	}
	stop.Store(true)
	wg.Wait()
	if killErr != "" {
		t.Fatal(killErr)
	}
	sent := int(min(next.Load(), maxRequests))
	results = results[:sent]

	// Which requests did a vendor serve? Every API request of this test
	// carries its x-test-id; the fakes keep their newest 1000 records (probes
	// too), so a count below their counters means records were lost.
	served := map[int]bool{}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		marked := 0
		for _, rec := range f.Requests() {
			if ids := rec.Headers["X-Test-Id"]; len(ids) == 1 {
				n, err := strconv.Atoi(ids[0])
				if err != nil || n < 0 || n >= sent {
					t.Fatalf("fake %s: a request with x-test-id %q", f.Name, ids[0])
				}
				served[n] = true
				marked++
			}
		}
		if api := f.APIRequests(); marked != api {
			t.Fatalf("fake %s counts %d API requests but keeps %d of this test's: its record ring overflowed, lower the load", f.Name, api, marked)
		}
	}
	if len(served) == 0 {
		t.Fatal("no request reached a vendor")
	}

	// The sweeper settles the dead sidecar's holds and returns its leases
	// one hold lease after the kill; the live sidecar returns its idle ones.
	ctx := context.Background()
	for _, acct := range accounts {
		eventually.True(t, 30*time.Second, "holds and leases of "+acct.ID+" settled and returned", func() bool {
			n, _, err := s.Store.OpenHolds(ctx, acct.ID)
			if err != nil || n != 0 {
				return false
			}
			leased, err := s.Store.Leased(ctx, acct.ID)
			if err != nil {
				return false
			}
			for _, v := range leased {
				if v != 0 {
					return false
				}
			}
			return true
		})
	}

	var servedBefore, servedAcross, servedAfter int
	for i, r := range results {
		if !served[i] {
			continue
		}
		switch {
		case r.end.Before(killAt):
			servedBefore++
		case r.start.After(restartedAt):
			servedAfter++
		default:
			servedAcross++
		}
	}
	seen := map[string]bool{}
	for a, acct := range accounts {
		entries := checkBooks(t, s, acct.ID, initial, seen)
		settled, interrupted := 0, 0
		for _, e := range entries {
			if e.Reconciled {
				continue // a late settlement's difference, beside its request's entry
			}
			settled++
			if e.Interrupted {
				interrupted++
			}
		}
		var nSent, nServed, n200, nAcross, nAtKill int
		for i, r := range results {
			if r.account != a {
				continue
			}
			nSent++
			if r.start.Before(killAt) && !r.end.Before(killAt) {
				nAtKill++ // in flight at the kill, served or not
			}
			if r.status == 200 {
				n200++
			}
			if served[i] {
				nServed++
				if !r.end.Before(killAt) && !r.start.After(restartedAt) {
					nAcross++
				}
			}
		}
		t.Logf("account %d: %d sent, %d in flight at the kill, %d answered 200, %d served by a vendor (%d across the kill), %d requests in the ledger (%d settled as interrupted)",
			a, nSent, nAtKill, n200, nServed, nAcross, settled, interrupted)
		if settled < nServed {
			t.Errorf("%s: %d requests in the ledger for %d the vendor served: %d served requests left no entry",
				acct.ID, settled, nServed, nServed-settled)
		}
		if interrupted > nAtKill {
			t.Errorf("%s: %d requests settled as interrupted, but only %d were in flight at the kill: replies that had ended were not charged as served",
				acct.ID, interrupted, nAtKill)
		}
	}

	// The kill landed mid-load: requests were in flight at the kill, and
	// the vendor served requests before it and after the restart.
	t.Logf("%d requests sent; %d admitted from leases before the kill; %d in flight at the kill; served %d before the kill, %d across it, %d after the restart (%v down)",
		sent, int64(leasedBeforeKill), inFlightAtKill, servedBefore, servedAcross, servedAfter, restartedAt.Sub(killAt).Round(time.Millisecond))
	if leases == "on" && leasedBeforeKill == 0 {
		t.Error("no request was admitted from a lease before the kill: the leased path was not exercised")
	}
	if inFlightAtKill == 0 {
		t.Error("no request was in flight at the kill")
	}
	if servedBefore == 0 || servedAfter == 0 {
		t.Errorf("served %d requests before the kill and %d after the restart: the kill did not land mid-load", servedBefore, servedAfter)
	}
}
