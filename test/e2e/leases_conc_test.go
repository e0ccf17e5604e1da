package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
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

// heldStreams sends streaming requests of one key and holds every admitted
// one open (the fake vendor waits after its first event) until end.
type heldStreams struct {
	t        *testing.T
	ctx      context.Context
	end      context.CancelFunc
	client   *http.Client
	key      string
	want     string // what every refusal's body names
	held     sync.WaitGroup
	admitted atomic.Int64
	mu       sync.Mutex
	wrong    []string // refusals that were not want's
}

func newHeldStreams(t *testing.T, key, want string) *heldStreams {
	ctx, cancel := context.WithCancel(context.Background())
	return &heldStreams{t: t, ctx: ctx, end: cancel, key: key, want: want,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// send sends one request through s; an admitted one is held until close.
func (h *heldStreams) send(s *launch.Stack) (admitted bool) {
	req, err := http.NewRequestWithContext(h.ctx, "POST", s.URL+alphaPath, bytes.NewReader(messagesBody(true, "")))
	if err != nil {
		h.t.Error(err)
		return false
	}
	for k, v := range messagesHeaders(h.key) {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Errorf("request: %v", err)
		return false
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 429 || !strings.Contains(string(b), h.want) {
			h.mu.Lock()
			h.wrong = append(h.wrong, fmt.Sprintf("%d %s", resp.StatusCode, b))
			h.mu.Unlock()
		}
		return false
	}
	h.admitted.Add(1)
	// The first event arrived: the vendor is answering, and holds the
	// stream open until close cuts it.
	bufio.NewReader(resp.Body).ReadString('\n')
	h.held.Go(func() {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	})
	return true
}

// clients runs n clients on each of stacks, each sending one request after
// another while more(refused) says so (refused: its last was refused).
func (h *heldStreams) clients(stacks []*launch.Stack, n int, more func(refused bool) bool) {
	var wg sync.WaitGroup
	for _, s := range stacks {
		for range n {
			wg.Go(func() {
				refused := false
				for more(refused) {
					refused = !h.send(s)
				}
			})
		}
	}
	wg.Wait()
}

// close cuts the held streams.
func (h *heldStreams) close() {
	h.end()
	h.held.Wait()
	h.client.CloseIdleConnections()
}

// Concurrency seats: an account (and, apart, a key) with a concurrency
// limit big enough to slice leases seats on two sidecars. Streams are
// opened and held: one after another on a (which leases seats), then by
// clients on b until refused while a holds free seats, then on both until
// the limit is reached. Exactly the limit is admitted, some of it from the
// leases, the vendors never have more in flight, every refusal is the
// concurrency limit's (one more request per client once all are admitted
// included); after the streams end no hold is left, the key's state is
// zero, no seat is left once the idle leases are returned, and the
// balance, ledger and counters agree.
func TestLeasedConcurrencyExactTwoSidecars(t *testing.T) {
	rs := redistest.NewServer(t)
	// Renewals every 5 s: a's free seats outlive b's burst (a renewal
	// would resize them to what is left).
	conf := func(c *config.Config) {
		c.Limits.Leases = "on"
		c.Limits.LeaseInterval = config.Duration(5 * time.Second)
	}
	a := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf})
	stacks := []*launch.Stack{a, b}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	ctx := context.Background()
	const limit = 40
	const balance = 100_000_000_000

	cases := []struct {
		name    string
		acct    account.Limits
		key     account.Limits
		message string
	}{
		{name: "account", acct: account.Limits{Concurrency: limit}, message: "concurrent request limit reached for this account"},
		{name: "key", key: account.Limits{Concurrency: limit}, message: "concurrent request limit reached for this key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acct, err := a.Store.CreateAccount(ctx, c.name, balance, c.acct)
			if err != nil {
				t.Fatal(err)
			}
			key, _, err := a.Store.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: "limited", Limits: c.key})
			if err != nil {
				t.Fatal(err)
			}
			kid := keyID(t, a, key)
			leasedBefore := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`) + sidecarMetric(t, b, "gateway_admissions_total", `path="lease"`)
			for _, s := range stacks {
				s.Primary.Reset()
				s.Primary.Control(map[string]any{"event_delay_ms": 600_000, "reply_words": 3})
			}
			h := newHeldStreams(t, key, c.message)
			// 1. Requests one after another on a: the first is admitted by
			// the script and takes a lease with seats, the next from it.
			for i := range 6 {
				if !h.send(a) {
					t.Fatalf("request %d on a refused", i)
				}
			}
			if n := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`) - leasedBefore; n == 0 {
				t.Fatal("a took no lease")
			}
			// 2. Four clients on b until each is refused: a's free seats
			// are in flight for b (the early refusals leasing costs).
			h.clients([]*launch.Stack{b}, 4, func(refused bool) bool { return !refused })
			// 3. Clients on both until the limit is reached: a's seats
			// are used, or returned to the script at its next renewal.
			deadline := time.Now().Add(20 * time.Second)
			h.clients(stacks, 4, func(bool) bool { return h.admitted.Load() < limit && time.Now().Before(deadline) })
			// 4. Every seat taken: one more per client, on either sidecar,
			// is refused.
			h.clients(stacks, 4, func(refused bool) bool { return !refused && h.admitted.Load() <= limit })
			admitted := h.admitted.Load()
			peak := peakInFlight(stacks)
			h.close()
			for _, w := range h.wrong {
				t.Errorf("refusal %s; want the concurrency limit's 429", w)
			}
			if admitted != limit {
				t.Fatalf("admitted %d; want exactly the limit, %d", admitted, limit)
			}
			if peak != limit {
				t.Fatalf("the vendors had %d requests in flight at once; want the %d admitted", peak, limit)
			}
			leased := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`) + sidecarMetric(t, b, "gateway_admissions_total", `path="lease"`) - leasedBefore
			if leased == 0 {
				t.Fatal("no request was admitted from a lease: the test shows nothing")
			}

			eventually.That(t, 15*time.Second, "the cut streams settle", func() (bool, string) {
				n, held, err := a.Store.Store.OpenHolds(ctx, acct.ID)
				return err == nil && n == 0, fmt.Sprint(n, " holds of ", held, " ", err)
			})
			// Idle leases are returned after two intervals, their seats
			// with them. A lease returned while some of its requests were
			// unrecorded stays, empty, until the sweep: nothing in it.
			eventually.That(t, 15*time.Second, "the leases are returned with their seats", func() (bool, string) {
				leases, err1 := rdb.HGetAll(ctx, "gw:{acct:"+acct.ID+"}:leases").Result()
				as, err2 := rdb.HGet(ctx, "gw:{acct:"+acct.ID+"}:acct", "seats").Int64()
				ks, err3 := rdb.HGet(ctx, "gw:{acct:"+acct.ID+"}:ks:"+kid, "seats").Int64()
				ok := err1 == nil && (err2 == redis.Nil || err2 == nil && as == 0) && (err3 == redis.Nil || err3 == nil && ks == 0)
				for _, v := range leases {
					// "<amount> <expiry> <kc> <key id> <rl> <lo> <hi> <seats> <sl>"
					f := strings.Fields(v)
					ok = ok && len(f) == 9 && f[0] == "0" && f[7] == "0"
				}
				return ok, fmt.Sprintf("leases %v (%v), account seats %d (%v), key seats %d (%v)", leases, err1, as, err2, ks, err3)
			})
			if n := a.Leased(acct.ID); n != 0 {
				t.Fatalf("%d nano-USD still leased", n)
			}
			a.WaitSettled()
			b.WaitSettled()
			conserved(t, a.Store.Store, acct.ID, balance)
			if s, err := a.Store.KeyStates(ctx, acct.ID, kid); err != nil || s[0].InFlight != 0 || s[0].Held != 0 {
				t.Fatalf("key state after the streams settled: %+v, %v", s, err)
			}
			t.Logf("%d admitted, %v of them from leases", admitted, leased)
		})
	}
}
