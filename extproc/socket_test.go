package extproc

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/extproc/format/responses"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/eventually"
)

// fakeSocketVendor answers each response.create with a response.created
// event, two deltas and response.completed with usage; cut > 0 drops the
// connection after that many events of a response.
type fakeSocketVendor struct {
	creates atomic.Int32
	cut     int
	deltas  int           // more delta events per response (the benchmark's)
	hold    chan struct{} // when set, each response waits for a receive after its first event
}

func (f *fakeSocketVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/beta/v1/responses" {
		http.NotFound(w, r)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		n := f.creates.Add(1)
		var req struct{ Model string }
		json.Unmarshal(data, &req)
		id := "resp_" + string(rune('a'+n))
		evs := []string{
			`{"type":"response.created","response":{"id":"` + id + `","model":"` + req.Model + `","status":"in_progress"}}`,
			`{"type":"response.output_text.delta","delta":"Hello there"}`,
			`{"type":"response.output_text.delta","delta":" friend"}`,
			`{"type":"response.completed","response":{"id":"` + id + `","model":"` + req.Model + `","status":"completed","usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":0},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":27}}}`,
		}
		for range f.deltas {
			evs = append(evs[:len(evs)-1], `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":" word"}`, evs[len(evs)-1])
		}
		for i, ev := range evs {
			if f.cut > 0 && i == f.cut {
				return
			}
			if f.hold != nil && i == 1 {
				<-f.hold
			}
			if c.Write(ctx, websocket.MessageText, []byte(ev)) != nil {
				return
			}
		}
	}
}

// socketRig is a rig whose socket handler reaches vendor as its relay.
func socketRig(t *testing.T, vendor http.Handler) (*rig, string) {
	t.Helper()
	return socketRigIdle(t, vendor, 0)
}

func socketRigIdle(t *testing.T, vendor http.Handler, idle time.Duration) (*rig, string) {
	t.Helper()
	r, url, _ := socketRigWith(t, vendor, SocketOptions{Idle: idle}, nil)
	return r, url
}

// socketRigWith is a socket rig with options o (its Relay set to vendor);
// its gateway's connections are wrapped by wrap when it is set, and its
// server's clock is now when that is set.
func socketRigWith(t *testing.T, vendor http.Handler, o SocketOptions, now func() time.Time) (*rig, string, *countingListener) {
	t.Helper()
	return socketRigFor(t, rigAccount{}, vendor, o, now)
}

// socketRigFor is socketRigWith for an account made as ra says.
func socketRigFor(t *testing.T, ra rigAccount, vendor http.Handler, o SocketOptions, now func() time.Time) (*rig, string, *countingListener) {
	t.Helper()
	r := newRigWith(t, "beta", ra)
	if now != nil {
		r.srv.now = now
	}
	up := httptest.NewServer(vendor)
	t.Cleanup(up.Close)
	o.Relay = strings.TrimPrefix(up.URL, "http://")
	mux := http.NewServeMux()
	mux.Handle(SocketPrefix, r.srv.SocketHandler(o))
	gw := httptest.NewUnstartedServer(mux)
	cl := &countingListener{Listener: gw.Listener}
	gw.Listener = cl
	gw.Start()
	t.Cleanup(gw.Close)
	return r, "ws" + strings.TrimPrefix(gw.URL, "http") + SocketPrefix + "beta/v1/responses", cl
}

// countingListener counts the bytes the gateway has read from its clients.
type countingListener struct {
	net.Listener
	read atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, read: &l.read}, nil
}

type countingConn struct {
	net.Conn
	read *atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func dialRig(t *testing.T, url, key string) *websocket.Conn {
	t.Helper()
	c, resp, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatalf("dial: %v %v", resp, err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// exchangeEvents sends msg and returns the messages up to the terminal
// event; err is the read error that ended them early.
func exchangeEvents(t *testing.T, c *websocket.Conn, msg string) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, string(data))
		typ, _, _ := MessageType(data)
		if responses.Socket.Ended(typ) {
			return out, nil
		}
	}
}

// Two responses on one socket settle once each, from their usage, as the
// ledger's websocket transport; the second continues the first, store:
// false, which only the socket remembers (this rig binds nothing, so any
// other id is refused). A refused response never reaches the vendor and
// the socket serves the next.
func TestSocketResponsesSettleOnceEach(t *testing.T) {
	v := &fakeSocketVendor{}
	r, url := socketRig(t, v)
	c := dialRig(t, url, r.key)

	evs, err := exchangeEvents(t, c, `{"type":"response.create","model":"gpt-4o-mini","input":"hi"}`)
	if err != nil || len(evs) != 4 || !strings.Contains(evs[0], `"response.created"`) {
		t.Fatalf("first response: %v %v", evs, err)
	}
	evs, err = exchangeEvents(t, c, `{"type":"response.create","model":"no-such-model","input":"hi"}`)
	if err != nil || len(evs) != 1 || !strings.Contains(evs[0], `"type":"error","status":404`) && !strings.Contains(evs[0], `"status":400`) {
		t.Fatalf("unknown model: %v %v", evs, err)
	}
	evs, err = exchangeEvents(t, c, `{"type":"response.create","model":"gpt-4o-mini","input":"more","store":false,"previous_response_id":"resp_elsewhere"}`)
	if err != nil || len(evs) != 1 || !strings.Contains(evs[0], `"status":404`) {
		t.Fatalf("an id not created on this socket: %v %v", evs, err)
	}
	evs, err = exchangeEvents(t, c, `{"type":"response.create","model":"gpt-4o-mini","input":"more","store":false,"previous_response_id":"resp_b"}`)
	if err != nil || len(evs) != 4 {
		t.Fatalf("continuation on the socket: %v %v", evs, err)
	}
	if n := v.creates.Load(); n != 2 {
		t.Errorf("the vendor received %d creates, want 2", n)
	}
	ctx := context.Background()
	// The client reads a reply's last event before its call has settled
	// (Sent, then Finish): wait for the calls to end, then for their
	// settlements.
	r.srv.Wait(ctx)
	r.srv.Flush(ctx)
	entries, _, err := r.st.Ledger(ctx, r.acct, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("%d ledger entries, want 2", len(entries))
	}
	for _, e := range entries {
		if e.Transport != TransportWebSocket || e.Status != 200 || e.Estimated || !e.Stream || e.Usage.Input != 20 || e.Usage.Output != 7 || e.Cost == 0 {
			t.Errorf("entry %+v", e.Settlement)
		}
	}
}

// A vendor socket that drops mid-response: the client gets an error event
// and close 1011; the response settles once, estimated from what was seen.
func TestSocketVendorCutSettlesEstimated(t *testing.T) {
	r, url := socketRig(t, &fakeSocketVendor{cut: 2})
	c := dialRig(t, url, r.key)
	evs, err := exchangeEvents(t, c, `{"type":"response.create","model":"gpt-4o-mini","input":"hi"}`)
	if err != nil || len(evs) != 3 || !strings.Contains(evs[2], `"status":503`) {
		t.Fatalf("cut response: %v %v", evs, err)
	}
	_, _, err = c.Read(context.Background())
	if websocket.CloseStatus(err) != websocket.StatusInternalError {
		t.Fatalf("close: %v", err)
	}
	ctx := context.Background()
	r.srv.Wait(ctx) // the response's settlement follows the close the client saw
	r.srv.Flush(ctx)
	entries, _, _ := r.st.Ledger(ctx, r.acct, "", 10)
	if len(entries) != 1 || !entries[0].Estimated || entries[0].Status != 200 || entries[0].Cost == 0 {
		t.Fatalf("ledger %+v", entries)
	}
}

// A vendor that does not speak WebSocket: the client's upgrade is answered
// 426 so that it uses HTTP; a bad key is refused before any upgrade.
func TestSocketFallbackAndBadKey(t *testing.T) {
	r, url := socketRig(t, http.NotFoundHandler())
	_, resp, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + r.key}}})
	if err == nil || resp == nil || resp.StatusCode != SocketFallbackStatus {
		t.Fatalf("fallback: %v %v", resp, err)
	}
	_, resp, err = websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer cr_nope"}}})
	if err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("bad key: %v %v", resp, err)
	}
}

// BenchmarkSocketMessage is the sidecar's own cost per vendor message on a
// socket (read from the vendor's socket, metered, written to the client's),
// in process over loopback: 100 deltas a response, one response at a time.
func BenchmarkSocketMessage(b *testing.B) {
	v := &fakeSocketVendor{deltas: 100}
	r := newRigWith(b, "beta", rigAccount{})
	up := httptest.NewServer(v)
	defer up.Close()
	mux := http.NewServeMux()
	mux.Handle(SocketPrefix, r.srv.SocketHandler(SocketOptions{Relay: strings.TrimPrefix(up.URL, "http://")}))
	gw := httptest.NewServer(mux)
	defer gw.Close()
	ctx := context.Background()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(gw.URL, "http")+SocketPrefix+"beta/v1/responses",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + r.key}}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.CloseNow()
	msg := []byte(`{"type":"response.create","model":"gpt-4o-mini","input":"hi"}`)
	msgs := 0
	b.ResetTimer()
	for range b.N {
		c.Write(ctx, websocket.MessageText, msg)
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			msgs++
			if typ, _, _ := MessageType(data); responses.Socket.Ended(typ) {
				break
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(msgs), "ns/message")
}

// A socket idle for the configured time is closed normally; a response
// in between restarts the wait.
func TestSocketIdleClosed(t *testing.T) {
	const idle = 200 * time.Millisecond
	r, url := socketRigIdle(t, &fakeSocketVendor{}, idle)
	c := dialRig(t, url, r.key)
	start := time.Now()
	if _, err := exchangeEvents(t, c, `{"type":"response.create","model":"gpt-4o-mini","input":"hi"}`); err != nil {
		t.Fatal(err)
	}
	served := time.Now()
	_, _, err := c.Read(context.Background())
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("idle socket: %v", err)
	}
	if since := time.Since(served); since < idle-10*time.Millisecond {
		t.Fatalf("closed %v after its last response, %v after it opened; want at least %v idle", since, time.Since(start), idle)
	}
}

// The bucket of pings and refused messages: rate at once, rate a second
// after, never more than rate saved up; once empty the socket is marked
// cut.
func TestChatterBucket(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	b := newChatter(3, t0)
	for i := range 3 {
		if !b.spend(t0) {
			t.Fatalf("spend %d of 3 at once refused", i+1)
		}
	}
	select {
	case <-b.cut:
		t.Fatal("cut before the bucket was empty")
	default:
	}
	if b.spend(t0) {
		t.Fatal("a fourth spend at once was allowed")
	}
	select {
	case <-b.cut:
	default:
		t.Fatal("an empty bucket did not mark the socket cut")
	}
	// Half a second later: 1.5 tokens, one spend.
	if !b.spend(t0.Add(500*time.Millisecond)) || b.spend(t0.Add(500*time.Millisecond)) {
		t.Fatal("half a second at 3 a second should allow exactly one")
	}
	// An hour quiet saves up only rate tokens.
	later := t0.Add(time.Hour)
	n := 0
	for b.spend(later) {
		n++
	}
	if n != 3 {
		t.Fatalf("after an hour %d spends at once, want 3", n)
	}
}

// While a response runs, the socket reads one client message ahead and no
// more: 32 messages of 1 MiB sent behind a held response leave the
// gateway having read two of them (the one waiting, the one its reader
// holds), whatever the client keeps sending. Once the response ends, each
// is served in turn (here refused, as unsupported events) and the running
// response is unaffected.
func TestSocketReadsOneMessageAhead(t *testing.T) {
	vendor := &fakeSocketVendor{hold: make(chan struct{})}
	const msgs, size = 32, 1 << 20
	r, url, cl := socketRigWith(t, vendor, SocketOptions{PingsPerSecond: 2 * msgs}, nil)
	c := dialRig(t, url, r.key)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"response.create","model":"gpt-4o-mini","input":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	if _, data, err := c.Read(ctx); err != nil || !strings.Contains(string(data), `"response.created"`) {
		t.Fatalf("first event: %s %v", data, err)
	}
	before := cl.read.Load()
	msg := []byte(`{"type":"keepalive","pad":"` + strings.Repeat("x", size) + `"}`)
	wrote := make(chan error, 1)
	go func() {
		for range msgs {
			if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	eventually.True(t, 20*time.Second, "two messages read behind the response", func() bool {
		return cl.read.Load()-before >= 2*int64(len(msg))
	})
	if got, most := cl.read.Load()-before, 2*int64(len(msg))+64<<10; got > most {
		t.Fatalf("the gateway read %d bytes behind a running response; at most %d (two messages)", got, most)
	}
	close(vendor.hold)
	var refused int
	for refused < msgs {
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("after %d refusals: %v", refused, err)
		}
		typ, status, _ := MessageType(data)
		switch {
		case typ == "error" && status == 400:
			refused++
		case refused == 0 && typ != "error":
			// The held response's remaining events come first.
		default:
			t.Fatalf("message %d: %s", refused, data)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatalf("client writes: %v", err)
	}
	if n := vendor.creates.Load(); n != 1 {
		t.Fatalf("the vendor heard %d creates, want 1", n)
	}
}

// Refused messages and pings past limits.socket_pings_per_second close the
// socket with 1008; with the clock still, exactly that many pass.
func TestSocketChatterCut(t *testing.T) {
	const rate = 5
	still := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return still }
	t.Run("refused", func(t *testing.T) {
		vendor := &fakeSocketVendor{}
		r, url, _ := socketRigWith(t, vendor, SocketOptions{PingsPerSecond: rate}, now)
		c := dialRig(t, url, r.key)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for i := range rate + 1 {
			if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"keepalive"}`)); err != nil {
				t.Fatal(err)
			}
			_, data, err := c.Read(ctx)
			if err != nil || !strings.Contains(string(data), `"status":400`) {
				t.Fatalf("keepalive %d answered %s %v", i+1, data, err)
			}
		}
		if _, _, err := c.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
			t.Fatalf("past the rate: %v, want close 1008", err)
		}
		if n := vendor.creates.Load(); n != 0 {
			t.Fatalf("the vendor heard %d creates", n)
		}
	})
	t.Run("pings", func(t *testing.T) {
		r, url, _ := socketRigWith(t, &fakeSocketVendor{}, SocketOptions{PingsPerSecond: rate}, now)
		c := dialRig(t, url, r.key)
		// A reader for the pongs, and to see the close.
		closed := make(chan error, 1)
		go func() {
			_, _, err := c.Read(context.Background())
			closed <- err
		}()
		for i := range rate {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := c.Ping(ctx)
			cancel()
			if err != nil {
				t.Fatalf("ping %d of %d: %v", i+1, rate, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Ping(ctx); err == nil {
			t.Fatal("a ping past the rate was answered")
		}
		select {
		case err := <-closed:
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("past the rate: %v, want close 1008", err)
			}
		case <-ctx.Done():
			t.Fatal("the socket stayed open past its rate of pings")
		}
	})
}

// Refused messages do not keep a socket open: one refused every 20 ms
// (below the rate) still sees the socket closed once it is idle.
func TestSocketIdleNotKeptByRefusals(t *testing.T) {
	const idle = 300 * time.Millisecond
	r, url, _ := socketRigWith(t, &fakeSocketVendor{}, SocketOptions{Idle: idle, PingsPerSecond: 1000}, nil)
	c := dialRig(t, url, r.key)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	sent := 0
	for {
		if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"keepalive"}`)); err != nil {
			break // closed while writing: the read below says how
		}
		sent++
		if _, _, err := c.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("after %d keepalives: %v, want the idle close (1000)", sent, err)
			}
			return
		}
		<-tick.C
	}
	_, _, err := c.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after %d keepalives: %v, want the idle close (1000)", sent, err)
	}
}

// A refusal on the socket tells the client what to do as over HTTP: its
// error event carries the refusal's headers (retry-after, x-should-retry,
// x-gateway-limit-reset), which Codex reads as an HTTP reply's. A request
// rate says when to retry; a spent daily budget says not to, and when it
// resets.
func TestSocketRefusalsSayWhatToDo(t *testing.T) {
	create := `{"type":"response.create","model":"gpt-4o-mini","input":"hi"}`
	advice := func(t *testing.T, ev string) (int, map[string]string) {
		t.Helper()
		var e struct {
			Type    string            `json:"type"`
			Status  int               `json:"status"`
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal([]byte(ev), &e); err != nil || e.Type != "error" {
			t.Fatalf("not an error event: %s (%v)", ev, err)
		}
		if _, ok := e.Headers["content-type"]; ok {
			t.Errorf("the event names a content type: %s", ev)
		}
		return e.Status, e.Headers
	}
	t.Run("rate", func(t *testing.T) {
		r, url, _ := socketRigFor(t, rigAccount{limits: account.Limits{RPM: 1, WindowMinutes: 1}}, &fakeSocketVendor{}, SocketOptions{}, nil)
		c := dialRig(t, url, r.key)
		if evs, err := exchangeEvents(t, c, create); err != nil || len(evs) != 4 {
			t.Fatalf("first response: %v %v", evs, err)
		}
		evs, err := exchangeEvents(t, c, create)
		if err != nil || len(evs) != 1 {
			t.Fatalf("second response: %v %v", evs, err)
		}
		status, h := advice(t, evs[0])
		if s, err := strconv.Atoi(h["retry-after"]); status != 429 || err != nil || s < 1 || s > 60 || h["x-should-retry"] == "false" {
			t.Fatalf("status %d, headers %v: want 429 with a retry-after within the window", status, h)
		}
	})
	t.Run("daily", func(t *testing.T) {
		r, url, _ := socketRigFor(t, rigAccount{limits: account.Limits{DailyNanoUSD: 1}}, &fakeSocketVendor{}, SocketOptions{}, nil)
		c := dialRig(t, url, r.key)
		evs, err := exchangeEvents(t, c, create)
		if err != nil || len(evs) != 1 {
			t.Fatalf("response: %v %v", evs, err)
		}
		status, h := advice(t, evs[0])
		if _, err := time.Parse(time.RFC3339, h["x-gateway-limit-reset"]); status != 429 || err != nil || h["x-should-retry"] != "false" || h["retry-after"] != "" {
			t.Fatalf("status %d, headers %v: want 429, x-should-retry false and the reset, no retry-after", status, h)
		}
	})
}
