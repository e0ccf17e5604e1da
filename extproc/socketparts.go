package extproc

// The WebSocket transport's parts beside its adapter (socket.go): the
// handler and its settings, its bounds beside admission (sockets per key,
// and a rate for what a socket costs the sidecar without being admitted,
// with the cut past it), the vendor's dial, and the readers that turn each
// side's socket into a channel.

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/config"
)

// SocketPrefix is where the sidecar's control listener serves the
// WebSocket transport: Envoy rewrites /NAME/PATH (an upgrade) to
// SocketPrefix + NAME + PATH.
const SocketPrefix = "/socket/"

// TransportWebSocket names the transport in the ledger; HTTP is "".
const TransportWebSocket = "websocket"

// defaultMaxSocketMessage bounds one client message when
// limits.max_request_bytes is unset.
const defaultMaxSocketMessage = 32 << 20

// SocketFallbackStatus answers an upgrade the vendor cannot take (an
// endpoint that speaks HTTP only): 426 Upgrade Required. Codex switches to
// HTTP for the session on it, and the SDKs raise at connect().
const SocketFallbackStatus = http.StatusUpgradeRequired

// SocketHandler serves the WebSocket transport of the operations that
// declare one.
func (s *Server) SocketHandler(o SocketOptions) http.Handler {
	o = o.withDefaults()
	return &socketHandler{s: s, o: o, open: keyCount{limit: o.PerKey}}
}

type socketHandler struct {
	s    *Server
	o    SocketOptions
	open keyCount
}

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

// withDefaults fills the options left zero.
func (o SocketOptions) withDefaults() SocketOptions {
	if o.Idle <= 0 {
		o.Idle = config.DefaultSocketIdle
	}
	if o.PerKey <= 0 {
		o.PerKey = config.DefaultSocketsPerKey
	}
	if o.PingsPerSecond <= 0 {
		o.PingsPerSecond = config.DefaultSocketPingsPerSecond
	}
	return o
}

// keyCount counts the sockets each key holds open, up to a bound.
type keyCount struct {
	mu    sync.Mutex
	limit int
	open  map[string]int
}

// take counts one more socket of key, unless it holds limit already.
func (k *keyCount) take(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open[key] >= k.limit {
		return false
	}
	if k.open == nil {
		k.open = map[string]int{}
	}
	k.open[key]++
	return true
}

// release counts a socket of key closed.
func (k *keyCount) release(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.open[key]--; k.open[key] <= 0 {
		delete(k.open, key)
	}
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

// messageLimit bounds one client message: limits.max_request_bytes, as
// over HTTP, or defaultMaxSocketMessage without it.
func messageLimit(maxBody int64) int64 {
	if maxBody <= 0 {
		return defaultMaxSocketMessage
	}
	return maxBody
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

// cutOff closes a socket over its rate of pings and refused messages.
func (c *socketConn) cutOff() {
	c.h.s.metrics.socketCuts.Inc()
	c.h.s.log.Warn("socket closed: over its rate of pings and refused messages",
		"upstream", c.ln.Upstream(), "key", c.ln.KeyID(), "per_second", c.h.o.PingsPerSecond)
	c.vendor.Close(websocket.StatusNormalClosure, "")
	c.client.Close(websocket.StatusPolicyViolation, "more than "+strconv.Itoa(c.h.o.PingsPerSecond)+" pings and refused messages a second")
}

// dial opens the line's vendor socket through Envoy's relay, steered to
// the line's key cluster, with what the vendor hears of the client's
// handshake; what served it is recorded on the line.
func (h *socketHandler) dial(ctx context.Context, ln *line, handshake http.Header) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	vendor, resp, err := websocket.Dial(ctx, "ws://"+h.o.Relay+"/"+ln.Upstream()+ln.Sub, &websocket.DialOptions{HTTPHeader: ln.Forwarded(handshake)})
	if err != nil {
		return nil, resp, err
	}
	vendor.SetReadLimit(-1) // the vendor's events: a final response can be large
	ln.Served(resp.Header)
	return vendor, resp, nil
}

// readVendor makes vendor the line's vendor socket, read into a channel
// of its own; the one before, if any, is closed at once with its reader
// (ending a read closes the socket): no call runs on it (a call moves the
// line before it is sent), and a close handshake would hold the call
// until the vendor answered it.
func (c *socketConn) readVendor(ctx context.Context, vendor *websocket.Conn) {
	if c.vendor != nil {
		c.stopVendor()
		c.vendor.CloseNow()
	}
	c.vendor = vendor
	ctx, c.stopVendor = context.WithCancel(ctx)
	c.fromVendor = make(chan socketMsg, 64)
	go reader(ctx, c.vendor, c.fromVendor)
}

// next reads a call's next vendor event from the vendor socket's
// channel; false once the socket failed or ctx ended.
func next(fromVendor <-chan socketMsg) func(context.Context) ([]byte, bool) {
	return func(ctx context.Context) ([]byte, bool) {
		select {
		case v := <-fromVendor:
			return v.data, v.err == nil
		case <-ctx.Done():
			return nil, false
		}
	}
}
