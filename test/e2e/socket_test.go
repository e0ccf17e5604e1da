package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The Responses API's WebSocket transport through Envoy: the upgrade of
// GET /beta/v1/responses, one response.create after another.

// wsConn is a client socket to the gateway.
type wsConn struct {
	t *testing.T
	c *websocket.Conn
}

// dialSocket opens a socket with key and extra headers.
func dialSocket(t *testing.T, s *launch.Stack, key string, extra map[string]string) (*wsConn, *http.Response, error) {
	t.Helper()
	h := http.Header{"Authorization": {"Bearer " + key}, "OpenAI-Beta": {"responses_websockets=2026-02-06"}}
	for k, v := range extra {
		h.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(s.URL, "http")+responsesPath, &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return &wsConn{t: t, c: c}, resp, nil
}

func mustDialSocket(t *testing.T, s *launch.Stack, key string, extra map[string]string) *wsConn {
	t.Helper()
	c, resp, err := dialSocket(t, s, key, extra)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("socket: %d %v", status, err)
	}
	return c
}

// wsEvent is one server message.
type wsEvent struct {
	Type     string          `json:"type"`
	Status   int             `json:"status"`
	Response json.RawMessage `json:"response"`
	Error    struct {
		Type, Code, Message string
	} `json:"error"`
	raw []byte
}

// create sends a response.create with body's fields and reads the events
// up to the terminal one (or an error event).
func (w *wsConn) create(body string) []wsEvent {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	msg := `{"type":"response.create",` + strings.TrimPrefix(body, "{")
	if err := w.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		w.t.Fatalf("write: %v", err)
	}
	var evs []wsEvent
	for {
		_, data, err := w.c.Read(ctx)
		if err != nil {
			w.t.Fatalf("read after %d events: %v", len(evs), err)
		}
		var ev wsEvent
		mustJSON(w.t, data, &ev)
		ev.raw = data
		evs = append(evs, ev)
		switch ev.Type {
		case "response.completed", "response.incomplete", "response.failed", "error":
			return evs
		}
	}
}

// last returns the terminal event's usage, as billed, and the response id.
func socketBilled(t *testing.T, evs []wsEvent) (billed, string) {
	t.Helper()
	ev := evs[len(evs)-1]
	if ev.Type != "response.completed" {
		t.Fatalf("terminal event %s: %s", ev.Type, ev.raw)
	}
	b, _, id := responsesBilled(t, ev.Response, false)
	return b, id
}

// Many responses on one socket, each admitted, metered from its events and
// billed to the nano-USD from the catalogue, the ledger naming the
// transport; a refused response (an unknown model) answered with the
// vendor's error event and the socket serving the next; a continuation of
// a store:false response kept only by the socket.
func TestSocketResponsesBilled(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, noLimits)
	const model = "gpt-6-sol"
	served := servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses")
	entry := served[model]
	if entry == nil {
		t.Fatalf("%s is not served on responses", model)
	}
	s.Primary.Control(map[string]any{"cache_read_tokens": 12, "reasoning_tokens": 7})
	w := mustDialSocket(t, s, acct.Key, nil)

	var want []int64
	evs := w.create(fmt.Sprintf(`{"model":%q,"instructions":"Be brief.","input":"What does it cost?"}`, model))
	if evs[0].Type != "response.created" {
		t.Fatalf("first event %s", evs[0].raw)
	}
	u, first := socketBilled(t, evs)
	want = append(want, expectedNano(t, entry, u))

	// Refused before the vendor hears of it; the socket stays open.
	before := clientRequests(s)
	evs = w.create(`{"model":"no-such-model","input":"hi"}`)
	if e := evs[0]; len(evs) != 1 || e.Type != "error" || e.Status != 400 || e.Error.Code != "model_not_found" {
		t.Fatalf("unknown model: %s", evs[0].raw)
	}
	if after := clientRequests(s); after != before {
		t.Errorf("the vendor heard of a refused response")
	}

	// store:false, then its continuation on the same socket.
	evs = w.create(fmt.Sprintf(`{"model":%q,"store":false,"input":"Again.","previous_response_id":%q}`, model, first))
	u, second := socketBilled(t, evs)
	want = append(want, expectedNano(t, entry, u))
	evs = w.create(fmt.Sprintf(`{"model":%q,"store":false,"input":"Once more.","previous_response_id":%q}`, model, second))
	u, _ = socketBilled(t, evs)
	want = append(want, expectedNano(t, entry, u))
	w.c.Close(websocket.StatusNormalClosure, "")

	s.WaitSettled()
	entries, _, err := s.Store.Ledger(context.Background(), acct.ID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Fatalf("%d ledger entries, want %d", len(entries), len(want))
	}
	for i, e := range entries {
		if e.Cost != want[i] || e.Estimated || e.Status != 200 || !e.Stream || e.Transport != "websocket" || e.Endpoint != "primary" {
			t.Errorf("response %d: cost %d (want %d), %+v", i, e.Cost, want[i], e.Settlement)
		}
	}
	if e := entries[0]; e.Usage.CacheRead != 12 || e.Usage.Reasoning != 7 {
		t.Errorf("first response's usage: %+v", e.Usage)
	}
	if open, _, _ := s.Store.OpenHolds(context.Background(), acct.ID); open != 0 {
		t.Errorf("%d holds left open", open)
	}
}
