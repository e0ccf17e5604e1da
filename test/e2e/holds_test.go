package e2e

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
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

// holdShape is one kind of request of the holds conservation run.
type holdShape int

const (
	shapePlain      holdShape = iota
	shapeN                    // beta with n=3: every choice billed
	shapeTools                // a small request offering a tool; the vendor adds its tool prompt
	shapeLong                 // a stream longer than the hold lease and max_request_duration
	shapeResetStart           // the vendor resets before the first event
	shapeResetMid             // the vendor resets after three events
	shapeCut                  // the client goes away mid-stream
)

var shapeNames = []string{"plain", "n=3", "tools", "long", "reset-at-start", "reset-mid-stream", "client-cut"}

// holdStep is one planned request.
type holdStep struct {
	account int
	route   string
	stream  bool
	shape   holdShape
	cut     int
}

// holdResult is what the client saw of one request, and when.
type holdResult struct {
	clientReply
	start, end time.Time
}

const (
	holdLease  = time.Second
	toolPrompt = 400 // tokens the fake vendor adds to requests offering tools
)

// Money is conserved through every way a prepaid request can end: n > 1,
// tool prompts added by the vendor, streams longer than the hold lease and
// max_request_duration, vendor resets before the first event and mid-stream,
// client disconnects, a SIGKILL and a SIGTERM of the sidecar mid-load and a
// Redis restart.
// For every account: balance change = ledger = counters, no hold is left,
// every request the vendor served has one ledger entry (the sidecar's
// crash aside, exactly one), every 5xx the client saw outside the crash is
// recorded with its status, and no balance is negative (the accounts here
// are funded well above what n and tool prompts can add to a hold).
func TestConservationHolds(t *testing.T) {
	seed := uint64(conservationSeed)
	if v := getenvUint("GATEWAY_CONSERVATION_SEED"); v != 0 {
		seed = v
	}
	t.Logf("seed %d", seed)
	rs := redistest.NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	s := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: func(c *config.Config) {
		c.Limits.HoldLease = config.Duration(holdLease)
		c.Limits.MaxRequestDuration = config.Duration(2 * time.Second)
	}})
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"event_delay_ms": 4, "reply_words": 20, "tool_prompt_tokens": toolPrompt})
	}
	const initial = 20_000_000_000
	accounts := []launch.Account{
		s.NewAccount(20, noLimits), s.NewAccount(20, noLimits), s.NewAccount(20, noLimits),
	}
	plan := holdPlan(seed, 240, len(accounts))

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	results := make([]holdResult, len(plan))
	var (
		wg        sync.WaitGroup
		done      atomic.Int64
		killFrom  time.Time // the sidecar's crash window, for the 5xx check
		killTo    time.Time
		termFrom  time.Time // the sidecar's drain and restart window
		termTo    time.Time
		redisFrom time.Time // the Redis restart
		redisTo   time.Time
		// pause holds back new requests while the sidecar is down, so that
		// the plan is not spent on refusals; requests in flight go on.
		pause sync.Mutex
	)
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				p := plan[i]
				path, h, body := holdRequest(p, accounts[p.account].Key, i)
				r := holdResult{start: time.Now()}
				r.clientReply = postAndRead(client, s.URL+path, h, body, p.cut, nil)
				r.end = time.Now()
				results[i] = r
				done.Add(1)
			}
		})
	}
	// Faults while the load runs: a SIGKILL of the sidecar a third of the
	// way, a Redis restart two thirds of the way.
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		waitCount(&done, int64(len(plan)/3))
		// Let some requests in flight be checkpointed, then kill (a bounded
		// wait: the run's checks say whether the crash interrupted any).
		for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(25 * time.Millisecond) {
			if holdsCheckpointed(s, accounts) {
				break
			}
		}
		pause.Lock()
		killFrom = time.Now()
		s.Sidecar.Signal(syscall.SIGKILL)
		s.Sidecar.Wait(10 * time.Second)
		s.StartSidecar()
		killTo = time.Now()
		pause.Unlock()
		// A SIGTERM half way: the sidecar drains its streams and exits;
		// a new one starts.
		waitCount(&done, int64(len(plan)/2))
		pause.Lock()
		termFrom = time.Now()
		s.Sidecar.Signal(syscall.SIGTERM)
		s.Sidecar.Wait(90 * time.Second)
		s.StartSidecar()
		termTo = time.Now()
		pause.Unlock()
		waitCount(&done, int64(2*len(plan)/3))
		redisFrom = time.Now()
		rs.Restart()
		redisTo = time.Now()
	}()
	for i := range plan {
		pause.Lock()
		work <- i
		pause.Unlock()
	}
	close(work)
	wg.Wait()
	<-faults

	// Which test requests did a vendor serve?
	served := map[int]bool{}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, rec := range f.Requests() {
			if ids := rec.Headers["X-Test-Id"]; len(ids) == 1 {
				n, _ := strconv.Atoi(ids[0])
				served[n] = true
			}
		}
	}
	crashed := func(r holdResult) bool {
		return r.end.After(killFrom) && r.start.Before(killTo.Add(holdLease)) ||
			r.end.After(termFrom) && r.start.Before(termTo)
	}
	seen := map[string]bool{}
	shapes := map[string]int{}
	statuses := map[int]int{}
	var interrupted, resets502, longExact, longDone int
	for a, acct := range accounts {
		eventually.True(t, 30*time.Second, "holds of "+acct.ID+" to be settled (the sweeper settles the crashed ones)", func() bool {
			n, _, err := s.Store.OpenHolds(context.Background(), acct.ID)
			return err == nil && n == 0
		})
		entries := checkBooks(t, s, acct.ID, initial, seen)
		var nServed, n499, nUnserved5xx int
		clientSaw := map[int]int{}
		for i, p := range plan {
			if p.account != a {
				continue
			}
			r := results[i]
			shapes[shapeNames[p.shape]]++
			statuses[r.status]++
			if p.shape == shapeLong && r.status == 200 && r.complete && !crashed(r) {
				longDone++
			}
			if served[i] {
				nServed++
				if r.status >= 500 && !crashed(r) {
					clientSaw[r.status]++
				}
			} else if r.status >= 500 && r.header.Get("x-gateway-endpoint") == "none" {
				// Answered by Envoy itself, no endpoint tried: both
				// ejected (three resets in a row eject one) or failing
				// their probes on a loaded machine, or the sidecar down.
				// One admitted has an entry recording the failure, at no
				// cost.
				nUnserved5xx++
			}
		}
		recorded := map[int]int{}
		for _, e := range entries {
			// Only a request admitted before a sidecar stopped may end
			// interrupted (a SIGTERM's drain may cut a stream whose
			// settlement then cannot be made: the sweeper charges it), or
			// one in flight across the Redis restart, whose renewals fail
			// while Redis is down: an outage that outlasts the lease lets
			// the sweeper charge it at its checkpoint (a documented limit).
			acrossRedis := e.StartedAt.Before(redisTo) && e.EndedAt.After(redisFrom)
			if e.Interrupted && !e.StartedAt.Before(termTo) && !acrossRedis {
				t.Errorf("%s: request %s admitted after the last restart was settled as interrupted: its hold was not renewed", acct.ID, e.RequestID)
			}
			if !e.Interrupted && !e.Estimated && e.Status == 200 && e.Usage.Output == 30 {
				longExact++ // a long stream, settled by its own sidecar
			}
			if e.Interrupted {
				interrupted++
				if e.Status == 499 {
					n499++
				}
				continue
			}
			if e.Status >= 500 {
				recorded[e.Status]++
				if e.Cost != 0 {
					t.Errorf("%s: a %d reply charged %d", acct.ID, e.Status, e.Cost)
				}
			}
			if e.Status == 502 {
				resets502++
			}
		}
		// Every served request has an entry; only requests admitted just
		// before the crash, never forwarded, may add an interrupted one,
		// and requests the client saw fail before any vendor served them
		// an uncharged one (the check above: a 5xx entry costs nothing).
		if len(entries) < nServed || len(entries) > nServed+n499+nUnserved5xx {
			t.Errorf("%s: %d ledger entries for %d requests the vendor served (%d interrupted before an answer, %d failed before a vendor)",
				acct.ID, len(entries), nServed, n499, nUnserved5xx)
		}
		for status, n := range clientSaw {
			if recorded[status] < n {
				t.Errorf("%s: clients saw %d × %d, the ledger records %d", acct.ID, n, status, recorded[status])
			}
		}
		t.Logf("account %d: %d ledger entries, %d served by the vendor, %d failed before a vendor; 5xx seen %v, recorded %v", a, len(entries), nServed, nUnserved5xx, clientSaw, recorded)
	}
	// Streams three times longer than the hold lease kept their hold: each
	// that completed is settled exactly by its own sidecar.
	if longExact < longDone {
		t.Errorf("%d long streams completed but %d were settled exactly", longDone, longExact)
	}
	if interrupted == 0 {
		t.Errorf("the SIGKILL interrupted no request: the crash path was not exercised")
	}
	t.Logf("%d requests; shapes %v; statuses %v; %d settled as interrupted; %d recorded as 502; %d long streams (%v each) completed, settled exactly",
		len(plan), shapes, statuses, interrupted, resets502, longDone, 30*100*time.Millisecond)
}

// holdPlan draws n requests over the accounts and shapes.
func holdPlan(seed uint64, n, accounts int) []holdStep {
	rng := rand.New(rand.NewPCG(seed, seed+15))
	plan := make([]holdStep, n)
	for i := range plan {
		p := &plan[i]
		p.account = rng.IntN(accounts)
		p.route = []string{"alpha", "beta"}[rng.IntN(2)]
		p.stream = rng.IntN(2) == 0
		p.shape = holdShape(rng.IntN(len(shapeNames)))
		switch p.shape {
		case shapeN:
			p.route = "beta"
		case shapeLong, shapeResetMid, shapeCut:
			p.stream = true
		}
		if p.shape == shapeCut {
			p.cut = 200 + rng.IntN(400)
		}
	}
	return plan
}

// holdRequest builds request i of the plan; x-test-id lets the vendor's
// records name it, x-fake-controls steers the fake for it alone.
func holdRequest(p holdStep, key string, i int) (string, map[string]string, []byte) {
	extra, ctl := "", map[string]any{}
	switch p.shape {
	case shapeN:
		extra = `,"n":3`
	case shapeTools:
		if p.route == "alpha" {
			extra = `,"tools":[{"name":"f","input_schema":{"type":"object"}}]`
		} else {
			extra = `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`
		}
	case shapeLong:
		ctl["event_delay_ms"], ctl["reply_words"] = 100, 30
	case shapeResetStart:
		ctl["abort_at_start"] = true
	case shapeResetMid:
		ctl["abort_after_events"] = 3
	case shapeCut:
		ctl["event_delay_ms"] = 20
	}
	var path string
	var h map[string]string
	var body []byte
	if p.route == "alpha" {
		path, h, body = alphaPath, messagesHeaders(key), messagesBody(p.stream, extra)
	} else {
		path, h, body = betaPath, chatCompletionsHeaders(key), chatCompletionsBody(p.stream, true, extra)
	}
	h["x-test-id"] = strconv.Itoa(i)
	if len(ctl) > 0 {
		b, _ := json.Marshal(ctl)
		h["x-fake-controls"] = string(b)
	}
	return path, h, body
}

// waitCount waits until the counter reaches n.
func waitCount(c *atomic.Int64, n int64) {
	for c.Load() < n {
		time.Sleep(10 * time.Millisecond) // polling interval
	}
}

func getenvUint(name string) uint64 {
	n, _ := strconv.ParseUint(strings.TrimSpace(os.Getenv(name)), 10, 64)
	return n
}

// holdsCheckpointed reports whether a running request of the accounts has
// written a checkpoint with output.
func holdsCheckpointed(s *launch.Stack, accounts []launch.Account) bool {
	for _, a := range accounts {
		cs, _ := s.Store.Checkpoints(context.Background(), a.ID)
		for _, c := range cs {
			if c.Usage.Output > 0 {
				return true
			}
		}
	}
	return false
}
