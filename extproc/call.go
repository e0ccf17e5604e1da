package extproc

// The transport-neutral call: one metered request as a transport hands it
// over (a body in, the reply's events back, an end), with admission,
// metering, binding and settlement behind it. A line is the connection
// that carries a transport's calls, one at a time: its key, its operation
// and the vendor key steering chose for it. Neither knows a wire of its
// own: the operation's declaration (operation.Socket) names the messages,
// events and paths; the answers are bytes and Refusals, never the
// processor's messages to Envoy.

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/keypool"
)

// lineLocalIDs bounds the ids of responses created on one line that it
// remembers (store: false continuations).
const lineLocalIDs = 1024

// A line is one client connection to one operation's transport.
type line struct {
	s         *Server
	u         *Upstream
	op        *operation.Operation
	path      *operation.Path
	sock      *operation.Socket
	transport string
	creds     auth.Headers
	// Sub is the vendor path after the upstream's prefix.
	Sub string
	// KeyCluster names the aggregate that tries the key steering chose
	// first; "" without a pool. served is what served the line's vendor
	// connection, each call's reply begun from it (its status apart).
	KeyCluster string
	served     replyHead

	mu    sync.Mutex
	key   account.Key
	local map[string]bool // responses created on the line
}

// openLine opens a line on path (/NAME/ and the vendor path) for the
// client's credentials, steered by its session marker; a refusal says
// why not.
func (s *Server) openLine(ctx context.Context, path, transport string, creds auth.Headers, session string) (*line, *Refusal) {
	ln := &line{s: s, u: s.upstream(path), transport: transport, creds: creds, local: map[string]bool{}}
	if ln.u == nil {
		// As net/http's NotFound: no upstream's format applies.
		return nil, &Refusal{Status: http.StatusNotFound, Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"},
			"X-Content-Type-Options": {"nosniff"}}, Body: []byte("404 page not found\n")}
	}
	ln.Sub = path[len(ln.u.prefix)-1:]
	x := ln.exchange()
	key, err := s.keys.Authenticate(ctx, creds, x.started, modelPolicy)
	if err != nil {
		return nil, x.refuseAuth(err)
	}
	ln.key = key
	op, vp, _ := operation.Match(ln.u.Operations, "POST", ln.Sub)
	if vp == nil || vp.Kind != operation.Metered || op.Socket == nil || op.Socket.Path != ln.Sub {
		return nil, ln.Refuse(format.NotFound, "no such path: GET "+ln.Sub, 0)
	}
	ln.op, ln.path, ln.sock = op, vp, op.Socket
	// Steered as an HTTP request is: the account's key (or its
	// session's), so that a pinned account's line is served by its own key.
	if p := ln.u.Pool; p != nil {
		ln.KeyCluster = p.Choose(key.AccountID, bound(session)).Cluster
	}
	return ln, nil
}

// KeyID is the line's client key.
func (ln *line) KeyID() string {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.key.ID
}

// Upstream names the line's upstream.
func (ln *line) Upstream() string { return ln.u.Name }

func (ln *line) exchange() *exchange {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return &exchange{s: ln.s, upstream: ln.u, op: ln.op, path: ln.path, key: ln.key, started: ln.s.now(),
		intake: intake{contentType: "application/json"}, transport: ln.transport, localRef: ln.isLocal}
}

// Refuse is a refusal of kind in the line's format.
func (ln *line) Refuse(kind format.ErrorKind, msg string, retryAfter time.Duration) *Refusal {
	return ln.exchange().reject(kind, msg, retryAfter)
}

// Fallback answers a connection the vendor cannot take on this transport,
// so that the client uses HTTP at once.
func (ln *line) Fallback() *Refusal {
	ln.s.metrics.rejections.WithLabelValues(ln.u.Name, format.InvalidRequest.Reason()).Inc()
	body := ln.u.Format.ErrorBody(&format.Error{Kind: format.InvalidRequest,
		Message: "the " + ln.transport + " transport is not available on this upstream; use HTTP (POST " + ln.Sub + ")"})
	return &Refusal{Status: SocketFallbackStatus, Header: http.Header{"Content-Type": {"application/json"}, "Upgrade": {"HTTP/1.1"}}, Body: body}
}

// DialRefused answers a client whose vendor connection failed with err,
// the vendor's reply resp (nil: none came); a vendor that does not speak
// the transport there gets the client to fall back.
func (ln *line) DialRefused(resp *http.Response, err error) *Refusal {
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	switch {
	case status == http.StatusServiceUnavailable || status == 0:
		ln.s.log.Warn("vendor connection failed", "upstream", ln.u.Name, "status", status, "transport", ln.transport, "err", err)
		return ln.Refuse(format.Unavailable, "the vendor is unavailable; retry shortly", time.Second)
	case vendorRefusal(status):
		ln.credentialRefused(status)
		return newRefusal(status, "application/json", vendorRefusalBody(ln.u.Format, status), 0)
	case status >= 500:
		return ln.Refuse(format.Unavailable, "the vendor is unavailable; retry shortly", time.Second)
	}
	return ln.Fallback() // the endpoint does not speak the transport (404, 405, 426...)
}

// Served records what served the line's vendor connection, as the headers
// of the relay's reply name it: the endpoint, the vendor key and the
// address Envoy connected to (which says the endpoint where the contract
// carries no host metadata: begin reads it as over HTTP).
func (ln *line) Served(h http.Header) {
	ln.served = replyHead{endpoint: h.Get("x-gateway-endpoint"), key: h.Get("x-gateway-vendor-key"),
		address: h.Get("x-gateway-upstream-address")}
}

// ErrorEvent is a refusal as the transport's error event.
func (ln *line) ErrorEvent(r *Refusal) []byte { return ln.sock.ErrorEvent(r.Status, r.Header, r.Body) }

// Unsupported is the refusal of a client message of type typ that starts
// no call.
func (ln *line) Unsupported(typ string) *Refusal {
	return ln.Refuse(format.InvalidRequest, "unsupported event type "+strconv.Quote(typ)+"; the client sends "+ln.sock.Create, 0)
}

// Notice passes on a vendor message outside any call (a notice before the
// vendor closes) as it is, but for a refusal of the credential.
func (ln *line) Notice(data []byte) []byte {
	typ, status, _ := MessageType(data)
	return ln.scrub(data, typ, status, false)
}

func (ln *line) isLocal(id string) bool {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return ln.local[id]
}

func (ln *line) remember(id string) {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	if len(ln.local) >= lineLocalIDs {
		clear(ln.local)
	}
	ln.local[id] = true
}

// scrub replaces a vendor error event refusing the gateway's credential
// (vendorrefusal.go) with the gateway's own; any other event is data.
// counted: the exchange has counted the refusal already.
func (ln *line) scrub(data []byte, typ string, status int, counted bool) []byte {
	if typ != ln.sock.Error || !vendorRefusal(status) {
		return data
	}
	if !counted {
		ln.credentialRefused(status)
	}
	return ln.sock.ErrorEvent(status, nil, vendorRefusalBody(ln.op.Format, status))
}

// credentialRefused counts and logs a vendor's refusal (of status) of the
// gateway's credential on the line.
func (ln *line) credentialRefused(status int) {
	ln.s.metrics.vendorRefusals.WithLabelValues(ln.u.Name).Inc()
	ln.s.log.Warn("the vendor refused the gateway's credential", "upstream", ln.u.Name, "status", status, "transport", ln.transport)
}

// A call is one metered request on a line.
type call struct {
	ln      *line
	x       *exchange
	started bool   // the vendor's first event has come
	frame   []byte // the event as a stream's, reused
}

// Call starts a call for a client message of type typ carrying body: a
// message of another type is refused, the call's key is checked, its body
// admitted; out is what the vendor is sent. A refusal finishes the call
// (nil) and, with final set, the line.
func (ln *line) Call(ctx context.Context, typ string, body []byte) (c *call, out []byte, r *Refusal, final bool) {
	if typ != ln.sock.Create {
		return nil, nil, ln.Unsupported(typ), false
	}
	c, r, final = ln.Start(ctx)
	if r == nil {
		out, r = c.Admit(ctx, body)
	}
	if r != nil {
		c.Finish()
		return nil, nil, r, final
	}
	return c, out, nil, false
}

// Start begins a call: the key checked again (the key cache's time) and
// the refusals that hold whatever the request. A refusal with final set
// ends the line (the key is gone for good). Finish must follow a call.
func (ln *line) Start(ctx context.Context) (c *call, r *Refusal, final bool) {
	ln.s.active.Add(1)
	c = &call{ln: ln, x: ln.exchange()}
	key, err := ln.s.keys.Authenticate(ctx, ln.creds, c.x.started, modelPolicy)
	if err != nil {
		var ae *auth.Error
		return c, c.x.refuseAuth(err), !errors.As(err, &ae) || ae.Reason != auth.Unavailable
	}
	ln.mu.Lock()
	ln.key = key
	ln.mu.Unlock()
	c.x.key = key
	return c, c.x.refusedAtHeaders(), false // as over HTTP, before the body is read
}

// Admit checks and admits the call's body exactly as over HTTP; out is the
// body to send the vendor.
func (c *call) Admit(ctx context.Context, body []byte) (out []byte, r *Refusal) {
	x := c.x
	if r := x.checkRequest(ctx, body); r != nil {
		return nil, r
	}
	if x.req.Background {
		return nil, c.ln.Refuse(format.InvalidRequest, "background: background responses are not supported over "+c.ln.transport+"; use POST "+c.ln.Sub, 0)
	}
	x.req.Stream = true // a line's replies are always events
	if r := x.admit(ctx); r != nil {
		return nil, r
	}
	return x.sentBody(), nil
}

// Elsewhere names the aggregate the call must be served through when a
// stored response it names was created by another vendor key than the
// line's: the vendor keeps it for that key alone. "" when the line's key
// will do. The adapter moves the line there.
func (c *call) Elsewhere() string {
	if k := c.x.creator; k != "" && k != c.ln.served.key {
		return keyClusterOf(c.ln.u, k)
	}
	return ""
}

// Event meters one vendor event of the call's reply as a chunk of a
// stream (replyChunk, as over HTTP), the reply begun at the first with
// what served the line; out is what the client is sent, end whether the
// event ends the reply. A refusal ends the call: its hold's lease was
// lost.
func (c *call) Event(ctx context.Context, data []byte) (out []byte, end bool, r *Refusal) {
	x := c.x
	typ, status, _ := MessageType(data)
	var head *replyHead
	if !c.started {
		c.started = true
		h := c.ln.served
		h.status = http.StatusOK
		if typ == c.ln.sock.Error {
			h.status = cmp.Or(status, http.StatusInternalServerError)
		}
		head = &h
	}
	end = c.ln.sock.Ended(typ)
	c.frame = append(append(append(c.frame[:0], "data: "...), data...), '\n', '\n')
	_, _, r = x.replyChunk(ctx, head, c.frame, end)
	if typ == c.ln.sock.Error && status != 0 { // judged whether or not the call goes on
		c.ln.s.vendorErrorEvent(c.ln.u, x.vendorKey, x.key.AccountID, status, data, x.started)
	}
	if r != nil {
		return nil, true, r
	}
	return c.ln.scrub(data, typ, status, x.scrub), end, nil
}

// Sent runs once an event's out has been handed to the client (or could
// not be): a reply that has ended settles here, and its response is
// remembered as the line's.
func (c *call) Sent(ctx context.Context, end bool) {
	c.x.afterSend(ctx)
	if end && c.x.stored != nil {
		if id, _ := c.x.stored.Response(); id != "" {
			c.ln.remember(id)
		}
	}
}

// drainWait bounds how long a call whose client left is still read from
// the vendor, for the vendor's own final usage.
const drainWait = 5 * time.Second

// Drain meters the rest of a call whose client left, each vendor event
// from next (false: no more): the vendor generates (and bills) the reply
// to its end, so its last event, with the vendor's usage, settles the
// call when it comes within drainWait; otherwise Finish settles it at what
// was seen, flagged as estimated. Nothing is sent to the client.
func (c *call) Drain(ctx context.Context, next func(context.Context) ([]byte, bool)) {
	wait, cancel := context.WithTimeout(ctx, drainWait)
	defer cancel()
	for {
		data, ok := next(wait)
		if !ok {
			return
		}
		if _, end, r := c.Event(ctx, data); end || r != nil {
			return
		}
	}
}

// Lost marks a call whose vendor connection broke: before any event,
// nothing was produced and nothing is charged.
func (c *call) Lost() {
	if !c.started {
		c.x.status = http.StatusBadGateway
	}
}

// Finish ends the call, settling an admitted request still open with what
// was observed (client gone, vendor gone).
func (c *call) Finish() {
	c.x.finish()
	c.ln.s.active.Done()
}

// messageQuery reads what a line needs of a message: its type, and the
// status of an error event.
var messageQuery = jsonscan.NewQuery("type", "status")

// MessageType returns a message's "type" and, for an error event, its
// "status"; ok is false when the message is not a JSON object.
func MessageType(data []byte) (typ string, status int, ok bool) {
	var t, st jsonscan.Value
	err := messageQuery.Scan(data, func(path int, v jsonscan.Value) error {
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

// markerPatterns are keypool.Markers as expressions on an event's bytes.
var markerPatterns = func() []*regexp.Regexp {
	out := make([]*regexp.Regexp, len(keypool.Markers))
	for i, m := range keypool.Markers {
		out[i] = regexp.MustCompile(m.Pattern())
	}
	return out
}()

// vendorErrorEvent judges a vendor's error event on a line as Envoy's log
// of a refused HTTP attempt is judged (KeyAttempt): the event's status,
// the first marker its body holds, and the rate-limit headers it carries
// (an object "headers", when the vendor sends one), by the blame table.
func (s *Server) vendorErrorEvent(u *Upstream, key, accountID string, status int, data []byte, sent time.Time) {
	if u.Pool == nil || key == "" {
		return
	}
	marker := ""
	for i, p := range markerPatterns {
		if p.Match(data) {
			marker = keypool.Markers[i].Name
			break
		}
	}
	hdr := eventHeaders(data)
	header := func(name string) string {
		if name == keypool.ErrorHeader {
			return marker
		}
		return hdr[strings.ToLower(name)]
	}
	s.judgeAttempt(u, key, accountID, status, header, sent)
}

// eventHeaders reads an event's "headers" object of strings.
func eventHeaders(data []byte) map[string]string {
	var ev struct {
		Headers map[string]any `json:"headers"`
	}
	if !bytes.Contains(data, []byte(`"headers"`)) || json.Unmarshal(data, &ev) != nil {
		return nil
	}
	out := make(map[string]string, len(ev.Headers))
	for k, v := range ev.Headers {
		switch v := v.(type) {
		case string:
			out[strings.ToLower(k)] = v
		case float64:
			out[strings.ToLower(k)] = strconv.FormatFloat(v, 'f', -1, 64)
		}
	}
	return out
}

// Forwarded is what the vendor hears of a client's handshake headers:
// those the upstream forwards (forward.go), as over HTTP, and the
// aggregate of the steered key; the handshake's own are the dialer's.
func (ln *line) Forwarded(h http.Header) http.Header {
	out := http.Header{}
	for k, vs := range h {
		k = strings.ToLower(k)
		if transportHeader(k) || !ln.u.forward.allows(k) || strings.HasPrefix(k, "sec-websocket-") {
			continue
		}
		out[k] = vs
	}
	if ln.KeyCluster != "" {
		out.Set(config.KeyClusterHeader, ln.KeyCluster)
	}
	return out
}
