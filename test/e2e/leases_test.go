package e2e

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// leasedStack starts a stack admitting from leases, with a short hold lease
// so that a dead sidecar's lease is swept within seconds.
func leasedStack(t *testing.T) *launch.Stack {
	return launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.Leases = "on"
		c.Limits.HoldLease = config.Duration(time.Second)
	}})
}

// sendUntilLeased sends requests until one was admitted from a lease; it
// returns how many answered 200.
func sendUntilLeased(t *testing.T, s *launch.Stack, key string) int {
	t.Helper()
	ok := 0
	eventually.True(t, 10*time.Second, "a request admitted from a lease", func() bool {
		path, h, body := requestFor("alpha", key, false)
		if resp, b := s.Do("POST", path, h, body); resp.StatusCode != 200 {
			t.Fatalf("request: %d %s", resp.StatusCode, b)
		}
		ok++
		return sidecarMetric(t, s, "gateway_admissions_total", `path="lease"`) > 0
	})
	return ok
}

// A sidecar killed with SIGKILL while it holds a lease: the sweeper (here
// the restarted sidecar's) returns the lease's unspent rest one hold lease
// later; every request it served is in the ledger once and the balance,
// the ledger and the counters agree.
func TestLeasesReturnedAfterSidecarKilled(t *testing.T) {
	leaseKilled(t, account.Limits{})
}

// The same of a key in a project with limits of every kind its lease holds
// a share of (money, seats, tokens, slots): the sweeper gives each back to
// the project, whose state then holds, seats and leases nothing and counts
// every request once.
func TestLeasesReturnedAfterSidecarKilledInProject(t *testing.T) {
	leaseKilled(t, account.Limits{DailyNanoUSD: 8_000_000_000, Concurrency: 100, TPM: 10_000_000, RPM: 10_000, WindowMinutes: 1})
}

// leaseKilled runs the SIGKILL case with the key in a project of limits
// project (none: the default project).
func leaseKilled(t *testing.T, project account.Limits) {
	s := leasedStack(t)
	ctx := context.Background()
	const initial = 10_000_000_000
	acct := s.NewAccount(10, noLimits)
	var projectID string
	if !project.IsZero() {
		projectID, acct.Key = projectKey(t, s, acct.ID, "limited", project)
	}
	n := sendUntilLeased(t, s, acct.Key)
	for i := 0; i < 5; i++ {
		path, h, body := requestFor("alpha", acct.Key, false)
		if resp, b := s.Do("POST", path, h, body); resp.StatusCode != 200 {
			t.Fatalf("request: %d %s", resp.StatusCode, b)
		}
		n++
	}
	eventually.True(t, 10*time.Second, "every reply settled", func() bool {
		return len(allLedgerEntries(t, s, acct.ID)) == n
	})
	leased := s.Leased(acct.ID)
	if leased <= 0 {
		t.Fatal("no lease held before the kill")
	}
	s.Sidecar.Signal(syscall.SIGKILL)
	if !s.Sidecar.Wait(10 * time.Second) {
		t.Fatal("sidecar survived SIGKILL")
	}
	killed := time.Now()
	s.StartSidecar()
	eventually.True(t, 30*time.Second, "the dead sidecar's lease returned", func() bool {
		return s.Leased(acct.ID) == 0
	})
	t.Logf("lease of %d nano-USD returned %v after the kill (hold lease 1s)", leased, time.Since(killed).Round(time.Millisecond))
	entries := checkBooks(t, s, acct.ID, initial, map[string]bool{})
	if len(entries) != n {
		t.Fatalf("%d ledger entries, want %d", len(entries), n)
	}
	if projectID == "" {
		return
	}
	ps, err := s.Store.ProjectStates(ctx, acct.ID, projectID)
	if err != nil || ps[0].InFlight != 0 || ps[0].Held != 0 || ps[0].Day.Requests != int64(n) {
		t.Fatalf("project state %+v (%v); want nothing in flight and %d requests", ps, err, n)
	}
	projectLeasesReturned(t, s.RedisAddr, acct.ID, projectID, "after the sweep")
	rdb := redis.NewClient(&redis.Options{Addr: s.RedisAddr})
	defer rdb.Close()
	tw, err := rdb.HGet(ctx, "gw:{acct:"+acct.ID+"}:ps:"+projectID, "tw").Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	w := strings.Fields(tw)
	for i := 2; i < len(w); i += 3 {
		if w[i] != "0" {
			t.Errorf("the project's token window holds tokens after the sweep: %q", tw)
		}
	}
	log, err := rdb.ZRange(ctx, "gw:{acct:"+acct.ID+"}:prl:"+projectID, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range log {
		if strings.HasPrefix(id, "L:") {
			t.Errorf("a slot's placeholder %s left in the project's rate log", id)
		}
	}
	if len(log) != n {
		t.Errorf("the project's rate log holds %d requests; %d were served", len(log), n)
	}
}

// A suspension, a lowered daily limit and a top-up during load reach the
// leases within the renewal interval (limits.lease_interval: here a
// quarter of the 1 s hold lease) plus a round trip; suspension refuses
// requests within the key cache's lifetime.
func TestLeasesFollowLimitChanges(t *testing.T) {
	s := leasedStack(t)
	ctx := context.Background()
	acct := s.NewAccount(100, noLimits)
	sendUntilLeased(t, s, acct.Key)
	before := s.Leased(acct.ID)
	if before <= 0 {
		t.Fatal("no lease")
	}
	interval := s.Config.Limits.LeaseRenewInterval()
	// Keep the account busy so that the lease stays wanted.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			path, h, body := requestFor("alpha", acct.Key, false)
			req, _ := http.NewRequest("POST", s.URL+path, bytes.NewReader(body))
			for k, v := range h {
				req.Header.Set(k, v)
			}
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	}()
	defer func() { close(stop); <-done }()

	// A daily limit far below the room: the lease shrinks to its share.
	rep, err := s.Store.Usage(ctx, acct.ID, "day")
	if err != nil {
		t.Fatal(err)
	}
	daily := rep.DailyUsed + 200_000_000 // 0.20 USD left today
	t0 := time.Now()
	if err := s.Store.SetLimits(ctx, acct.ID, account.Limits{DailyNanoUSD: daily}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 2*interval+time.Second, "the lease shrunk to the lowered daily limit's share", func() bool {
		return s.Leased(acct.ID) <= 200_000_000/int64(s.Config.Limits.LeaseShare)
	})
	t.Logf("daily limit lowered: lease %d → %d nano-USD within %v", before, s.Leased(acct.ID), time.Since(t0).Round(time.Millisecond))

	// Lift it and top up: the lease grows again.
	if err := s.Store.SetLimits(ctx, acct.ID, noLimits); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Store.TopUp(ctx, acct.ID, 100_000_000_000, ""); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 3*interval+time.Second, "the lease grown after the top-up", func() bool {
		return s.Leased(acct.ID) > 200_000_000/int64(s.Config.Limits.LeaseShare)
	})

	// Suspended: the lease is returned within an interval.
	t0 = time.Now()
	if err := s.Store.SetSuspended(ctx, acct.ID, true); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 2*interval+time.Second, "the lease returned after the suspension", func() bool {
		return s.Leased(acct.ID) == 0
	})
	t.Logf("suspended: lease returned within %v", time.Since(t0).Round(time.Millisecond))
	eventually.True(t, 5*time.Second, "requests refused after the suspension", func() bool {
		path, h, body := requestFor("alpha", acct.Key, false)
		resp, _ := s.Do("POST", path, h, body)
		return resp.StatusCode == 403 || resp.StatusCode == 401
	})
}
