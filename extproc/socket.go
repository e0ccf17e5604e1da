package extproc

// The Responses API's WebSocket transport. Envoy routes the upgrade of
// GET /NAME/v1/responses to the sidecar's control listener (SocketPrefix);
// the sidecar checks the key at the handshake, opens its own socket to the
// vendor through Envoy's relay listener (which adds the vendor credential
// and picks the endpoint), and then runs each response.create as one
// exchange: the same checkRequest, admit, meter, bind and settle as a
// streamed POST /v1/responses, each vendor message being one event's data.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
)

// SocketPrefix is where the sidecar's control listener serves the
// WebSocket transport: Envoy rewrites /NAME/v1/responses (an upgrade) to
// SocketPrefix + NAME + /v1/responses.
const SocketPrefix = "/socket/"

// TransportWebSocket names the transport in the ledger; HTTP is "".
const TransportWebSocket = "websocket"

// maxSocketMessage bounds one client message (a response.create), as
// limits.max_request_bytes bounds a body over HTTP.
const defaultMaxSocketMessage = 32 << 20

// socketLocalIDs bounds the ids of responses created on one socket that it
// remembers (store: false continuations).
const socketLocalIDs = 1024

// SocketFallbackStatus answers an upgrade the vendor cannot take (an
// endpoint that speaks HTTP only): 426 Upgrade Required. Codex switches to
// HTTP for the session on it, and the SDKs raise at connect().
const SocketFallbackStatus = http.StatusUpgradeRequired

// SocketOptions configure the WebSocket transport.
type SocketOptions struct {
	// Relay is Envoy's relay listener (host:port), the way to the vendor.
	Relay string
	// Idle closes a socket on which no response was admitted this long;
	// default config.DefaultSocketIdle.
	Idle time.Duration
	// PerKey bounds the sockets one key holds open here (each holds a
	// vendor socket until it closes); beyond it the upgrade gets 429.
	// Default config.DefaultSocketsPerKey.
	PerKey int
	// Disabled lists upstreams whose endpoints speak HTTP only: their
	// upgrades are answered SocketFallbackStatus without asking the vendor.
	Disabled map[string]bool
	// PingsPerSecond bounds the pings and refused messages of one socket
	// (as many at once, and that many a second after); beyond it the
	// socket is closed with 1008. Default
	// config.DefaultSocketPingsPerSecond.
	PingsPerSecond int
}

// SocketHandler serves the WebSocket transport of the Responses API.
func (s *Server) SocketHandler(o SocketOptions) http.Handler {
	if o.Idle <= 0 {
		o.Idle = config.DefaultSocketIdle
	}
	if o.PerKey <= 0 {
		o.PerKey = config.DefaultSocketsPerKey
	}
	if o.PingsPerSecond <= 0 {
		o.PingsPerSecond = config.DefaultSocketPingsPerSecond
	}
	return &socketHandler{s: s, o: o, open: map[string]int{}}
}

type socketHandler struct {
	s *Server
	o SocketOptions

	mu   sync.Mutex
	open map[string]int // sockets open per key id
}

// take counts one more socket of key, unless it holds PerKey already.
func (h *socketHandler) take(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[key] >= h.o.PerKey {
		return false
	}
	h.open[key]++
	return true
}

// release counts a socket of key closed.
func (h *socketHandler) release(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.open[key]--; h.open[key] <= 0 {
		delete(h.open, key)
	}
}

// socketError is the vendor's error event on a socket: the HTTP refusal's
// status and its error object.
func socketError(status int, body []byte) []byte {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 {
		e.Error = json.RawMessage(`{"type":"server_error","code":null,"message":"the gateway refused the response","param":null}`)
	}
	out := []byte(`{"type":"error","status":`)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, `,"error":`...)
	out = append(out, e.Error...)
	return append(out, '}')
}

// writeImmediate answers an HTTP request (the handshake) with a refusal.
func writeImmediate(w http.ResponseWriter, resp *extprocv3.ProcessingResponse) {
	ir := resp.GetImmediateResponse()
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		w.Header().Set(h.GetHeader().GetKey(), string(h.GetHeader().GetRawValue()))
	}
	w.WriteHeader(int(ir.GetStatus().GetCode()))
	w.Write(ir.GetBody())
}

func (h *socketHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	path := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(SocketPrefix, "/"))
	x := &exchange{s: s, started: s.now(), transport: TransportWebSocket}
	x.upstream = s.upstream(path)
	if x.upstream == nil {
		http.NotFound(w, r)
		return
	}
	sub := path[len(x.upstream.prefix)-1:]
	creds := auth.Headers{XAPIKey: r.Header.Values("x-api-key"), Authorization: r.Header.Values("authorization")}
	key, err := s.keys.Authenticate(r.Context(), creds, x.started, modelPolicy)
	if err != nil {
		writeImmediate(w, x.refuseAuth(err))
		return
	}
	x.key = key
	op, vp, _ := operation.Match(x.upstream.Operations, "POST", sub)
	if sub != "/v1/responses" || vp == nil || vp.Kind != operation.Metered || op.Name != "responses" {
		writeImmediate(w, x.reject(format.NotFound, "no such path: GET "+sub, 0))
		return
	}
	if !strings.EqualFold(r.Header.Get("upgrade"), "websocket") {
		writeImmediate(w, x.reject(format.InvalidRequest, "GET "+sub+" is the WebSocket transport: send Upgrade: websocket, or POST "+sub, 0))
		return
	}
	if h.o.Disabled[x.upstream.Name] {
		h.fallback(w, x, sub)
		return
	}
	if !h.take(key.ID) {
		h.s.metrics.socketRefusals.Inc()
		writeImmediate(w, x.reject(format.RateLimited, "this key has "+strconv.Itoa(h.o.PerKey)+
			" WebSocket connections open on this gateway, the most it may; close one (or send over HTTP) and retry", time.Second))
		return
	}
	defer h.release(key.ID)
	// The vendor's socket first: if it cannot be had, the client hears why
	// before its upgrade is accepted.
	// Steered as an HTTP request is: the account's key (or its session's),
	// so that a pinned account's socket is served by its own key.
	var keyCluster string
	if p := x.upstream.Pool; p != nil {
		keyCluster = p.Choose(key.AccountID, bound(r.Header.Get(sessionHeader))).Cluster
	}
	vendor, served, status, err := h.dialVendor(r, x.upstream, keyCluster)
	if err != nil {
		switch {
		case status == http.StatusServiceUnavailable || status == 0:
			s.log.Warn("vendor socket failed", "upstream", x.upstream.Name, "status", status, "err", err)
			writeImmediate(w, x.reject(format.Unavailable, "the vendor is unavailable; retry shortly", time.Second))
		case vendorRefusal(status):
			s.metrics.vendorRefusals.WithLabelValues(x.upstream.Name).Inc()
			s.log.Warn("the vendor refused the gateway's credential", "upstream", x.upstream.Name, "status", status, "transport", TransportWebSocket)
			writeImmediate(w, immediate(status, "application/json", vendorRefusalBody(x.upstream.Format, status), 0))
		case status >= 500:
			writeImmediate(w, x.reject(format.Unavailable, "the vendor is unavailable; retry shortly", time.Second))
		default:
			// The endpoint does not speak WebSocket (404, 405, 426...).
			h.fallback(w, x, sub)
		}
		return
	}
	chat := newChatter(h.o.PingsPerSecond, s.now())
	client, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true,
		OnPingReceived: func(context.Context, []byte) bool { return chat.spend(s.now()) }})
	if err != nil {
		vendor.CloseNow()
		return
	}
	sc := &socketConn{h: h, creds: creds, key: key, upstream: x.upstream, op: op, path: vp,
		client: client, vendor: vendor, endpoint: served.endpoint, vendorKey: served.key, local: map[string]bool{}, chat: chat}
	sc.run(context.WithoutCancel(r.Context()))
}

// fallback answers an upgrade the vendor cannot take so that clients use
// HTTP at once.
func (h *socketHandler) fallback(w http.ResponseWriter, x *exchange, sub string) {
	h.s.metrics.rejections.WithLabelValues(x.upstream.Name, format.InvalidRequest.Reason()).Inc()
	w.Header().Set("content-type", "application/json")
	w.Header().Set("upgrade", "HTTP/1.1")
	w.WriteHeader(SocketFallbackStatus)
	w.Write(x.upstream.Format.ErrorBody(&format.Error{Kind: format.InvalidRequest,
		Message: "the WebSocket transport is not available on this upstream; use HTTP (POST " + sub + ")"}))
}

// socketServed is what the relay says served a vendor socket: the
// endpoint and the vendor key (empty where the contract carries no host
// metadata).
type socketServed struct{ endpoint, key string }

// dialVendor opens the vendor's socket through Envoy's relay listener;
// keyCluster, for a pooled upstream, names the aggregate that tries the
// chosen key first. Of the client's handshake headers the vendor hears
// those the upstream forwards (forward.go), as over HTTP; the handshake's
// own are the dialer's.
func (h *socketHandler) dialVendor(r *http.Request, u *Upstream, keyCluster string) (*websocket.Conn, socketServed, int, error) {
	upstream := u.Name
	hdr := http.Header{}
	for k, vs := range r.Header {
		k = strings.ToLower(k)
		if transportHeader(k) || !u.forward.allows(k) || strings.HasPrefix(k, "sec-websocket-") {
			continue
		}
		hdr[k] = vs
	}
	if keyCluster != "" {
		hdr.Set(config.KeyClusterHeader, keyCluster)
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws://"+h.o.Relay+"/"+upstream+"/v1/responses", &websocket.DialOptions{HTTPHeader: hdr})
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	if err != nil {
		return nil, socketServed{}, status, err
	}
	c.SetReadLimit(-1) // the vendor's events: a final response can be large
	served := socketServed{endpoint: resp.Header.Get("x-gateway-endpoint"), key: resp.Header.Get("x-gateway-vendor-key")}
	if served.endpoint == "" {
		// The reduced contract has no host metadata: the address Envoy
		// connected to says which endpoint it is.
		if u := h.s.upstreamNamed(upstream); u != nil && u.addrs != nil {
			served.endpoint = u.addrs.endpointOf(resp.Header.Get("x-gateway-upstream-address"))
		}
	}
	return c, served, status, nil
}

// socketConn is one client socket and its vendor socket.
type socketConn struct {
	h        *socketHandler
	creds    auth.Headers
	key      account.Key
	upstream *Upstream
	op       *operation.Operation
	path     *operation.Path
	client   *websocket.Conn
	vendor   *websocket.Conn
	// endpoint and vendorKey served the vendor socket, so every response
	// on it.
	endpoint, vendorKey string

	mu    sync.Mutex
	local map[string]bool // responses created on this socket

	// waiting is the one client message read while a response ran; no
	// other is read until that response ends (back-pressure).
	waiting *socketMsg
	chat    *chatter
	idle    *time.Timer // reset only by admitted responses
}

// chatter is a socket's token bucket for what costs the sidecar without
// being admitted: pings and refused messages. It holds rate tokens at most
// and gains rate a second; once it is empty the socket is cut.
type chatter struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
	cut    chan struct{} // closed when the socket is over its rate
	once   sync.Once
}

func newChatter(perSecond int, now time.Time) *chatter {
	r := float64(perSecond)
	return &chatter{rate: r, tokens: r, last: now, cut: make(chan struct{})}
}

// spend takes one token; without one it marks the socket cut and reports
// false. Pings call it from the client socket's reader.
func (b *chatter) spend(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.rate, b.tokens+d.Seconds()*b.rate)
		b.last = now
	}
	if b.tokens < 1 {
		b.once.Do(func() { close(b.cut) })
		return false
	}
	b.tokens--
	return true
}

type socketMsg struct {
	typ  websocket.MessageType
	data []byte
	err  error
}

// reader reads one side's messages into a channel until it fails.
func reader(ctx context.Context, c *websocket.Conn, out chan<- socketMsg) {
	for {
		t, data, err := c.Read(ctx)
		select {
		case out <- socketMsg{t, data, err}:
		case <-ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

// eventQuery reads what the socket needs of a message: its type, and the
// status of an error event.
var socketQuery = jsonscan.NewQuery("type", "status")

// messageType returns a message's "type" and, for an error event, its
// "status"; ok is false when the message is not a JSON object.
func messageType(data []byte) (typ string, status int, ok bool) {
	var t, st jsonscan.Value
	err := socketQuery.Scan(data, func(path int, v jsonscan.Value) error {
		if path == 0 {
			t = v
		} else {
			st = v
		}
		return nil
	})
	if trimmed := bytes.TrimSpace(data); err != nil || len(trimmed) == 0 || trimmed[0] != '{' {
		return "", 0, false
	}
	if n, isInt := st.Int(); isInt {
		status = int(n)
	}
	return t.Text(), status, true
}

// terminalEvent reports whether an event ends a response on the socket.
func terminalEvent(typ string) bool {
	switch typ {
	case "response.completed", "response.incomplete", "response.failed", "error":
		return true
	}
	return false
}

func (c *socketConn) isLocal(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.local[id]
}

func (c *socketConn) remember(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.local) >= socketLocalIDs {
		clear(c.local)
	}
	c.local[id] = true
}

// run serves the socket until either side closes it or it idles out.
func (c *socketConn) run(ctx context.Context) {
	s := c.h.s
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer c.vendor.CloseNow()
	defer c.client.CloseNow()
	limit := s.maxBody
	if limit <= 0 {
		limit = defaultMaxSocketMessage
	}
	c.client.SetReadLimit(limit)
	// Unbuffered: the reader holds at most the one message it read.
	fromClient := make(chan socketMsg)
	fromVendor := make(chan socketMsg, 64)
	go reader(ctx, c.client, fromClient)
	go reader(ctx, c.vendor, fromVendor)
	s.metrics.sockets.Inc()
	defer s.metrics.sockets.Dec()
	c.idle = time.NewTimer(c.h.o.Idle)
	defer c.idle.Stop()
	for {
		var m socketMsg
		if c.waiting != nil {
			m, c.waiting = *c.waiting, nil
		} else {
			select {
			case m = <-fromClient:
			case <-c.chat.cut:
				c.cutOff()
				return
			case v := <-fromVendor:
				if v.err != nil {
					c.client.Close(websocket.StatusInternalError, "the vendor closed the connection")
					return
				}
				// Outside a response (a notice before the vendor closes):
				// passed on as it is, but for a refusal of the credential.
				typ, status, _ := messageType(v.data)
				c.client.Write(ctx, websocket.MessageText, c.scrub(v.data, typ, status, false))
				continue
			case <-c.idle.C:
				c.vendor.Close(websocket.StatusNormalClosure, "")
				c.client.Close(websocket.StatusNormalClosure, "idle for "+c.h.o.Idle.String())
				return
			}
		}
		if m.err != nil {
			// The client closed (or broke) its socket.
			c.vendor.Close(websocket.StatusNormalClosure, "")
			return
		}
		if !c.message(ctx, m, fromClient, fromVendor) {
			return
		}
	}
}

// cutOff closes a socket over its rate of pings and refused messages.
func (c *socketConn) cutOff() {
	c.h.s.metrics.socketCuts.Inc()
	c.h.s.log.Warn("socket closed: over its rate of pings and refused messages",
		"upstream", c.upstream.Name, "key", c.key.ID, "per_second", c.h.o.PingsPerSecond)
	c.vendor.Close(websocket.StatusNormalClosure, "")
	c.client.Close(websocket.StatusPolicyViolation, "more than "+strconv.Itoa(c.h.o.PingsPerSecond)+" pings and refused messages a second")
}

// message handles one client message; false ends the socket.
func (c *socketConn) message(ctx context.Context, m socketMsg, fromClient, fromVendor chan socketMsg) bool {
	if m.typ != websocket.MessageText {
		c.client.Close(websocket.StatusUnsupportedData, "binary messages are not accepted; send JSON text")
		return false
	}
	typ, _, ok := messageType(m.data)
	if !ok {
		c.client.Close(websocket.StatusInvalidFramePayloadData, "not a JSON object")
		return false
	}
	if typ != "response.create" {
		x := c.exchange()
		return c.refused(ctx, x.reject(format.InvalidRequest, "unsupported event type "+strconv.Quote(typ)+"; the client sends response.create", 0))
	}
	return c.create(ctx, m.data, fromClient, fromVendor)
}

func (c *socketConn) exchange() *exchange {
	s := c.h.s
	return &exchange{s: s, upstream: c.upstream, op: c.op, path: c.path, key: c.key, started: s.now(),
		contentType: "application/json", transport: TransportWebSocket, localRef: c.isLocal}
}

// refused answers a client message with a refusal and counts it against
// the socket's rate; false ends the socket (cut).
func (c *socketConn) refused(ctx context.Context, resp *extprocv3.ProcessingResponse) bool {
	c.refuse(ctx, resp)
	if c.chat.spend(c.h.s.now()) {
		return true
	}
	c.cutOff()
	return false
}

// refuse sends a refusal as the vendor's error event; the socket stays open.
func (c *socketConn) refuse(ctx context.Context, resp *extprocv3.ProcessingResponse) error {
	ir := resp.GetImmediateResponse()
	return c.client.Write(ctx, websocket.MessageText, socketError(int(ir.GetStatus().GetCode()), ir.GetBody()))
}

// create runs one response.create as a metered exchange: the key checked
// again (the key cache's time), the request checked and admitted exactly
// as over HTTP, forwarded only if admitted, its events metered until the
// terminal one settles it. false ends the socket.
func (c *socketConn) create(ctx context.Context, data []byte, fromClient, fromVendor chan socketMsg) bool {
	s := c.h.s
	s.active.Add(1)
	defer s.active.Done()
	x := c.exchange()
	key, err := s.keys.Authenticate(ctx, c.creds, x.started, modelPolicy)
	if err != nil {
		var ae *auth.Error
		if errors.As(err, &ae) && ae.Reason == auth.Unavailable {
			return c.refused(ctx, x.refuseAuth(err))
		}
		c.refuse(ctx, x.refuseAuth(err))
		// The key is gone for good: so is the socket.
		c.client.Close(websocket.StatusPolicyViolation, "the key was refused")
		return false
	}
	x.key, c.key = key, key
	if resp := x.refusedAtHeaders(); resp != nil {
		return c.refused(ctx, resp) // as over HTTP, before the message is parsed
	}
	req, price, resp := x.checkRequest(ctx, data)
	if resp != nil {
		return c.refused(ctx, resp)
	}
	if req.Background {
		return c.refused(ctx, x.reject(format.InvalidRequest, "background: background responses are not supported over WebSocket; use POST /v1/responses", 0))
	}
	req.Stream = true // the socket always streams
	resp = x.admit(ctx, data, req, price)
	if resp.GetImmediateResponse() != nil {
		return c.refused(ctx, resp)
	}
	defer x.finish()
	// Only admitted work keeps a socket open: the idle time counts from
	// the end of its last response.
	defer c.idle.Reset(c.h.o.Idle)
	out := data
	if b := resp.GetRequestBody().GetResponse().GetBodyMutation().GetBody(); b != nil {
		out = b
	}
	if err := c.vendor.Write(ctx, websocket.MessageText, out); err != nil {
		x.status = http.StatusBadGateway // nothing produced, nothing charged
		c.lost(ctx)
		return false
	}
	return c.relay(ctx, x, fromClient, fromVendor)
}

// relay passes the vendor's events for the response x admitted to the
// client, each metered as one event of a stream, until its terminal event
// settles it; it reports whether the socket goes on.
func (c *socketConn) relay(ctx context.Context, x *exchange, fromClient, fromVendor chan socketMsg) bool {
	x.endpoint = c.endpoint
	started := false
	frame := make([]byte, 0, 4096)
	for {
		// One message may wait for this response's end; until it is
		// served no other is read, so Envoy and the client hold the rest.
		in := fromClient
		if c.waiting != nil {
			in = nil
		}
		var v socketMsg
		select {
		case v = <-fromVendor:
		case <-c.chat.cut:
			// Settled by finish with what was seen, as a client gone.
			c.cutOff()
			return false
		case m := <-in:
			if m.err != nil {
				// The client left mid-response; the vendor goes on with it.
				c.drain(ctx, x, fromVendor, !started, frame)
				c.vendor.Close(websocket.StatusNormalClosure, "")
				return false
			}
			c.waiting = &m
			continue
		}
		if v.err != nil {
			if !started {
				x.status = http.StatusBadGateway
			}
			c.lost(ctx)
			return false
		}
		typ, status, terminal, r := c.meter(ctx, x, v.data, !started, &frame)
		started = true
		if r.GetImmediateResponse() != nil {
			// The hold's lease was lost: nothing more is served.
			c.refuse(ctx, r)
			c.client.Close(websocket.StatusTryAgainLater, "the gateway lost its store; retry shortly")
			return false
		}
		err := c.client.Write(ctx, websocket.MessageText, c.scrub(v.data, typ, status, x.scrub))
		x.afterSend(ctx)
		if terminal {
			if x.stored != nil {
				if id, _ := x.stored.Response(); id != "" {
					c.remember(id)
				}
			}
			return err == nil
		}
		if err != nil {
			return false
		}
	}
}

// socketDrainWait bounds how long a response whose client left is still
// read from the vendor, for the vendor's own final usage.
const socketDrainWait = 5 * time.Second

// begin starts x's reply at the vendor's first event for it.
func (c *socketConn) begin(x *exchange, typ string, status int) {
	x.status = http.StatusOK
	if typ == "error" {
		x.status = cmp.Or(status, http.StatusInternalServerError)
	}
	x.servedBy(c.vendorKey)
	x.startReply("text/event-stream")
}

// meter runs one vendor event of x's response through the exchange as an
// event of a stream, the reply begun at the first; frame is reused from
// event to event.
func (c *socketConn) meter(ctx context.Context, x *exchange, data []byte, first bool, frame *[]byte) (typ string, status int, terminal bool, r *extprocv3.ProcessingResponse) {
	typ, status, _ = messageType(data)
	if first {
		c.begin(x, typ, status)
	}
	terminal = terminalEvent(typ)
	*frame = append(append(append((*frame)[:0], "data: "...), data...), '\n', '\n')
	return typ, status, terminal, x.responseBody(ctx, &extprocv3.HttpBody{Body: *frame, EndOfStream: terminal}, nil)
}

// drain meters the rest of a response whose client left: the vendor
// generates (and bills) it to its end, so its terminal event, with the
// vendor's usage, settles the response when it comes within
// socketDrainWait; otherwise finish settles it at what was seen, flagged
// as estimated. Nothing more is sent to the client.
func (c *socketConn) drain(ctx context.Context, x *exchange, fromVendor chan socketMsg, first bool, frame []byte) {
	wait := time.NewTimer(socketDrainWait)
	defer wait.Stop()
	for {
		var v socketMsg
		select {
		case v = <-fromVendor:
		case <-wait.C:
			return
		}
		if v.err != nil {
			return
		}
		_, _, terminal, r := c.meter(ctx, x, v.data, first, &frame)
		first = false
		if r.GetImmediateResponse() != nil || terminal {
			return
		}
	}
}

// scrub replaces a vendor error event refusing the gateway's credential
// (vendorrefusal.go) with the gateway's own; any other event is data.
// counted: the exchange has counted the refusal already.
func (c *socketConn) scrub(data []byte, typ string, status int, counted bool) []byte {
	if typ != "error" || !vendorRefusal(status) {
		return data
	}
	if !counted {
		c.h.s.metrics.vendorRefusals.WithLabelValues(c.upstream.Name).Inc()
		c.h.s.log.Warn("the vendor refused the gateway's credential", "upstream", c.upstream.Name, "status", status, "transport", TransportWebSocket)
	}
	return socketError(status, vendorRefusalBody(c.op.Format, status))
}

// lost ends a socket whose vendor side broke: the client hears it as an
// error event, then a close it can reconnect after (a new socket reaches
// whichever endpoint Envoy then picks).
func (c *socketConn) lost(ctx context.Context) {
	x := c.exchange()
	c.refuse(ctx, x.reject(format.Unavailable, "the connection to the vendor was lost; reconnect and retry", time.Second))
	c.client.Close(websocket.StatusInternalError, "the vendor closed the connection")
}
