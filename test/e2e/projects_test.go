package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Projects across two sidecars sharing one Redis, leases on (the default;
// budgets this small are not sliced: TestProjectsRaceTwoSidecarsLeased
// races a project's budget its leases slice):
// an account with three projects, each under a daily budget, and the
// account's own budget above each of them. Of 30 concurrent requests, ten
// per project, exactly what fits is admitted at every level: each project's
// last dollars when the account has room, the account's last dollars when
// it has not; refusals name the project and its amounts, with the
// headers of the same limit of a key. A key admitted
// from a lease and then moved into a project counts against the project
// from then on only.
func TestProjectsRaceTwoSidecars(t *testing.T) {
	rs := redistest.NewServer(t)
	a := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr})
	pairs := []*launch.Stack{a, b}
	ctx := context.Background()
	body := messagesBody(true, "")
	hold := priceOf(t, a, "alpha", alphaModel).Hold(int64(len(body)), 256)
	fits := []int{2, 3, 4}

	// race makes an account with daily budget acctDaily and three projects
	// whose budgets fit fits[i] holds, sends ten requests per project at
	// once and returns how many each project had admitted.
	race := func(t *testing.T, acctDaily int64) (admitted []int, refusals []string, acctID string) {
		const balance = 100_000_000_000
		acct, err := a.Store.CreateAccount(ctx, t.Name(), balance, account.Limits{DailyNanoUSD: acctDaily})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		var names []string
		for i, f := range fits {
			pid, k := projectKey(t, a, acct.ID, fmt.Sprintf("team-%d", i), account.Limits{DailyNanoUSD: int64(f)*hold + hold/2})
			keys = append(keys, k)
			names = append(names, fmt.Sprintf(`for project \"team-%d\" (%s)`, i, pid))
		}
		for _, p := range pairs {
			p.Primary.Reset()
			p.Primary.Control(map[string]any{"event_delay_ms": 600_000, "reply_words": 3})
		}
		res, end := burstOf(t, pairs, 10*len(fits), func(i int) string { return keys[i%len(keys)] }, body)
		admitted = make([]int, len(fits))
		for i, r := range res {
			p := i % len(fits)
			switch {
			case r.status == 200:
				admitted[p]++
			case r.status != 429:
				t.Errorf("request of project %d: %d %s", p, r.status, r.body)
			case strings.Contains(r.body, "daily spend limit "+names[p]+":"):
				refusals = append(refusals, "project")
				// The project's amounts: its budget, nothing settled, what
				// its admitted requests hold.
				want := fmt.Sprintf("$0.00 of $%s used", pricing.FormatUSD(int64(fits[p])*hold+hold/2))
				if !strings.Contains(r.body, want) {
					t.Errorf("project refusal without its amounts (%s): %s", want, r.body)
				}
			case strings.Contains(r.body, "daily spend limit for this account"):
				refusals = append(refusals, "account")
			default:
				t.Errorf("refusal of project %d names neither its project nor the account: %s", p, r.body)
			}
		}
		if peak := peakInFlight(pairs); peak > admitted[0]+admitted[1]+admitted[2] {
			t.Errorf("the vendor had %d requests in flight; %v were admitted", peak, admitted)
		}
		end()
		eventually.That(t, 15*time.Second, "the cut streams settle", func() (bool, string) {
			n, held, err := a.Store.Store.OpenHolds(ctx, acct.ID)
			return err == nil && n == 0, fmt.Sprint(n, " holds of ", held, " ", err)
		})
		a.WaitSettled()
		b.WaitSettled()
		conserved(t, a.Store.Store, acct.ID, balance)
		return admitted, refusals, acct.ID
	}

	t.Run("each project's last dollars", func(t *testing.T) {
		admitted, _, _ := race(t, 100*hold)
		for i, f := range fits {
			if admitted[i] != f {
				t.Fatalf("admitted %v; want exactly %v", admitted, fits)
			}
		}
	})
	t.Run("the account's last dollars", func(t *testing.T) {
		admitted, refusals, _ := race(t, 7*hold+hold/2)
		total := 0
		for i, f := range fits {
			total += admitted[i]
			if admitted[i] > f {
				t.Fatalf("project %d: %d admitted, its budget fits %d", i, admitted[i], f)
			}
		}
		if total != 7 {
			t.Fatalf("admitted %v, %d in all; the account's budget fits exactly 7", admitted, total)
		}
		if !strings.Contains(strings.Join(refusals, " "), "account") {
			t.Fatalf("no refusal named the account: %v", refusals)
		}
	})

	t.Run("refusal headers", func(t *testing.T) {
		acct, err := a.Store.CreateAccount(ctx, "headers", 100_000_000_000, account.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		rate, rk := projectKey(t, a, acct.ID, "slow", account.Limits{RPM: 1, WindowMinutes: 1})
		poor, pk := projectKey(t, a, acct.ID, "poor", account.Limits{DailyNanoUSD: hold / 2})
		for _, s := range pairs {
			s.Primary.Reset()
		}
		if resp, b := a.Do("POST", alphaPath, messagesHeaders(rk), body); resp.StatusCode != 200 {
			t.Fatalf("first request: %d %s", resp.StatusCode, b)
		}
		// The other sidecar: the project's rate is counted in Redis.
		resp, b := b.Do("POST", alphaPath, messagesHeaders(rk), body)
		if resp.StatusCode != 429 || resp.Header.Get("retry-after") == "" || resp.Header.Get("x-should-retry") == "false" ||
			!strings.Contains(string(b), `request rate limit reached for project \"slow\" (`+rate+`): 1 of 1 requests in its window`) {
			t.Fatalf("over the project's rate: %d %v %s", resp.StatusCode, resp.Header, b)
		}
		resp, b = a.Do("POST", alphaPath, messagesHeaders(pk), body)
		if resp.StatusCode != 429 || resp.Header.Get("retry-after") != "" || resp.Header.Get("x-should-retry") != "false" ||
			!strings.Contains(string(b), `daily spend limit for project \"poor\" (`+poor+`)`) {
			t.Fatalf("over the project's daily budget: %d %v %s", resp.StatusCode, resp.Header, b)
		}
	})

	t.Run("a moved key's future spend only", func(t *testing.T) {
		const balance = 100_000_000_000
		acct, err := a.Store.CreateAccount(ctx, "mover", balance, account.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := a.Store.CreateProject(ctx, acct.ID, "later", account.Limits{DailyNanoUSD: 50_000_000_000})
		if err != nil {
			t.Fatal(err)
		}
		key, k, err := a.Store.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ro, _, err := a.Store.CreateKey(ctx, acct.ID, account.ReadOnlyToken, account.KeyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range pairs {
			s.Primary.Reset()
		}
		before := sendUntilLeased(t, a, key) // the default project's key is leased
		a.WaitSettled()
		if err := a.Store.MoveKey(ctx, acct.ID, k.ID, p.ID); err != nil {
			t.Fatal(err)
		}
		for _, s := range pairs {
			eventually.That(t, 2*config.DefaultKeyCacheTTL+time.Second, "the sidecar's key cache to see the move", func() (bool, string) {
				ps, _ := s.Usage(key, "day")["projects"].([]any)
				if len(ps) != 1 {
					return false, fmt.Sprint(ps)
				}
				id, _ := ps[0].(map[string]any)["id"].(string)
				return id == p.ID, id
			})
		}
		const after = 4
		for i := range after {
			path, h, body := requestFor("alpha", key, false)
			if resp, b := pairs[i%2].Do("POST", path, h, body); resp.StatusCode != 200 {
				t.Fatalf("request after the move: %d %s", resp.StatusCode, b)
			}
		}
		a.WaitSettled()
		b.WaitSettled()
		var beforeCost, afterCost int64
		var nBefore, nAfter int
		for _, e := range allLedgerEntries(t, a, acct.ID) {
			switch e.ProjectID {
			case "":
				beforeCost += e.Cost
				nBefore++
			case p.ID:
				afterCost += e.Cost
				nAfter++
			default:
				t.Fatalf("ledger entry in project %q", e.ProjectID)
			}
		}
		if nBefore != before || nAfter != after || afterCost <= 0 {
			t.Fatalf("ledger: %d entries before the move (want %d), %d after (want %d, costing %d)", nBefore, before, nAfter, after, afterCost)
		}
		st, err := a.Store.ProjectStates(ctx, acct.ID, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st[0].Day.Cost != afterCost || st[0].Day.Requests != after {
			t.Fatalf("project state %+v; want the %d requests after the move, costing %d", st[0].Day, after, afterCost)
		}
		u := a.Usage(ro, "day")
		ps := u["projects"].([]any)
		def, moved := ps[0].(map[string]any), ps[1].(map[string]any)
		if def["id"] != account.DefaultProject || usdNano(def["cost_usd"]) != beforeCost || moved["id"] != p.ID || usdNano(moved["cost_usd"]) != afterCost {
			t.Fatalf("/v1/usage projects %v; want %d before the move in default, %d after in %s", ps, beforeCost, afterCost, p.ID)
		}
		conserved(t, a.Store.Store, acct.ID, balance)
	})
}

// projectKey makes a project of the account, name with limits, and a
// model key in it: the project's id and the key.
func projectKey(t *testing.T, s *launch.Stack, acctID, name string, limits account.Limits) (projectID, key string) {
	t.Helper()
	ctx := context.Background()
	p, err := s.Store.CreateProject(ctx, acctID, name, limits)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err = s.Store.CreateKey(ctx, acctID, account.ModelKey, account.KeyOptions{ProjectID: p.ID})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID, key
}

// projectLeasesReturned fails the test if the project's hash in the Redis
// at addr still counts leased money or seats once its leases are back
// (when says when that is).
func projectLeasesReturned(t *testing.T, addr, acctID, projectID, when string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	v, err := rdb.HMGet(context.Background(), "gw:{acct:"+acctID+"}:ps:"+projectID, "leased", "seats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range []string{"leased", "seats"} {
		if x, _ := v[i].(string); x != "" && x != "0" {
			t.Errorf("the project's %s is %s %s", f, x, when)
		}
	}
}

// usdNano reads a USD amount of /v1/usage back as nano-USD.
func usdNano(v any) int64 {
	f, _ := v.(float64)
	return int64(f*1e9 + 0.5)
}
