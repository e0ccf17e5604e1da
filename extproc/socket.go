package extproc

// The WebSocket transport: an adapter over a line and its calls (call.go).
// The handshake opens the line (the key checked, the vendor key steered)
// and the vendor's socket through Envoy's relay listener (which adds the
// vendor credential); each client message is one call, each vendor message
// an event of its reply. Its settings and bounds: socketparts.go.

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/auth"
)

func (h *socketHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(SocketPrefix, "/"))
	creds := auth.Headers{XAPIKey: r.Header.Values("x-api-key"), Authorization: r.Header.Values("authorization")}
	ln, refusal := h.s.openLine(r.Context(), path, TransportWebSocket, creds, r.Header.Get(sessionHeader))
	switch {
	case refusal != nil:
	case !strings.EqualFold(r.Header.Get("upgrade"), "websocket"):
		refusal = ln.Refuse(format.InvalidRequest, "GET "+ln.Sub+" is the WebSocket transport: send Upgrade: websocket, or POST "+ln.Sub, 0)
	case h.o.Disabled[ln.Upstream()]:
		refusal = ln.Fallback()
	case !h.open.take(ln.KeyID()):
		h.s.metrics.socketRefusals.Inc()
		refusal = ln.Refuse(format.RateLimited, "this key has "+strconv.Itoa(h.o.PerKey)+
			" WebSocket connections open on this gateway, the most it may; close one (or send over HTTP) and retry", time.Second)
	}
	if refusal != nil {
		refusal.Write(w)
		return
	}
	defer h.open.release(ln.KeyID())
	// The vendor's socket first: if it cannot be had, the client hears why
	// before its upgrade is accepted.
	vendor, resp, err := h.dial(r.Context(), ln, r.Header)
	if err != nil {
		ln.DialRefused(resp, err).Write(w)
		return
	}
	chat := newChatter(h.o.PingsPerSecond, h.s.now())
	client, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true,
		OnPingReceived: func(context.Context, []byte) bool { return chat.spend(h.s.now()) }})
	if err != nil {
		vendor.CloseNow()
		return
	}
	sc := &socketConn{h: h, ln: ln, client: client, chat: chat, handshake: r.Header}
	sc.run(context.WithoutCancel(r.Context()), vendor)
}

// socketConn is one client socket and its vendor socket.
type socketConn struct {
	h              *socketHandler
	ln             *line
	client, vendor *websocket.Conn
	waiting        *socketMsg // the one client message read while a call runs
	chat           *chatter
	idle           *time.Timer
	cur            *call // the call running
	handshake      http.Header
	fromVendor     chan socketMsg
	stopVendor     context.CancelFunc // ends the vendor socket's reader
}

// run serves the socket, its vendor side on vendor until a call moves it,
// until either side closes it or it idles out: one call at a time, and
// while it runs one more client message read at most (back-pressure:
// Envoy and the client hold the rest).
func (c *socketConn) run(ctx context.Context, vendor *websocket.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() { c.vendor.CloseNow() }() // the line's last
	defer c.client.CloseNow()
	c.client.SetReadLimit(messageLimit(c.h.s.maxBody))
	fromClient := make(chan socketMsg) // unbuffered: the reader holds at most the one message it read
	go reader(ctx, c.client, fromClient)
	c.readVendor(ctx, vendor)
	c.h.s.metrics.sockets.Inc()
	defer c.h.s.metrics.sockets.Dec()
	c.idle = time.NewTimer(c.h.o.Idle) // reset only by the end of an admitted call
	defer c.idle.Stop()
	defer c.end() // a call cut by the socket's end settles with what was seen
	for {
		if c.cur == nil && c.waiting != nil {
			m := *c.waiting
			c.waiting = nil
			if !c.message(ctx, m) {
				return
			}
			continue
		}
		in, idle := fromClient, c.idle.C
		if c.cur != nil {
			idle = nil
			if c.waiting != nil {
				in = nil
			}
		}
		select {
		case m := <-in:
			switch {
			case m.err != nil && c.cur != nil: // the client left mid-response; the vendor goes on with it
				c.cur.Drain(ctx, next(c.fromVendor))
				fallthrough
			case m.err != nil: // the client closed (or broke) its socket
				c.vendor.Close(websocket.StatusNormalClosure, "")
				return
			case c.cur != nil:
				c.waiting = &m
			case !c.message(ctx, m):
				return
			}
		case v := <-c.fromVendor:
			if !c.vendorMessage(ctx, v) {
				return
			}
		case <-c.chat.cut: // a call running settles with what was seen, as a client gone
			c.cutOff()
			return
		case <-idle:
			c.vendor.Close(websocket.StatusNormalClosure, "")
			c.client.Close(websocket.StatusNormalClosure, "idle for "+c.h.o.Idle.String())
			return
		}
	}
}

// message handles one client message: a call started, or a refusal;
// false ends the socket.
func (c *socketConn) message(ctx context.Context, m socketMsg) bool {
	if m.typ != websocket.MessageText {
		c.client.Close(websocket.StatusUnsupportedData, "binary messages are not accepted; send JSON text")
		return false
	}
	typ, _, ok := MessageType(m.data)
	if !ok {
		c.client.Close(websocket.StatusInvalidFramePayloadData, "not a JSON object")
		return false
	}
	call, out, r, final := c.ln.Call(ctx, typ, m.data)
	switch {
	case final: // the key is gone for good: so is the socket
		return c.fail(ctx, r, websocket.StatusPolicyViolation, "the key was refused")
	case r != nil:
		return c.refused(ctx, r)
	}
	c.cur = call
	if to := call.Elsewhere(); to != "" && !c.move(ctx, to) {
		return c.lost(ctx)
	}
	if err := c.vendor.Write(ctx, websocket.MessageText, out); err != nil {
		return c.lost(ctx)
	}
	return true
}

// move serves the line through the aggregate cluster from here on, on a
// vendor socket of its own: the call names a stored response another
// vendor key created, which the vendor keeps for that key alone.
func (c *socketConn) move(ctx context.Context, cluster string) bool {
	c.ln.KeyCluster = cluster
	vendor, _, err := c.h.dial(ctx, c.ln, c.handshake)
	if err != nil {
		return false
	}
	c.readVendor(ctx, vendor)
	return true
}

// refused sends a refusal as an error event, the socket open, and counts
// it against the socket's rate; false ends the socket (cut).
func (c *socketConn) refused(ctx context.Context, r *Refusal) bool {
	c.client.Write(ctx, websocket.MessageText, c.ln.ErrorEvent(r))
	if c.chat.spend(c.h.s.now()) {
		return true
	}
	c.cutOff()
	return false
}

// vendorMessage passes a vendor message to the client: an event of the
// call running, or a notice outside any; false ends the socket.
func (c *socketConn) vendorMessage(ctx context.Context, v socketMsg) bool {
	switch {
	case v.err != nil && c.cur != nil:
		return c.lost(ctx)
	case v.err != nil:
		c.client.Close(websocket.StatusInternalError, "the vendor closed the connection")
		return false
	case c.cur == nil:
		c.client.Write(ctx, websocket.MessageText, c.ln.Notice(v.data))
		return true
	}
	out, end, r := c.cur.Event(ctx, v.data)
	if r != nil { // the hold's lease was lost: nothing more is served
		return c.fail(ctx, r, websocket.StatusTryAgainLater, "the gateway lost its store; retry shortly")
	}
	err := c.client.Write(ctx, websocket.MessageText, out)
	c.cur.Sent(ctx, end)
	if end {
		c.end()
	}
	return err == nil
}

// end finishes the call running, if any; the idle time counts from the
// end of the last admitted call.
func (c *socketConn) end() {
	if c.cur != nil {
		c.cur.Finish()
		c.cur = nil
		c.idle.Reset(c.h.o.Idle)
	}
}

// lost ends a socket whose vendor side broke: the call running produced
// nothing if it had no event yet; the client hears it as an error event,
// then a close it can reconnect after (a new socket reaches whichever
// endpoint Envoy then picks). It reports false.
func (c *socketConn) lost(ctx context.Context) bool {
	c.cur.Lost()
	r := c.ln.Refuse(format.Unavailable, "the connection to the vendor was lost; reconnect and retry", time.Second)
	return c.fail(ctx, r, websocket.StatusInternalError, "the vendor closed the connection")
}

// fail sends a refusal as an error event and closes the socket with code;
// it reports false.
func (c *socketConn) fail(ctx context.Context, r *Refusal, code websocket.StatusCode, reason string) bool {
	c.client.Write(ctx, websocket.MessageText, c.ln.ErrorEvent(r))
	c.client.Close(code, reason)
	return false
}
