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

// leasedLimit is one case of runLeasedExact: an account's or a key's limit
// that leases slice.
type leasedLimit struct {
	name string
	acct account.Limits
	key  account.Limits
	// project: the key is made in a project with the limits it returns
	// for the hold of one held stream (nil: the default project).
	project func(hold int64) account.Limits
	message string // what every refusal's body names
}

// Concurrency seats: an account (and, apart, a key) with a concurrency
// limit big enough to slice leases seats on two sidecars; exactly the limit
// is admitted (runLeasedExact).
func TestLeasedConcurrencyExactTwoSidecars(t *testing.T) {
	const limit = 40
	runLeasedExact(t, limit, []leasedLimit{
		{name: "account", acct: account.Limits{Concurrency: limit}, message: "concurrent request limit reached for this account"},
		{name: "key", key: account.Limits{Concurrency: limit}, message: "concurrent request limit reached for this key"},
	})
}

// A project's limits, its key leased on two sidecars: a daily budget of
// 40½ holds (leases of at least two holds: the default floor of 16 would
// not slice it), a concurrency limit of 40, a tpm limit of 40½ requests'
// token bounds. Exactly 40 requests are admitted (runLeasedExact), some
// from the leases, and once they have settled and the leases are returned
// the project holds, leases and seats nothing.
func TestProjectsRaceTwoSidecarsLeased(t *testing.T) {
	const limit = 40
	bound := int64(len(messagesBody(true, ""))) + 256 // every body byte a token, plus max_tokens
	runLeasedExact(t, limit, []leasedLimit{
		{name: "budget", project: func(hold int64) account.Limits {
			return account.Limits{DailyNanoUSD: limit*hold + hold/2}
		}, message: "daily spend limit for project"},
		{name: "concurrency", project: func(int64) account.Limits {
			return account.Limits{Concurrency: limit}
		}, message: "concurrent request limit reached for project"},
		{name: "tpm", project: func(int64) account.Limits {
			return account.Limits{TPM: limit*bound + bound/2}
		}, message: "tokens-per-minute limit for project"},
	}, func(c *config.Config) { c.Limits.LeaseMinHolds = 2 })
}

// Tokens per minute: an account (and, apart, a key) with a tpm limit of
// 40½ requests' token bounds leases tokens on two sidecars; exactly 40
// requests are admitted (runLeasedExact), and once they have settled and
// the leases are returned no token is held.
func TestLeasedTokensPerMinuteExactTwoSidecars(t *testing.T) {
	bound := int64(len(messagesBody(true, ""))) + 256 // every body byte a token, plus max_tokens
	const limit = 40
	tpm := limit*bound + bound/2
	runLeasedExact(t, limit, []leasedLimit{
		{name: "account", acct: account.Limits{TPM: tpm}, message: "tokens-per-minute limit for this account"},
		{name: "key", key: account.Limits{TPM: tpm}, message: "tokens-per-minute limit for this key"},
	})
}

// runLeasedExact runs each case on two sidecars with leases on: streams
// are opened and held, one after another on a (which takes a lease), then
// by clients on b until refused while a's lease holds its slice, then on
// both until limit are admitted. Exactly limit are admitted, some of them
// from the leases, the vendors never have more in flight, every refusal is
// the case's 429 (one more request per client once all are admitted
// included); after the streams end no hold is left, the key's state is
// zero, the leases, once returned, hold nothing (money, seats, tokens),
// the account and key count no seat and no held token, and the balance,
// ledger and counters agree.
func runLeasedExact(t *testing.T, limit int64, cases []leasedLimit, configure ...func(*config.Config)) {
	rs := redistest.NewServer(t)
	// Renewals every 5 s: a's lease outlives b's burst (a renewal would
	// resize it to what is left).
	conf := func(c *config.Config) {
		c.Limits.Leases = "on"
		c.Limits.LeaseInterval = config.Duration(5 * time.Second)
		for _, f := range configure {
			f(c)
		}
	}
	a := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf})
	stacks := []*launch.Stack{a, b}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	ctx := context.Background()
	const balance = 100_000_000_000
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			acct, err := a.Store.CreateAccount(ctx, c.name, balance, c.acct)
			if err != nil {
				t.Fatal(err)
			}
			var projectID string
			if c.project != nil {
				hold := priceOf(t, a, "alpha", alphaModel).Hold(int64(len(messagesBody(true, ""))), 256)
				p, err := a.Store.CreateProject(ctx, acct.ID, "limited", c.project(hold))
				if err != nil {
					t.Fatal(err)
				}
				projectID = p.ID
			}
			key, _, err := a.Store.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: "limited", Limits: c.key, ProjectID: projectID})
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
			// the script and takes a lease, the next from it.
			for i := range 6 {
				if !h.send(a) {
					t.Fatalf("request %d on a refused", i)
				}
			}
			if n := sidecarMetric(t, a, "gateway_admissions_total", `path="lease"`) - leasedBefore; n == 0 {
				t.Fatal("a took no lease")
			}
			// 2. Four clients on b until each is refused: what a's lease
			// holds is taken for b (the early refusals leasing costs).
			h.clients([]*launch.Stack{b}, 4, func(refused bool) bool { return !refused })
			// 3. Clients on both until the limit is reached: a's lease is
			// used, or returned to the script at its next renewal.
			deadline := time.Now().Add(20 * time.Second)
			h.clients(stacks, 4, func(bool) bool { return h.admitted.Load() < limit && time.Now().Before(deadline) })
			// 4. All of the limit taken: one more per client, on either
			// sidecar, is refused.
			h.clients(stacks, 4, func(refused bool) bool { return !refused && h.admitted.Load() <= limit })
			admitted := h.admitted.Load()
			peak := peakInFlight(stacks)
			h.close()
			for _, w := range h.wrong {
				t.Errorf("refusal %s; want the limit's 429 naming %q", w, c.message)
			}
			if admitted != limit {
				t.Fatalf("admitted %d; want exactly the limit, %d", admitted, limit)
			}
			if peak != int(limit) {
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
			// Idle leases are returned after two intervals, with what they
			// hold. A lease returned while some of its requests were
			// unrecorded stays, empty, until the sweep.
			eventually.That(t, 20*time.Second, "the leases are returned with what they held", func() (bool, string) {
				leases, err := rdb.HGetAll(ctx, "gw:{acct:"+acct.ID+"}:leases").Result()
				ok := err == nil
				for _, v := range leases {
					// "<amount> <expiry> <kc> <key id> <rl> <lo> <hi> <seats> <sl> <tokens> <tbucket> <tl>",
					// then "<pc> <project id>" for a lease of a project.
					f := strings.Fields(v)
					ok = ok && (len(f) == 12 || len(f) == 14 && f[13] == projectID) && f[0] == "0" && f[7] == "0" && f[9] == "0"
				}
				var left []string
				if projectID != "" {
					v, err := rdb.HGet(ctx, "gw:{acct:"+acct.ID+"}:ps:"+projectID, "leased").Result()
					ok = ok && (v == "" || v == "0") && (err == nil || err == redis.Nil)
					left = append(left, fmt.Sprintf("project: leased %q", v))
				}
				hashes := []string{"acct", "ks:" + kid}
				if projectID != "" {
					hashes = append(hashes, "ps:"+projectID)
				}
				for _, hash := range hashes {
					v, err := rdb.HMGet(ctx, "gw:{acct:"+acct.ID+"}:"+hash, "seats", "tw").Result()
					if err != nil {
						return false, err.Error()
					}
					seats, _ := v[0].(string)
					tw, _ := v[1].(string)
					f := strings.Fields(tw)
					for i := 2; i < len(f); i += 3 {
						ok = ok && f[i] == "0"
					}
					ok = ok && (seats == "" || seats == "0")
					left = append(left, fmt.Sprintf("%s: seats %q, tokens %q", hash, seats, tw))
				}
				return ok, fmt.Sprintf("leases %v (%v); %v", leases, err, left)
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
			if projectID != "" {
				if s, err := a.Store.ProjectStates(ctx, acct.ID, projectID); err != nil || s[0].InFlight != 0 || s[0].Held != 0 || s[0].Day.Requests != limit {
					t.Fatalf("project state after the streams settled: %+v, %v", s, err)
				}
			}
			t.Logf("%d admitted, %v of them from leases", admitted, leased)
		})
	}
}
