package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
)

// betaKeyOf names the beta pool key whose secret a recorded request
// carried as its bearer token, "" for none.
func betaKeyOf(rec launch.Record) string {
	secret := strings.TrimPrefix(header(rec.Headers, "authorization"), "Bearer ")
	for _, k := range poolKeys {
		if launch.PoolSecret("beta", k) == secret {
			return k
		}
	}
	return ""
}

// A key pinned to an account serves that account on every way to the
// vendor, not only over HTTP: its WebSocket is dialled on its key (the
// socket is steered as an HTTP request is), and its background response,
// never read by the client, is polled with the key that created it (at the
// vendor, another key's organisation reads 404 and the response would be
// settled at an estimate). Every ledger entry names the key; no other
// account reaches it.
func TestPinnedTenantOnEveryPath(t *testing.T) {
	s, a := startPinned(t, "beta", func(c *config.Config) {
		c.Limits.BackgroundPoll = config.Duration(100 * time.Millisecond)
	})
	b := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")

	// Sockets of both accounts, each marked by its client request id (a
	// handshake header the vendor hears), one response each.
	const sockets = 4
	for i := range sockets {
		for _, c := range []struct{ who, key string }{{"pin-a", a.Key}, {"pin-b", b.Key}} {
			w := mustDialSocket(t, s, c.key, map[string]string{"x-client-request-id": fmt.Sprintf("%s-%d", c.who, i)})
			if evs := w.create(`{"model":"gpt-6-sol","input":"hi"}`); evs[len(evs)-1].Type != "response.completed" {
				t.Fatalf("%s socket %d: %s", c.who, i, evs[len(evs)-1].raw)
			}
			w.c.Close(websocket.StatusNormalClosure, "")
		}
	}
	// A's background response, left to the reconcilers.
	id := createBackground(t, s, a.Key, `{"background_polls":2}`)
	waitUnparked(t, s, a.ID, id)
	s.WaitSettled()

	dialled := map[string]map[string]int{} // owner → key → vendor sockets
	polls := map[string]int{}              // key → reads of A's background response
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, rec := range f.Requests() {
			if rec.Format != config.FormatChatCompletions || rec.Method != "GET" {
				continue
			}
			switch {
			case rec.Path == "/v1/responses":
				owner := header(rec.Headers, "x-client-request-id")
				if i := strings.LastIndexByte(owner, '-'); i > 0 {
					owner = owner[:i] // "pin-a-3" → "pin-a"
				}
				if dialled[owner] == nil {
					dialled[owner] = map[string]int{}
				}
				dialled[owner][betaKeyOf(rec)]++
			case rec.Path == "/v1/responses/"+id:
				polls[betaKeyOf(rec)]++
			}
		}
	}
	if dialled["pin-a"]["k3"] != sockets || len(dialled["pin-a"]) != 1 {
		t.Errorf("A's vendor sockets by key %v; want all %d on its pinned k3", dialled["pin-a"], sockets)
	}
	if dialled["pin-b"]["k3"] != 0 || len(dialled["pin-b"]) == 0 {
		t.Errorf("B's vendor sockets by key %v; want them on shared keys, never k3", dialled["pin-b"])
	}
	if polls["k3"] == 0 || len(polls) != 1 {
		t.Errorf("reads of A's background response by key %v; want every one with k3, the key that created it", polls)
	}

	entries := allLedgerEntries(t, s, a.ID)
	var onSocket, background int
	for _, e := range entries {
		if e.VendorKey != "k3" {
			t.Errorf("A's ledger entry %s names vendor key %q; want k3", e.RequestID, e.VendorKey)
		}
		switch {
		case e.Transport == "websocket":
			onSocket++
		case e.Estimated:
			t.Errorf("A's background response settled at an estimate (%+v): its reads did not reach the key that created it", e.Settlement)
		default:
			background++
		}
	}
	if onSocket != sockets || background != 1 {
		t.Errorf("A's ledger: %d socket responses and %d background; want %d and 1", onSocket, background, sockets)
	}
	for _, e := range allLedgerEntries(t, s, b.ID) {
		if e.VendorKey == "k3" || e.VendorKey == "" {
			t.Errorf("B's ledger entry %s names vendor key %q; want a shared key", e.RequestID, e.VendorKey)
		}
	}
	if n, _, _ := s.Store.OpenHolds(context.Background(), a.ID); n != 0 {
		t.Errorf("%d of A's holds left open", n)
	}
}
