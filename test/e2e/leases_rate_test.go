package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Request slots: an account with a request-rate limit leases slots of its
// window on two sidecars. Twice its limit sent through both admits exactly
// the limit, some of it from the leases; every refusal is the rate limit's;
// once the leases are returned the window holds exactly the admitted
// requests, no placeholder; the balance, ledger and counters agree.
func TestLeasedRateLimitExactTwoSidecars(t *testing.T) {
	runLeasedRate(t, false)
}

// The same of a project's request-rate limit: its key's leases hold slots
// of the project's window.
func TestProjectsRaceTwoSidecarsLeasedRate(t *testing.T) {
	runLeasedRate(t, true)
}

// runLeasedRate runs the rate race of an account's limit, or of its
// project's when inProject.
func runLeasedRate(t *testing.T, inProject bool) {
	rs := redistest.NewServer(t)
	conf := func(c *config.Config) { c.Limits.Leases = "on" }
	a := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf})
	const rpm = 160
	limits := account.Limits{RPM: rpm, WindowMinutes: 1}
	var acct launch.Account
	log := "rl"
	if inProject {
		acct = a.NewAccount(100, account.Limits{})
		var projectID string
		projectID, acct.Key = projectKey(t, a, acct.ID, "limited", limits)
		log = "prl:" + projectID
	} else {
		acct = a.NewAccount(100, limits)
	}

	// Eight clients per sidecar, each sending one request after another:
	// the first requests are admitted by the script and start the leases,
	// the next ones find them.
	var next, admitted atomic.Int64
	var wg sync.WaitGroup
	for _, s := range []*launch.Stack{a, b} {
		for range 8 {
			wg.Go(func() {
				for next.Add(1) <= 2*rpm {
					path, h, body := requestFor("alpha", acct.Key, false)
					resp, got := s.Do("POST", path, h, body)
					switch {
					case resp.StatusCode == 200:
						admitted.Add(1)
					case resp.StatusCode != 429 || !strings.Contains(string(got), "request rate limit reached"):
						t.Errorf("refusal %d %s; want the rate limit's 429", resp.StatusCode, got)
					}
				}
			})
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != rpm {
		t.Fatalf("admitted %d of %d; want exactly the limit, %d", got, 2*rpm, rpm)
	}
	leased := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`) + sidecarMetric(t, b, "gateway_admissions_total", `path="lease"`)
	if leased == 0 {
		t.Fatal("no request was admitted from a lease: the test shows nothing")
	}

	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	window := "gw:{acct:" + acct.ID + "}:" + log
	eventually.That(t, 15*time.Second, "the window holds the admitted requests and no placeholder", func() (bool, string) {
		ids, err := rdb.ZRange(context.Background(), window, 0, -1).Result()
		placeholders := 0
		for _, id := range ids {
			if strings.HasPrefix(id, "L:") {
				placeholders++
			}
		}
		return err == nil && placeholders == 0 && len(ids) == rpm, fmt.Sprintf("%d members, %d placeholders, %v", len(ids), placeholders, err)
	})
	a.WaitSettled()
	b.WaitSettled()
	conserved(t, a.Store.Store, acct.ID, 100_000_000_000)
	t.Logf("%d of %d admitted, %v of them from leases", rpm, 2*rpm, leased)
}
