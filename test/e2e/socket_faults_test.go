package e2e

import (
	"context"
	"encoding/json"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// send writes a response.create and reads its first event.
func (w *wsConn) startResponse(body string) wsEvent {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create",`+body[1:])); err != nil {
		w.t.Fatal(err)
	}
	_, data, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("first event: %v", err)
	}
	var ev wsEvent
	mustJSON(w.t, data, &ev)
	ev.raw = data
	return ev
}

// rest reads until the socket ends; it returns the events and the close
// code.
func (w *wsConn) rest() ([]wsEvent, websocket.StatusCode) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var evs []wsEvent
	for {
		_, data, err := w.c.Read(ctx)
		if err != nil {
			return evs, websocket.CloseStatus(err)
		}
		var ev wsEvent
		json.Unmarshal(data, &ev)
		ev.raw = data
		evs = append(evs, ev)
	}
}

const slowSocket = `{"model":"gpt-6-sol","input":"Tell me a long story."}`

// The primary killed while a response runs on a socket: the response is
// ended for the client (an error event, then close 1011) and settled once,
// cut short: estimated from what was seen. A new socket reaches the
// reserve.
func TestSocketPrimaryKilledMidResponse(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 100, "reply_words": 60})
	w := mustDialSocket(t, s, acct.Key, nil)
	if ev := w.startResponse(slowSocket); ev.Type != "response.created" {
		t.Fatalf("first event %s", ev.raw)
	}
	s.Primary.Process.Signal(syscall.SIGKILL)
	evs, code := w.rest()
	if code != websocket.StatusInternalError || len(evs) == 0 || evs[len(evs)-1].Type != "error" || evs[len(evs)-1].Status != 503 {
		t.Fatalf("after the primary died: close %d, events %d, last %s", code, len(evs), lastRaw(evs))
	}
	e := waitLedgerEntry(t, s, acct.ID)
	if e.Status != 200 || !e.Estimated || e.Cost == 0 || e.Transport != "websocket" || e.Endpoint != "primary" {
		t.Fatalf("cut-short response: %+v", e.Settlement)
	}
	// A new socket: Envoy sends it to the reserve once the primary is known
	// dead; until then the gateway answers 503, which clients retry.
	var r *wsConn
	eventually.True(t, 30*time.Second, "a socket to the reserve", func() bool {
		c, _, err := dialSocket(t, s, acct.Key, nil)
		r = c
		return err == nil
	})
	socketBilled(t, r.create(`{"model":"gpt-6-sol","input":"Again."}`))
	eventually.True(t, 10*time.Second, "the second ledger entry", func() bool { return len(allLedgerEntries(t, s, acct.ID)) == 2 })
	entries := allLedgerEntries(t, s, acct.ID)
	if n := entries[1]; n.Endpoint != "reserve" || n.Estimated || n.Status != 200 {
		t.Fatalf("response on the new socket: %+v", n.Settlement)
	}
}

// Redis stopped while a response runs on a socket: the response completes,
// its settlement is spooled and replayed once Redis returns (one ledger
// entry, exact); a response.create while Redis is down is refused (503)
// and the socket serves the next once it is back.
func TestSocketRedisOutageMidResponse(t *testing.T) {
	rs := redistest.NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	s := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr})
	const initial = 10_000_000_000
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 50, "reply_words": 20})
	w := mustDialSocket(t, s, acct.Key, nil)
	if ev := w.startResponse(slowSocket); ev.Type != "response.created" {
		t.Fatalf("first event %s", ev.raw)
	}
	rs.Stop()
	restarted := false
	defer func() {
		if !restarted {
			rs.Start()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, data, err := w.c.Read(ctx)
		if err != nil {
			t.Fatalf("the response broke with Redis down: %v", err)
		}
		var ev wsEvent
		mustJSON(t, data, &ev)
		if ev.Type == "response.completed" {
			break
		}
		if ev.Type == "error" {
			t.Fatalf("error event: %s", data)
		}
	}
	eventually.True(t, 20*time.Second, "the settlement to be spooled", func() bool {
		return sidecarMetric(t, s, "gateway_spool_depth") == 1
	})
	// A new response cannot be admitted without the store (once the key
	// cache's entry is gone, the key lookup fails first).
	evs := w.create(`{"model":"gpt-6-sol","input":"Now?"}`)
	if e := evs[0]; len(evs) != 1 || e.Type != "error" || e.Status != 503 {
		t.Fatalf("with Redis down: %s", e.raw)
	}
	rs.Start()
	restarted = true
	eventually.True(t, 30*time.Second, "the spool to be replayed", func() bool {
		return sidecarMetric(t, s, "gateway_spool_depth") == 0
	})
	socketBilled(t, w.create(`{"model":"gpt-6-sol","input":"Now."}`))
	entries := checkBooks(t, s, acct.ID, initial, map[string]bool{})
	if len(entries) != 2 {
		t.Fatalf("%d ledger entries, want 2", len(entries))
	}
	for _, e := range entries {
		if e.Status != 200 || e.Estimated || e.Cost == 0 || e.Transport != "websocket" {
			t.Errorf("entry %+v", e.Settlement)
		}
	}
}

// The sidecar SIGKILLed while a response runs on a socket: the client's
// socket ends, and the restarted sidecar's sweeper settles the response
// once, at its last checkpoint, flagged interrupted.
func TestSocketSidecarKilledMidResponse(t *testing.T) {
	const lease = time.Second
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.HoldLease = config.Duration(lease)
	}})
	const initial = 10_000_000_000
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 150, "reply_words": 40})
	w := mustDialSocket(t, s, acct.Key, nil)
	if ev := w.startResponse(slowSocket); ev.Type != "response.created" {
		t.Fatalf("first event %s", ev.raw)
	}
	ctx := context.Background()
	eventually.True(t, 20*time.Second, "a checkpoint with output", func() bool {
		cs, err := s.Store.Checkpoints(ctx, acct.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Usage.Output > 0 {
				return true
			}
		}
		return false
	})
	s.Sidecar.Signal(syscall.SIGKILL)
	if !s.Sidecar.Wait(10 * time.Second) {
		t.Fatal("sidecar survived SIGKILL")
	}
	if _, code := w.rest(); code == websocket.StatusNormalClosure {
		t.Errorf("the socket closed normally although its sidecar died")
	}
	if err := s.StartSidecar(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the killed response to be swept", func() bool {
		n, _, _ := s.Store.OpenHolds(ctx, acct.ID)
		return n == 0
	})
	entries := checkBooks(t, s, acct.ID, initial, map[string]bool{})
	if len(entries) != 1 || !entries[0].Interrupted || entries[0].Cost == 0 || entries[0].Transport != "websocket" {
		t.Fatalf("ledger %+v; want one interrupted entry charged at its checkpoint", entries)
	}
	// The new sidecar serves sockets.
	socketBilled(t, mustDialSocket(t, s, acct.Key, nil).create(`{"model":"gpt-6-sol","input":"Back?"}`))
}

func lastRaw(evs []wsEvent) string {
	if len(evs) == 0 {
		return "(none)"
	}
	return string(evs[len(evs)-1].raw)
}
