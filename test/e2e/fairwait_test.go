package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// redisCommands is the number of commands Redis has run (INFO
// commandstats, those run by scripts included) and how many of them were
// script calls (EVALSHA, EVAL).
func redisCommands(t *testing.T, s *launch.Stack) (all, scripts int64) {
	t.Helper()
	info, err := s.RDB.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		all += n
		if name == "cmdstat_evalsha" || name == "cmdstat_eval" {
			scripts += n
		}
	}
	return all, scripts
}

// One key that parks 600 requests in the concurrency waiting room takes
// at most its share of the room (the rest get 429 at once), another key's
// waiter still waits and is admitted when its slot frees, and the waiting
// costs Redis a bounded rate, not one poll per waiter.
func TestFairWaitingRoom(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	ctx := context.Background()
	newKey := func() (secret string) {
		a := s.NewAccount(1000, account.Limits{})
		secret, _, err := s.Store.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{Label: "waits",
			Limits: account.Limits{Concurrency: 1, ConcurrencyWaitSeconds: 60}})
		if err != nil {
			t.Fatal(err)
		}
		return secret
	}
	waits := func(outcome string) float64 {
		return metricValue(t, s, `gateway_concurrency_waits_total{outcome="`+outcome+`"}`)
	}
	hog, other := newKey(), newKey()
	releaseHog := heldStream(t, s, hog)
	defer releaseHog()

	// 600 requests of the hog, each on its own connection, with small
	// bodies; cancelled at the end.
	const parked = 600
	hctx, cancelHog := context.WithCancel(ctx)
	defer cancelHog()
	tr := &http.Transport{MaxIdleConnsPerHost: -1, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	answered := func() (n int, byStatus string) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range statuses {
			n += c
		}
		return n, fmt.Sprint(statuses)
	}
	full0 := waits("full")
	// In batches of 100, as clients connect over a few seconds: 600
	// admissions at the same instant would time out on 2 shared cores.
	const batch = 100
	for sent := batch; sent <= parked; sent += batch {
		for range batch {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(hctx, "POST", s.URL+alphaPath, bytes.NewReader(messagesBody(false, "")))
				for k, v := range messagesHeaders(hog) {
					req.Header.Set(k, v)
				}
				status := 0 // cancelled while waiting
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				statuses[status]++
				mu.Unlock()
			}()
		}
		eventually.That(t, 30*time.Second, "the hog's requests are all answered or waiting", func() (bool, string) {
			w := metricValue(t, s, "gateway_concurrency_waiters")
			n, by := answered()
			return int(w)+n == sent, fmt.Sprint(w, " waiting, answered ", by)
		})
	}
	waiting := metricValue(t, s, "gateway_concurrency_waiters")
	// Redis's load while they wait: a measurement over wall-clock time,
	// not a synchronisation.
	measure := func() (perSec, scriptsPerSec float64) {
		const span = 3 * time.Second
		all0, scripts0 := redisCommands(t, s)
		start := time.Now()
		time.Sleep(span)
		all1, scripts1 := redisCommands(t, s)
		secs := time.Since(start).Seconds()
		return float64(all1-all0) / secs, float64(scripts1-scripts0) / secs
	}
	perSec, scriptsPerSec := measure()
	t.Logf("while %v requests of one key wait: %.0f Redis commands/s, %.0f script calls/s", waiting, perSec, scriptsPerSec)
	// The default share: 10 % of the room's 500; the others are refused
	// at once.
	if full := waits("full") - full0; full != parked-50 {
		t.Errorf("%v waits refused at once, want %d", full, parked-50)
	}
	if n, by := answered(); waiting != 50 || n != parked-50 || !strings.Contains(by, fmt.Sprintf("429:%d", parked-50)) {
		t.Fatalf("%v of the hog's requests wait, answered %s; want its share of 50 waiting, %d refused", waiting, by, parked-50)
	}

	// Another key's request still waits for its own slot.
	releaseOther := heldStream(t, s, other)
	second := send(s, other)
	eventually.That(t, 10*time.Second, "the other key's request waits", func() (bool, string) {
		n := metricValue(t, s, "gateway_concurrency_waiters")
		return n == waiting+1, fmt.Sprint(n, " waiting")
	})

	perSec, scriptsPerSec = measure()
	t.Logf("while %v requests of two keys wait: %.0f Redis commands/s, %.0f script calls/s", waiting+1, perSec, scriptsPerSec)
	select {
	case a := <-second:
		t.Fatalf("the other key's request was answered before its slot freed: %d %s", a.status, a.body)
	default:
	}
	// Two keys wait: about 16 attempts a second each, a few commands each.
	if scriptsPerSec > 100 || perSec > 1000 {
		t.Fatalf("waiting costs %.0f commands/s (%.0f script calls/s); want a bound independent of the waiters", perSec, scriptsPerSec)
	}

	releaseOther()
	select {
	case a := <-second:
		if a.status != 200 {
			t.Fatalf("the other key's request, once its slot freed: %d %s", a.status, a.body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other key's request was not admitted within 10 s of its slot freeing")
	}
	cancelHog()
	wg.Wait()
	eventually.That(t, 10*time.Second, "the room empties", func() (bool, string) {
		n := metricValue(t, s, "gateway_concurrency_waiters")
		return n == 0, fmt.Sprint(n, " waiting")
	})
}
