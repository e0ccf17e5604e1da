package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// heldStream starts a streaming request that the fake vendor holds open
// after its first event, and returns once that event has reached the
// client: the request is then in flight, holding its slot. release cuts it
// (the client leaves), which frees the slot once the sidecar settles it.
func heldStream(t *testing.T, s *launch.Stack, key string) (release func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+alphaPath, bytes.NewReader(messagesBody(true, "")))
	for k, v := range messagesHeaders(key) {
		req.Header.Set(k, v)
	}
	req.Header.Set("x-fake-controls", `{"event_delay_ms":600000}`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		cancel()
		t.Fatalf("held stream: %d %s", resp.StatusCode, b)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		cancel()
		t.Fatal(err)
	}
	return func() {
		cancel()
		resp.Body.Close()
	}
}

type answer struct {
	status     int
	retryAfter string
	body       string
}

// send posts a plain (not streamed) request in the background; its answer
// arrives on the channel.
func send(s *launch.Stack, key string) <-chan answer {
	c := make(chan answer, 1)
	go func() {
		resp, b := s.Do("POST", alphaPath, messagesHeaders(key), messagesBody(false, ""))
		c <- answer{resp.StatusCode, resp.Header.Get("retry-after"), string(b)}
	}()
	return c
}

// rateCount is how many admissions the key's request-rate window holds.
func rateCount(t *testing.T, s *launch.Stack, accountID, keyID string) int64 {
	t.Helper()
	n, err := s.RDB.ZCard(context.Background(), "gw:{acct:"+accountID+"}:krl:"+keyID).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A key may let its requests over the concurrency limit wait for a slot
// instead of 429 at once: set with gatewayctl (listed, audited), a waiting
// request is forwarded only once the request holding the slot has ended,
// so the vendor never sees two at once; one whose wait passes gets the
// usual 429 and was never forwarded, charged or counted against the rate
// limit; a key without a wait is refused at once as before.
func TestConcurrencyWait(t *testing.T) {
	s := launchtest.Start(t, launch.Options{SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken}})
	ctl := adminCtl(t, s, "GATEWAY_ADMIN_ACTOR=ops-bob")
	ctx := context.Background()
	const balance = 100_000_000_000
	acct, err := s.Store.CreateAccount(ctx, "waits", balance, noLimits)
	if err != nil {
		t.Fatal(err)
	}
	// Keys limited to one request in flight, with a request rate limit so
	// that what counts against it shows.
	newKey := func(label string, waitSeconds string) (secret, id string) {
		secret, k, err := s.Store.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: label,
			Limits: account.Limits{Concurrency: 1, RPM: 100, WindowMinutes: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if waitSeconds != "" {
			r := ctl.json("keys", "limits", acct.ID, k.ID, "--concurrency-wait", waitSeconds)
			if got := field(t, r, "key.limits.concurrency_wait_seconds"); got != waitSeconds {
				t.Fatalf("concurrency_wait_seconds %s, want %s", got, waitSeconds)
			}
		}
		return secret, k.ID
	}
	waits := func(outcome string) float64 {
		return metricValue(t, s, `gateway_concurrency_waits_total{outcome="`+outcome+`"}`)
	}
	vendorSaw := func() int { return s.Primary.Stats()["messages"] }

	// The limit is listed, audited and bounded.
	waiting, waitingID := newKey("queues", "20")
	if out := ctl.ok("keys", "limits", acct.ID, waitingID); !strings.Contains(out, "concurrency wait (s)") || !strings.Contains(out, "20") {
		t.Fatalf("listing without the wait:\n%s", out)
	}
	if _, errOut, err := ctl.run("keys", "limits", acct.ID, waitingID, "--concurrency-wait", "61"); err == nil || !strings.Contains(errOut, "at most 60") {
		t.Fatalf("a wait of 61 s: %v %s", err, errOut)
	}
	audited := false
	for _, e := range ctl.json("audit")["entries"].([]any) {
		m := e.(map[string]any)
		if m["action"] == "key.limits" && m["key_id"] == waitingID && m["actor"] == "ops-bob" && strings.Contains(m["detail"].(string), "concurrency_wait_seconds=20") {
			audited = true
		}
	}
	if !audited {
		t.Fatal("no audit entry of the concurrency wait")
	}

	t.Run("admitted when the slot frees", func(t *testing.T) {
		s.Primary.Reset()
		admitted := waits("admitted")
		release := heldStream(t, s, waiting)
		second := send(s, waiting)
		eventually.That(t, 10*time.Second, "the second request waits", func() (bool, string) {
			n := metricValue(t, s, "gateway_concurrency_waiters")
			return n == 1, fmt.Sprint(n, " waiting")
		})
		select {
		case a := <-second:
			t.Fatalf("the waiting request was answered before the slot freed: %d %s", a.status, a.body)
		default:
		}
		if n := vendorSaw(); n != 1 {
			t.Fatalf("the vendor saw %d requests while the second waited, want 1", n)
		}
		release()
		a := <-second
		if a.status != 200 {
			t.Fatalf("after the slot freed: %d %s", a.status, a.body)
		}
		if peak := s.Primary.Stats()["messages_peak_in_flight"]; peak != 1 || vendorSaw() != 2 {
			t.Fatalf("the vendor had %d in flight at once of %d requests; want 1 of 2", peak, vendorSaw())
		}
		if got := waits("admitted") - admitted; got != 1 {
			t.Fatalf("admitted waits rose by %v, want 1", got)
		}
		// Each request counts once against the rate limit, however often
		// the waiting one asked for admission.
		if n := rateCount(t, s, acct.ID, waitingID); n != 2 {
			t.Fatalf("the rate window holds %d admissions, want 2", n)
		}
	})

	t.Run("no wait: refused at once", func(t *testing.T) {
		s.Primary.Reset()
		before := waits("admitted") + waits("timeout") + waits("cancelled") + waits("refused") + waits("full")
		key, id := newKey("refuses", "")
		release := heldStream(t, s, key)
		a := <-send(s, key)
		release()
		if a.status != 429 || a.retryAfter != "1" || !strings.Contains(a.body, "concurrent request limit reached for this key") {
			t.Fatalf("over the limit without a wait: %d retry-after %q %s", a.status, a.retryAfter, a.body)
		}
		if after := waits("admitted") + waits("timeout") + waits("cancelled") + waits("refused") + waits("full"); after != before {
			t.Fatalf("a request whose key has no wait waited")
		}
		if n := rateCount(t, s, acct.ID, id); n != 1 || vendorSaw() != 1 {
			t.Fatalf("rate window %d, vendor saw %d; want 1 and 1", n, vendorSaw())
		}
	})

	t.Run("the account's limit", func(t *testing.T) {
		// The key's wait covers a refusal by its account's concurrency
		// limit too: another key of the account holds the slot.
		s.Primary.Reset()
		busy := s.NewAccount(100, account.Limits{Concurrency: 1})
		k, _, err := s.Store.CreateKey(ctx, busy.ID, account.ModelKey, account.KeyOptions{Label: "queues",
			Limits: account.Limits{ConcurrencyWaitSeconds: 20}})
		if err != nil {
			t.Fatal(err)
		}
		admitted := waits("admitted")
		release := heldStream(t, s, busy.Key)
		second := send(s, k)
		eventually.That(t, 10*time.Second, "the second request waits", func() (bool, string) {
			n := metricValue(t, s, "gateway_concurrency_waiters")
			return n == 1, fmt.Sprint(n, " waiting")
		})
		if n := vendorSaw(); n != 1 {
			t.Fatalf("the vendor saw %d requests while the second waited, want 1", n)
		}
		release()
		if a := <-second; a.status != 200 {
			t.Fatalf("after the account's slot freed: %d %s", a.status, a.body)
		}
		if peak := s.Primary.Stats()["messages_peak_in_flight"]; peak != 1 || waits("admitted")-admitted != 1 {
			t.Fatalf("peak in flight %d, admitted waits +%v; want 1 and 1", peak, waits("admitted")-admitted)
		}
	})

	t.Run("the wait passes", func(t *testing.T) {
		s.Primary.Reset()
		// Longer than Envoy's message timeout (5 s): the sidecar extends it,
		// or Envoy would answer 503 first.
		key, id := newKey("gives up", "6")
		timeouts := waits("timeout")
		release := heldStream(t, s, key)
		a := <-send(s, key)
		if a.status != 429 || a.retryAfter != "1" || !strings.Contains(a.body, "concurrent request limit reached for this key") ||
			!strings.Contains(a.body, "rate_limit_error") {
			t.Fatalf("after the wait: %d retry-after %q %s", a.status, a.retryAfter, a.body)
		}
		if got := waits("timeout") - timeouts; got != 1 {
			t.Fatalf("timed-out waits rose by %v, want 1", got)
		}
		if n := vendorSaw(); n != 1 {
			t.Fatalf("the vendor saw %d requests, want 1: the refused one was forwarded", n)
		}
		if n := rateCount(t, s, acct.ID, id); n != 1 {
			t.Fatalf("the rate window holds %d admissions, want 1", n)
		}
		release()
		eventually.That(t, 15*time.Second, "the held stream settles", func() (bool, string) {
			n, held, err := s.Store.Store.OpenHolds(ctx, acct.ID)
			return err == nil && n == 0, fmt.Sprint(n, " holds of ", held, " ", err)
		})
		s.WaitSettled()
		// One ledger entry per request forwarded: 2 + 1 + 1.
		entries, _, err := s.Store.Ledger(ctx, acct.ID, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 4 {
			t.Fatalf("%d ledger entries, want 4 (the refused requests have none)", len(entries))
		}
		conserved(t, s.Store.Store, acct.ID, balance)
	})
}
