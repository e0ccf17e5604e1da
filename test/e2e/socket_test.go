package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
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
	// Headers are a refusal's: retry-after, x-should-retry and the like.
	Headers map[string]string `json:"headers"`
	raw     []byte
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
	evs, err := w.toTerminal(ctx)
	if err != nil {
		w.t.Fatalf("read after %d events: %v", len(evs), err)
	}
	return evs
}

// toTerminal reads the events of a response up to its terminal one (or an
// error event), or until the socket fails. It may run on a goroutine of
// its own.
func (w *wsConn) toTerminal(ctx context.Context) ([]wsEvent, error) {
	var evs []wsEvent
	for {
		_, data, err := w.c.Read(ctx)
		if err != nil {
			return evs, err
		}
		var ev wsEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return evs, fmt.Errorf("event %q: %w", data, err)
		}
		ev.raw = data
		evs = append(evs, ev)
		switch ev.Type {
		case "response.completed", "response.incomplete", "response.failed", "error":
			return evs, nil
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

// readClose reads until the gateway closes the socket and returns the
// close code.
func (w *wsConn) readClose() websocket.StatusCode {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if _, _, err := w.c.Read(ctx); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

// Refusals on the socket are the vendor's error events, and the socket
// serves the next response: the balance, another account's stored
// response (never forwarded), an event that is not response.create, a
// background request. A key whose account is suspended while its socket
// is open is refused at the next response.create within the key cache's
// time, and the socket closed. Bad frames close the socket with the
// WebSocket close code for them.
func TestSocketRefusalsAndOwnership(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	owner := s.NewAccount(100, noLimits)
	other := s.NewAccount(100, noLimits)
	poor := s.NewAccount(0.0000001, noLimits)
	const model = "gpt-6-sol"
	ctx := context.Background()

	w := mustDialSocket(t, s, owner.Key, nil)
	_, id := socketBilled(t, w.create(fmt.Sprintf(`{"model":%q,"input":"Keep this."}`, model)))

	// Another account's socket: the owner's stored response does not
	// exist for it, and the vendor never hears of the attempt.
	o := mustDialSocket(t, s, other.Key, nil)
	before := clientRequests(s)
	for _, body := range []string{
		fmt.Sprintf(`{"model":%q,"input":"more","previous_response_id":%q}`, model, id),
		fmt.Sprintf(`{"model":%q,"input":"more","previous_response_id":"resp_never_seen"}`, model),
	} {
		evs := o.create(body)
		if e := evs[0]; len(evs) != 1 || e.Type != "error" || e.Status != 404 || !strings.Contains(e.Error.Message, "not found") {
			t.Errorf("another account's previous_response_id: %s", e.raw)
		}
	}
	for _, tc := range []struct {
		msg    string
		status int
	}{
		{`{"type":"response.cancel"}`, 400},
		{fmt.Sprintf(`{"type":"response.create","model":%q,"input":"x","background":true}`, model), 400},
		{fmt.Sprintf(`{"type":"response.create","model":%q,"input":"x","conversation":"conv_1"}`, model), 404},
	} {
		if err := o.c.Write(ctx, websocket.MessageText, []byte(tc.msg)); err != nil {
			t.Fatal(err)
		}
		_, data, err := o.c.Read(ctx)
		var e wsEvent
		if err != nil || json.Unmarshal(data, &e) != nil || e.Type != "error" || e.Status != tc.status {
			t.Errorf("%s: %s %v", tc.msg, data, err)
		}
	}
	if after := clientRequests(s); after != before {
		t.Errorf("the vendor heard %d refused responses", after-before)
	}
	// The socket still serves the account's own responses.
	socketBilled(t, o.create(fmt.Sprintf(`{"model":%q,"input":"Mine."}`, model)))
	// And the owner continues its own.
	socketBilled(t, w.create(fmt.Sprintf(`{"model":%q,"input":"more","previous_response_id":%q}`, model, id)))

	// The balance: refused in the vendor's words, the socket open.
	p := mustDialSocket(t, s, poor.Key, nil)
	evs := p.create(fmt.Sprintf(`{"model":%q,"input":"hi"}`, model))
	if e := evs[0]; len(evs) != 1 || e.Type != "error" || e.Status != 402 || !strings.Contains(e.Error.Message, "balance") {
		t.Errorf("no balance: %s", e.raw)
	}
	evs = p.create(fmt.Sprintf(`{"model":%q,"input":"hi"}`, model))
	if evs[0].Status != 402 {
		t.Errorf("second refusal on the same socket: %s", evs[0].raw)
	}

	// Suspension while the socket is open.
	if err := s.Store.SetSuspended(ctx, other.ID, true); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		evs := o.create(fmt.Sprintf(`{"model":%q,"input":"again"}`, model))
		if e := evs[len(evs)-1]; e.Type == "error" {
			if e.Status != 403 {
				t.Errorf("suspended: %s", e.raw)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the suspension was not seen within the key cache's time")
		}
	}
	if code := o.readClose(); code != websocket.StatusPolicyViolation {
		t.Errorf("socket of a suspended account closed with %d, want %d", code, websocket.StatusPolicyViolation)
	}

	// Bad frames.
	for _, tc := range []struct {
		typ  websocket.MessageType
		data string
		code websocket.StatusCode
	}{
		{websocket.MessageBinary, `{"type":"response.create"}`, websocket.StatusUnsupportedData},
		{websocket.MessageText, `not json`, websocket.StatusInvalidFramePayloadData},
	} {
		b := mustDialSocket(t, s, owner.Key, nil)
		if err := b.c.Write(ctx, tc.typ, []byte(tc.data)); err != nil {
			t.Fatal(err)
		}
		if code := b.readClose(); code != tc.code {
			t.Errorf("%q: closed with %d, want %d", tc.data, code, tc.code)
		}
	}

	// A handshake without a valid key is refused before the upgrade.
	if _, resp, err := dialSocket(t, s, "cr_wrong", nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("bad key: %v %v", resp, err)
	}
	s.WaitSettled()
	if open, _, _ := s.Store.OpenHolds(ctx, owner.ID); open != 0 {
		t.Errorf("%d holds left open", open)
	}
}

// An upstream whose endpoints do not speak WebSocket (the fake vendor
// answering the upgrade 404, or websocket: false in gateway.yaml) has the
// upgrade answered 426, on which clients use HTTP at once; never 403.
func TestSocketFallbackStatus(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"no_websocket": true})
	}
	_, resp, err := dialSocket(t, s, acct.Key, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("vendor without WebSocket: %v %v", resp, err)
	}
	// HTTP still serves.
	r, b := s.Do("POST", responsesPath, chatCompletionsHeaders(acct.Key), []byte(`{"model":"gpt-6-sol","input":"hi"}`))
	if r.StatusCode != 200 {
		t.Fatalf("HTTP after the fallback: %d %s", r.StatusCode, b)
	}

	// websocket: false in gateway.yaml: 426 without asking the vendor.
	off := false
	s2 := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			c.Upstreams[i].WebSocket = &off
		}
	}})
	acct2 := s2.NewAccount(10, noLimits)
	_, resp, err = dialSocket(t, s2, acct2.Key, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUpgradeRequired {
		t.Fatalf("websocket: false: %v %v", resp, err)
	}
	if n := clientRequests(s2); n != 0 {
		t.Errorf("the vendor heard %d requests of an upstream configured without WebSocket", n)
	}
}

// A concurrency limit counts responses in flight, not sockets: with a
// limit of one, two idle sockets are open at once and each serves a
// response in turn, but a response on the second socket while one runs on
// the first is refused (429), and that socket then serves the next.
func TestSocketConcurrencyCountsResponses(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, account.Limits{Concurrency: 1})
	const body = `{"model":"gpt-6-sol","input":"hi"}`
	a := mustDialSocket(t, s, acct.Key, nil)
	b := mustDialSocket(t, s, acct.Key, nil)
	socketBilled(t, a.create(body))
	s.WaitSettled() // the slot is freed at settlement, just after the last event
	socketBilled(t, b.create(body))
	s.WaitSettled()

	s.Primary.Control(map[string]any{"event_delay_ms": 100, "reply_words": 30})
	if ev := a.startResponse(body); ev.Type != "response.created" {
		t.Fatalf("first event %s", ev.raw)
	}
	evs := b.create(body)
	if e := evs[0]; len(evs) != 1 || e.Type != "error" || e.Status != 429 || !strings.Contains(e.Error.Message, "concurrent") {
		t.Fatalf("second response in flight: %s", e.raw)
	}
	// The first ends; the second socket is served again.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		_, data, err := a.c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"type":"response.completed"`) {
			break
		}
	}
	s.Primary.Control(map[string]any{"event_delay_ms": 0})
	s.WaitSettled()
	socketBilled(t, b.create(body))
}

// One key holds at most limits.sockets_per_key sockets open on a sidecar:
// the next upgrade gets 429 with the vendor's error body, retry-after and
// the count, while another key still connects; when one of the key's
// sockets closes, the key connects again.
func TestSocketsPerKeyBounded(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) { c.Limits.SocketsPerKey = 2 }})
	busy := s.NewAccount(100, noLimits)
	other := s.NewAccount(100, noLimits)
	first := mustDialSocket(t, s, busy.Key, nil)
	mustDialSocket(t, s, busy.Key, nil)

	_, resp, err := dialSocket(t, s, busy.Key, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("third socket of one key: %d %v; want 429", status, err)
	}
	body, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Type, Message string } `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || e.Error.Type != "requests" || !strings.Contains(e.Error.Message, "2 WebSocket connections open") {
		t.Errorf("refusal body %s; want the vendor's rate-limit error naming the bound", body)
	}
	// A wait helps (a socket closes): retry-after, and never
	// x-should-retry: false.
	if resp.Header.Get("retry-after") == "" || resp.Header.Get("x-should-retry") == "false" {
		t.Errorf("refusal headers %v; want retry-after and no x-should-retry: false", resp.Header)
	}
	if got := sidecarMetric(t, s, "gateway_socket_refusals_total"); got != 1 {
		t.Errorf("gateway_socket_refusals_total = %v; want 1", got)
	}
	// Another key is not held back by the first's sockets.
	mustDialSocket(t, s, other.Key, nil)

	// One of the key's sockets closes: the key connects again.
	first.c.Close(websocket.StatusNormalClosure, "")
	eventually.True(t, 10*time.Second, "a socket after one closed", func() bool {
		c, _, err := dialSocket(t, s, busy.Key, nil)
		if err == nil {
			c.c.CloseNow()
		}
		return err == nil
	})
}

// A socket response whose client leaves mid-response is still read from
// the vendor, which generates it to its end and bills it: the vendor's own
// final usage settles it (not an estimate from the events the client saw).
func TestSocketClientGoneSettledFromVendorUsage(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, noLimits)
	const model = "gpt-6-sol"
	entry := servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses")[model]
	if entry == nil {
		t.Fatalf("%s is not served on responses", model)
	}
	s.Primary.Control(map[string]any{"input_tokens": 1400, "output_tokens": 43, "reply_words": 30, "event_delay_ms": 20})
	w := mustDialSocket(t, s, acct.Key, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(fmt.Sprintf(`{"type":"response.create","model":%q,"input":"Tell me a long story."}`, model))); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if _, _, err := w.c.Read(ctx); err != nil {
			t.Fatalf("read: %v", err)
		}
	}
	w.c.CloseNow() // gone after 4 events, without a close frame

	want := expectedNano(t, entry, billed{input: 1400, output: 43})
	var e ledger.Entry
	eventually.That(t, 15*time.Second, "the response settled", func() (bool, string) {
		entries, _, err := s.Store.Ledger(context.Background(), acct.ID, "", 10)
		if err != nil || len(entries) != 1 {
			return false, fmt.Sprintf("%d ledger entries (%v)", len(entries), err)
		}
		e = entries[0]
		return true, ""
	})
	if e.Estimated || e.Usage.Input != 1400 || e.Usage.Output != 43 || e.Cost != want || e.Transport != "websocket" {
		t.Errorf("ledger entry: cost %d (want %d from the vendor's 1,400 in and 43 out), %+v", e.Cost, want, e.Settlement)
	}
}
