package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// envOr is the positive integer in the environment variable name, or def.
func envOr(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// servedByVendors is how many API requests the stacks' fake vendors
// received.
func servedByVendors(t *testing.T, stacks ...*launch.Stack) int {
	t.Helper()
	n := 0
	seen := map[*launch.Fake]bool{}
	for _, s := range stacks {
		for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
			if !seen[f] {
				seen[f] = true
				n += f.APIRequests()
			}
		}
	}
	return n
}

// loadResult counts an open-loop load's replies.
type loadResult struct {
	sent, ok, refused, failed atomic.Int64
}

// openLoad sends requests of key at rate per second for d, spread over the
// stacks in turn, each a different one of JSON and streamed messages and
// chat completions, without waiting for replies (at most limit in flight;
// a send that finds them all busy waits, and the rate reached is logged).
func openLoad(t *testing.T, stacks []*launch.Stack, key string, rate int, d time.Duration, limit int) *loadResult {
	return openLoadWith(t, func(i int) *launch.Stack { return stacks[i%len(stacks)] }, key, rate, d, limit, nil)
}

// openLoadWith is openLoad sending request i through the stack pick(i),
// where a request sent through a stack for which excused returns true
// (asked when the request was sent) may fail: it counts as failed without
// failing the test. excused may be nil.
func openLoadWith(t *testing.T, pick func(i int) *launch.Stack, key string, rate int, d time.Duration, limit int, excused func(*launch.Stack) bool) *loadResult {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: limit, MaxConnsPerHost: limit}}
	res := &loadResult{}
	slots := make(chan struct{}, limit)
	var wg sync.WaitGroup
	every := time.Second / time.Duration(rate)
	start := time.Now()
	for i := 0; time.Since(start) < d; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
			time.Sleep(wait) // the load's schedule, not synchronisation
		}
		slots <- struct{}{}
		s := pick(i)
		route := "alpha"
		if i%4 >= 2 {
			route = "beta"
		}
		path, h, body := requestFor(route, key, i%2 == 1)
		res.sent.Add(1)
		mayFail := excused != nil && excused(s)
		wg.Go(func() {
			defer func() { <-slots }()
			r := postAndRead(client, s.URL+path, h, body, 0, nil)
			switch {
			case r.status == 200 && r.err == nil:
				res.ok.Add(1)
			case r.status == 402 || r.status == 429 || r.status == 503:
				res.refused.Add(1)
			default:
				res.failed.Add(1)
				if mayFail {
					t.Logf("request %s (excused): %d %v %.200s", path, r.status, r.err, r.body)
				} else {
					t.Errorf("request %s: %d %v %.200s", path, r.status, r.err, r.body)
				}
			}
		})
	}
	took := time.Since(start)
	wg.Wait()
	t.Logf("sent %d requests in %v (%.0f/s asked %d/s): %d served, %d refused, %d failed",
		res.sent.Load(), took.Round(time.Millisecond), float64(res.sent.Load())/took.Seconds(), rate,
		res.ok.Load(), res.refused.Load(), res.failed.Load())
	return res
}

// Sustained load with leases on, through one sidecar and through two on
// one Redis: every request the fake vendors served is in the ledger once,
// and the balance and the usage counters agree with the ledger, once the
// load stops and the leases are returned. The load comes in two phases
// with a pause between. GATEWAY_TEST_LOAD_RATE (requests
// per second, default 200) and GATEWAY_TEST_LOAD_SECONDS (each phase's
// length, default 5) set the load; the acceptance run is 1,000/s for 60 s.
func TestLeasesConserveUnderLoad(t *testing.T) {
	rate := envOr(t, "GATEWAY_TEST_LOAD_RATE", 200)
	secs := envOr(t, "GATEWAY_TEST_LOAD_SECONDS", 5)
	for _, sidecars := range []int{1, 2} {
		t.Run(strconv.Itoa(sidecars)+"-sidecars", func(t *testing.T) {
			rs := redistest.NewServer(t)
			configure := func(c *config.Config) { c.Limits.Leases = "on" }
			var stacks []*launch.Stack
			for range sidecars {
				stacks = append(stacks, launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: configure}))
			}
			s := stacks[0]
			const initial = 1_000_000_000_000
			acct := s.NewAccount(1000, noLimits)
			// Two phases with a pause between, long enough for the leases to
			// be returned and forgotten: the second phase's leases are new
			// ones (a benchmark's shape).
			res := openLoad(t, stacks, acct.Key, rate, time.Duration(secs)*time.Second, 256)
			eventually.True(t, 30*time.Second, "the leases returned", func() bool { return s.Leased(acct.ID) == 0 })
			time.Sleep(3 * s.Config.Limits.LeaseRenewInterval()) // the pause of the load's schedule: its leases forgotten
			more := openLoad(t, stacks, acct.Key, rate, time.Duration(secs)*time.Second, 256)
			res.ok.Add(more.ok.Load())
			for _, st := range stacks {
				st.WaitSettled()
				if n := sidecarMetric(t, st, "gateway_admissions_total", `path="lease"`); n == 0 {
					t.Errorf("no request was admitted from a lease")
				}
			}
			served := servedByVendors(t, stacks...)
			if int64(served) != res.ok.Load() {
				t.Errorf("the vendors served %d requests, the clients were answered %d", served, res.ok.Load())
			}
			eventually.True(t, 30*time.Second, "the leases returned", func() bool { return s.Leased(acct.ID) == 0 })
			waitNoHolds(t, s, acct.ID)
			entries := checkBooks(t, s, acct.ID, initial, map[string]bool{})
			ok := 0
			for _, e := range entries {
				if e.Status == 200 {
					ok++
				}
			}
			if ok != served {
				t.Errorf("%d requests served by the vendors, %d in the ledger", served, ok)
			}
		})
	}
}

// A sidecar (A) partitioned from Redis for longer than the hold lease
// while it and another (B) take load on one account, leases on, the load
// going on through the heal: every request the vendors served is in the
// ledger once (a request A served during the partition reconciled with
// its sweep where B's sweeper came first), and the balance and the
// counters agree with the ledger. Either A's share of the load goes on
// during the partition (refused there), with a response on a WebSocket
// through A that its lease admits as it does A's HTTP requests, or it
// goes to B while A is cut
// off and comes back three renewal intervals after the heal (A's lease
// forgotten while idle, a new one taken). In the second case the key is in
// a project with limits its leases hold shares of (money, seats, tokens,
// slots): the project's state then counts the account's spend, holds,
// seats and leases nothing. GATEWAY_TEST_PARTITION_LEASE_MS sets the hold
// lease (default 3000; the partition lasts about twice as long).
func TestLeasesPartitionPastTheLease(t *testing.T) {
	for _, idle := range []bool{false, true} {
		name := "load-through"
		if idle {
			name = "idle-while-cut"
		}
		t.Run(name, func(t *testing.T) { partitionPastTheLease(t, idle) })
	}
}

func partitionPastTheLease(t *testing.T, idle bool) {
	rs := redistest.NewServer(t)
	px := startProxy(t, rs.Addr)
	lease := time.Duration(envOr(t, "GATEWAY_TEST_PARTITION_LEASE_MS", 3000)) * time.Millisecond
	configure := func(c *config.Config) {
		c.Limits.Leases = "on"
		c.Limits.HoldLease = config.Duration(lease)
		c.Limits.BackgroundPoll = config.Duration(lease / 4)
	}
	a := launchtest.Start(t, launch.Options{RedisAddr: px.Addr(), Configure: configure})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: configure})
	const initial = 1_000_000_000_000
	acct := b.NewAccount(1000, noLimits)
	ctx := context.Background()
	var projectID string
	if idle {
		projectID, acct.Key = projectKey(t, b, acct.ID, "limited", account.Limits{DailyNanoUSD: 500_000_000_000,
			Concurrency: 10_000, TPM: 1_000_000_000, RPM: 1_000_000, WindowMinutes: 1})
	}
	sendUntilLeased(t, a, acct.Key)
	sendUntilLeased(t, b, acct.Key)
	before := servedByVendors(t, a, b)

	// The load runs from before the partition until well after the heal,
	// past the time A takes a new lease.
	var avoidA atomic.Bool
	loaded := loadBoth(t, a, b, acct.Key, 3*lease+8*time.Second, &avoidA, nil)
	time.Sleep(2 * time.Second) // load before the partition: the schedule, not synchronisation
	px.Hang()
	avoidA.Store(idle)
	cut := time.Now()
	// A response on a WebSocket through A while it is cut off: admitted
	// from its lease, as A's HTTP requests are, and billed once the spool
	// is replayed (settledBooks counts it among the vendors' requests).
	sock := make(chan string, 1)
	if !idle {
		w := mustDialSocket(t, a, acct.Key, nil)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			create := fmt.Sprintf(`{"type":"response.create","model":%q,"max_output_tokens":256,"input":"While cut off?"}`, betaModel)
			if err := w.c.Write(ctx, websocket.MessageText, []byte(create)); err != nil {
				sock <- err.Error()
				return
			}
			evs, err := w.toTerminal(ctx)
			if err != nil || len(evs) == 0 {
				sock <- fmt.Sprintf("%d events, %v", len(evs), err)
				return
			}
			if last := evs[len(evs)-1]; last.Type != "response.completed" {
				sock <- string(last.raw)
				return
			}
			sock <- ""
		}()
	}
	time.Sleep(2*lease - lease/6) // the partition's length, not synchronisation
	px.Heal()
	t.Logf("A partitioned from Redis for %v (hold lease %v)", time.Since(cut).Round(time.Millisecond), lease)
	// A's load comes back three renewal intervals after the heal, its
	// lease dropped and forgotten meanwhile: the schedule.
	time.Sleep(3 * a.Config.Limits.LeaseRenewInterval())
	avoidA.Store(false)
	res := loaded()
	if !idle {
		if got := <-sock; got != "" {
			t.Errorf("a response on a socket through A while it was cut off: %s", got)
		}
	}
	if t.Failed() {
		return
	}
	_, ok, served := settledBooks(t, a, b, acct.ID, initial)
	if len(ok) != served {
		t.Errorf("%d requests served by the vendors (%d during the load, %d answered 200), %d in the ledger",
			served, served-before, res.ok.Load(), len(ok))
	}
	if got := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`); got == 0 {
		t.Error("A admitted nothing from a lease")
	}
	if projectID == "" {
		return
	}
	u, err := b.Store.Usage(ctx, acct.ID, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := b.Store.ProjectStates(ctx, acct.ID, projectID)
	if err != nil {
		t.Fatal(err)
	}
	// Its spend and its requests are the account's, the requests the
	// sweeper settled uncharged and their late settlements reconciled
	// among them.
	if p := ps[0]; p.InFlight != 0 || p.Held != 0 || p.Total.Cost != u.Totals.Cost || p.Total.Requests != u.Totals.Requests {
		t.Errorf("project state %+v; the account charged %d for %d requests, holds nothing", p, u.Totals.Cost, u.Totals.Requests)
	}
	projectLeasesReturned(t, rs.Addr, acct.ID, projectID, "once the leases are returned")
}

// A sidecar (A) stopped (SIGSTOP, as a long pause of its process or its
// machine stops it) for longer than the hold lease, with JSON replies,
// streams and a response on a WebSocket in flight through it and leases
// on, while another (B) takes the
// account's load; then continued, and taking load again. What A had in
// flight when it stopped is swept by B at its last checkpoint and, once A
// runs again and finds the holds' leases past, cut (the client has the
// reply's status and part of its body) and settled by A, reconciled with
// the sweep: never charged twice. Every request the vendors served is in
// the ledger once, the balance and the counters agree with the ledger,
// and A serves again from a new lease.
// The freeze is shorter than Envoy's message timeout (5 s), so that Envoy
// waits for A rather than failing its requests itself.
// GATEWAY_TEST_FREEZE_LEASE_MS sets the hold lease (default 2000; the
// freeze lasts about twice as long). Once with one vendor key per
// upstream, once with a pool of three, once with the account pinned to
// a key of the pool (k3 of each upstream).
func TestLeasesFreezePastTheLease(t *testing.T) {
	for _, keys := range []string{"one-key", "pool", "pinned"} {
		t.Run(keys, func(t *testing.T) { freezePastTheLease(t, keys) })
	}
}

func freezePastTheLease(t *testing.T, keys string) {
	rs := redistest.NewServer(t)
	lease := time.Duration(envOr(t, "GATEWAY_TEST_FREEZE_LEASE_MS", 2000)) * time.Millisecond
	const initial = 1_000_000_000_000
	var acct launch.Account
	if keys == "pinned" {
		// A pin names an account, which must exist before the config.
		rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
		acct = newAccountIn(t, store.New(rdb, store.Options{}), initial)
		rdb.Close()
	}
	configure := func(c *config.Config) {
		c.Limits.Leases = "on"
		c.Limits.HoldLease = config.Duration(lease)
		if keys != "pinned" {
			return
		}
		for i := range c.Upstreams {
			for j := range c.Upstreams[i].VendorKeys {
				if k := &c.Upstreams[i].VendorKeys[j]; k.Name == "k3" {
					k.Accounts = []string{acct.ID}
				}
			}
		}
	}
	pool := 0
	if keys != "one-key" {
		pool = 3
	}
	a := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: configure, Pool: pool})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: configure, Pool: pool})
	// Replies that take a while, so that some are in flight at A when it
	// stops: a JSON reply after 200 ms, a stream's ten events 40 ms apart.
	for _, s := range []*launch.Stack{a, b} {
		s.Primary.Control(map[string]any{"latency_ms": 200, "event_delay_ms": 40, "reply_words": 10})
	}
	if keys != "pinned" {
		acct = b.NewAccount(1000, noLimits)
	}
	sendUntilLeased(t, a, acct.Key)
	sendUntilLeased(t, b, acct.Key)
	before := servedByVendors(t, a, b)

	// Requests through A may fail until it is back (those in flight when
	// it stopped); none sent to A after that.
	var avoidA, excuseA atomic.Bool
	excuseA.Store(true)
	loaded := loadBoth(t, a, b, acct.Key, 3*lease+6*time.Second, &avoidA,
		func(s *launch.Stack) bool { return s == a && excuseA.Load() })
	time.Sleep(2 * time.Second) // load before the freeze: the schedule, not synchronisation
	// A response on a socket through A, begun before A stops: the
	// WebSocket transport's calls are swept and reconciled as HTTP's are.
	ws := mustDialSocket(t, a, acct.Key, nil)
	if ev := ws.startResponse(slowSocket); ev.Type != "response.created" {
		t.Fatalf("the socket's response began with %s", ev.raw)
	}
	avoidA.Store(true)
	launchtest.Freeze(t, a.Sidecar)
	stopped := time.Now()
	time.Sleep(2*lease - lease/6) // the freeze's length, not synchronisation
	a.Sidecar.Signal(syscall.SIGCONT)
	t.Logf("A stopped for %v (hold lease %v)", time.Since(stopped).Round(time.Millisecond), lease)
	// A's requests come back once it has renewed, or dropped, what it held.
	time.Sleep(a.Config.Limits.LeaseRenewInterval()) // the schedule, not synchronisation
	leased := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`)
	excuseA.Store(false)
	avoidA.Store(false)
	// Completed, or cut when A found its hold swept: either way billed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	sockEvs, sockErr := ws.toTerminal(ctx)
	cancel()
	res := loaded()
	if t.Failed() {
		return
	}
	entries, ok, served := settledBooks(t, a, b, acct.ID, initial)
	swept, reconciled := 0, 0
	var sockSwept, sockReconciled bool
	vendorKeys := map[string]bool{}
	for _, e := range entries {
		if e.VendorKey != "" {
			vendorKeys[e.VendorKey] = true
		}
		if e.Interrupted {
			swept++
		}
		if e.Reconciled {
			reconciled++
		}
		if e.Transport == "websocket" {
			sockSwept = sockSwept || e.Interrupted
			sockReconciled = sockReconciled || e.Reconciled
		}
	}
	last := "none"
	if len(sockEvs) > 0 {
		last = sockEvs[len(sockEvs)-1].Type
	}
	t.Logf("the socket's response: %d more events, the last %s (%v)", len(sockEvs), last, sockErr)
	switch keys {
	case "pool":
		for k := range vendorKeys {
			if !slices.Contains(launch.PoolKeys(pool), k) {
				t.Errorf("a request served by vendor key %q, not one of the pool's %v", k, launch.PoolKeys(pool))
			}
		}
	case "pinned":
		if len(vendorKeys) != 1 || !vendorKeys["k3"] {
			t.Errorf("the pinned account's requests served by vendor keys %v; want k3 alone", vendorKeys)
		}
	}
	if !sockSwept || !sockReconciled {
		t.Errorf("the socket's response in flight through A: swept %v, reconciled %v; want both", sockSwept, sockReconciled)
	}
	t.Logf("%d requests sent, %d served to the client, %d failed (through A, in flight when it stopped); %d swept, %d reconciled with their sweep",
		res.sent.Load(), res.ok.Load(), res.failed.Load(), swept, reconciled)
	if swept == 0 {
		t.Error("no request of A's was swept: the freeze did not outlast a hold")
	}
	if len(ok) != served {
		t.Errorf("%d requests served by the vendors (%d during the load, %d answered 200), %d in the ledger",
			served, served-before, res.ok.Load(), len(ok))
	}
	if got := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`); got <= leased {
		t.Errorf("A admitted nothing from a lease once continued (%v then, %v at the end)", leased, got)
	}
}

// settledBooks waits until A's spool is replayed, both sidecars have
// settled what they queued, the account's leases are returned and no hold
// is left, then checks the books (checkBooks). It returns the ledger, the
// requests it holds a 2xx entry of, and how many the vendors served.
func settledBooks(t *testing.T, a, b *launch.Stack, acctID string, initial int64) (entries []ledger.Entry, ok map[string]bool, served int) {
	t.Helper()
	eventually.True(t, 30*time.Second, "A's spool to be replayed", func() bool {
		return sidecarMetric(t, a, "gateway_spool_depth") == 0
	})
	a.WaitSettled()
	b.WaitSettled()
	eventually.True(t, 30*time.Second, "the leases returned", func() bool { return b.Leased(acctID) == 0 })
	waitNoHolds(t, b, acctID)
	entries = checkBooks(t, b, acctID, initial, map[string]bool{})
	ok = map[string]bool{}
	for _, e := range entries {
		if e.Status >= 200 && e.Status < 300 {
			ok[e.RequestID] = true
		}
	}
	return entries, ok, servedByVendors(t, a, b)
}

// loadBoth runs openLoadWith in the background for d at 60 requests/s of
// key, request i through a when i is even and avoidA is not set, else
// through b; the function it returns waits for the load's end and returns
// its result.
func loadBoth(t *testing.T, a, b *launch.Stack, key string, d time.Duration, avoidA *atomic.Bool, excused func(*launch.Stack) bool) func() *loadResult {
	pick := func(i int) *launch.Stack {
		if i%2 == 0 && !avoidA.Load() {
			return a
		}
		return b
	}
	var res *loadResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		res = openLoadWith(t, pick, key, 60, d, 64, excused)
	}()
	return func() *loadResult {
		<-done
		return res
	}
}
