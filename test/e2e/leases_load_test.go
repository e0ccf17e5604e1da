package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// leasesBySidecar sums the account's leases in Redis by the sidecar that
// holds them: a lease id is the sidecar's prefix, the key and a generation
// (internal/leases).
func leasesBySidecar(t *testing.T, s *launch.Stack, acct string) map[string]int64 {
	t.Helper()
	m, err := s.Store.Leased(context.Background(), acct)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for id, v := range m {
		prefix, _, _ := strings.Cut(id, ".")
		out[prefix] += v
	}
	return out
}

// Two sidecars on one Redis, one sent ten times as many requests as the
// other: each sizes its lease from its own recent holds, so the busy one's
// slice is several times the idle one's; once the load stops both leases
// are returned, and the books balance.
func TestLeasesFollowLoadAcrossSidecars(t *testing.T) {
	rs := redistest.NewServer(t)
	// A floor of 4 holds (default 16) so that the slices follow the load
	// rather than the floor at this test's modest request rates.
	configure := func(c *config.Config) {
		c.Limits.Leases = "on"
		c.Limits.LeaseMinHolds = 4
	}
	busy := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: configure})
	idle := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: configure})
	const initial = 1_000_000_000_000
	acct := busy.NewAccount(1000, noLimits)
	interval := busy.Config.Limits.LeaseRenewInterval()

	// The busy sidecar's lease first, to learn which lease is whose.
	sent := sendUntilLeased(t, busy, acct.Key)
	var busyID string
	for id := range leasesBySidecar(t, busy, acct.ID) {
		busyID = id
	}
	if busyID == "" {
		t.Fatal("the busy sidecar's lease is not in Redis")
	}

	// Rounds of ten requests to the busy sidecar and one to the idle one,
	// until both hold a lease, the busy one at least three times the other,
	// after three renewal intervals of load.
	send := func(s *launch.Stack) {
		path, h, body := requestFor("alpha", acct.Key, false)
		if resp, b := s.Do("POST", path, h, body); resp.StatusCode != 200 {
			t.Fatalf("request: %d %s", resp.StatusCode, b)
		}
		sent++
	}
	start := time.Now()
	var busyLease, idleLease int64
	rounds := 0
	eventually.True(t, 15*interval+10*time.Second, "the busy sidecar's lease at least 3× the idle one's", func() bool {
		for range 10 {
			send(busy)
		}
		send(idle)
		rounds++
		leases := leasesBySidecar(t, busy, acct.ID)
		if len(leases) > 2 {
			t.Fatalf("leases of more than two sidecars: %v", leases)
		}
		busyLease, idleLease = leases[busyID], 0
		for id, v := range leases {
			if id != busyID {
				idleLease = v
			}
		}
		return time.Since(start) >= 3*interval && idleLease > 0 && busyLease >= 3*idleLease
	})
	t.Logf("after %v of load (%d rounds of 10:1 requests): busy sidecar's lease %d nano-USD, idle one's %d (%.1f×)",
		time.Since(start).Round(time.Millisecond), rounds, busyLease, idleLease, float64(busyLease)/float64(idleLease))

	// Load stopped: a lease idle for two intervals is returned.
	stopped := time.Now()
	eventually.True(t, 4*interval+10*time.Second, "both leases returned after the load", func() bool {
		return busy.Leased(acct.ID) == 0
	})
	t.Logf("both leases returned %v after the load stopped", time.Since(stopped).Round(time.Millisecond))

	eventually.True(t, 10*time.Second, "every reply settled", func() bool {
		return len(allLedgerEntries(t, busy, acct.ID)) >= sent
	})
	if entries := checkBooks(t, busy, acct.ID, initial, map[string]bool{}); len(entries) != sent {
		t.Fatalf("%d ledger entries for %d requests", len(entries), sent)
	}
}
