package extproc

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/keypool"
)

// errorSocketVendor answers every response.create with one error event,
// from the vendor key it names in its handshake's reply as Envoy's relay
// does.
type errorSocketVendor struct {
	key, event string
}

func (f *errorSocketVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("x-gateway-vendor-key", f.key)
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	for {
		if _, _, err := c.Read(r.Context()); err != nil {
			return
		}
		if c.Write(r.Context(), websocket.MessageText, []byte(f.event)) != nil {
			return
		}
	}
}

// A vendor's error event on a socket is judged by the pool's blame table
// as an HTTP refusal of the same status and body is: a key-scoped one cools
// or takes out the key that served the socket, a request-scoped one leaves
// it active.
func TestSocketErrorEventsBlameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, event, state string
	}{
		{"rate limit", `{"type":"error","status":429,"error":{"type":"requests","code":"rate_limit_exceeded","message":"Rate limit reached","param":null}}`, keypool.Cooling},
		{"remaining 0", `{"type":"error","status":429,"headers":{"x-ratelimit-remaining-requests":"0","x-ratelimit-limit-requests":"500"},"error":{"type":"requests","code":null,"message":"slow down","param":null}}`, keypool.Cooling},
		{"invalid key", `{"type":"error","status":401,"error":{"type":"invalid_request_error","code":"invalid_api_key","message":"Incorrect API key provided","param":null}}`, keypool.Disabled},
		{"insufficient quota", `{"type":"error","status":429,"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"You exceeded your current quota","param":null}}`, keypool.Disabled},
		{"request too large", `{"type":"error","status":429,"error":{"type":"tokens","code":"rate_limit_exceeded","message":"Request too large for gpt-4o-mini","param":null}}`, keypool.Active},
		{"bad request", `{"type":"error","status":400,"error":{"type":"invalid_request_error","code":"previous_response_not_found","message":"Previous response not found","param":null}}`, keypool.Active},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, url, _ := socketRigWith(t, &errorSocketVendor{key: "k2", event: tc.event}, SocketOptions{}, nil)
			r.upstream.Pool = keypool.New(r.upstream.Name, []keypool.Key{{Name: "k1", Cluster: "beta_k1"}, {Name: "k2", Cluster: "beta_k2"}}, keypool.Options{CoolDown: time.Minute, MaxCoolDown: time.Hour, ProbeInterval: time.Hour})
			c := dialRig(t, url, r.key)
			evs, err := exchangeEvents(t, c, `{"type":"response.create","model":"gpt-4o-mini","input":"hi"}`)
			if err != nil || len(evs) != 1 {
				t.Fatalf("events %v %v", evs, err)
			}
			if got := r.upstream.Pool.State("k2"); got != tc.state {
				t.Fatalf("key state after %s: %s, want %s", tc.name, got, tc.state)
			}
			if got := r.upstream.Pool.State("k1"); got != keypool.Active {
				t.Fatalf("the key that did not serve: %s", got)
			}
			c.Close(websocket.StatusNormalClosure, "")
			r.srv.Wait(context.Background())
		})
	}
}
