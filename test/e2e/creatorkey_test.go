package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// lastBetaKey names the pool key of the newest request a fake recorded on
// method and path, "" for none.
func lastBetaKey(s *launch.Stack, method, path string) string {
	key := ""
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, rec := range f.Requests() {
			if rec.Format == config.FormatChatCompletions && rec.Method == method && rec.Path == path {
				key = betaKeyOf(rec)
			}
		}
	}
	return key
}

// In a shared pool steered by sessions, a stored response lives with the
// key that created it: its retrieval and a continuation naming it, sent
// without the session, go to that key and not to the one the account's
// requests are steered to.
func TestStoredResponseReadWithItsCreatingKey(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3})
	a := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	id, creator, accountKey, create := responseOffTheAccountsKey(t, s, a)

	resp, body := s.Do("GET", responsesPath+"/"+id, chatCompletionsHeaders(a.Key), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("retrieval: %d %s", resp.StatusCode, body)
	}
	if got := lastBetaKey(s, "GET", "/v1/responses/"+id); got != creator {
		t.Errorf("retrieval of %s served by %q; want %q, which created it (the account's key is %q)", id, got, creator, accountKey)
	}
	create("", `,"previous_response_id":"`+id+`"`)
	if got := lastBetaKey(s, "POST", "/v1/responses"); got != creator {
		t.Errorf("continuation of %s served by %q; want %q, which created it (the account's key is %q)", id, got, creator, accountKey)
	}
}

// A socket's call naming a stored response another vendor key created
// moves the socket to that key (the vendor keeps the response for it
// alone, and answers previous_response_not_found elsewhere); the socket
// stays on it, and the ledger names it.
func TestSocketMovesToTheCreatingKey(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3})
	a := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	id, creator, accountKey, _ := responseOffTheAccountsKey(t, s, a)

	w := mustDialSocket(t, s, a.Key, nil)
	socketBilled(t, w.create(`{"model":"gpt-6-sol","input":"first"}`))
	if got := lastBetaKey(s, "WS", "/v1/responses"); got != accountKey {
		t.Fatalf("the socket's first response served by %q; want the account's key %q", got, accountKey)
	}
	for i, body := range []string{
		`{"model":"gpt-6-sol","input":"more","previous_response_id":"` + id + `"}`,
		`{"model":"gpt-6-sol","input":"again"}`,
	} {
		evs := w.create(body)
		if last := evs[len(evs)-1]; last.Type != "response.completed" {
			t.Fatalf("call %d after the first: %s", i+1, last.raw)
		}
		if got := lastBetaKey(s, "WS", "/v1/responses"); got != creator {
			t.Errorf("call %d after the first served by %q; want %q, which created %s", i+1, got, creator, id)
		}
	}
	w.c.Close(websocket.StatusNormalClosure, "")
	s.WaitSettled()
	keys := map[string]int{}
	for _, e := range allLedgerEntries(t, s, a.ID) {
		if e.Transport == "websocket" {
			keys[e.VendorKey]++
		}
	}
	if keys[accountKey] != 1 || keys[creator] != 2 || len(keys) != 2 {
		t.Errorf("the socket's ledger entries by vendor key %v; want 1 on %s and 2 on %s", keys, accountKey, creator)
	}
}

// responseOffTheAccountsKey creates stored responses in sessions until one
// is created by a pool key other than the one the account's requests
// without a session go to; create makes another (in a session, with extra
// fields).
func responseOffTheAccountsKey(t *testing.T, s *launch.Stack, a launch.Account) (id, creator, accountKey string, create func(session, extra string) string) {
	t.Helper()
	create = func(session, extra string) string {
		t.Helper()
		h := chatCompletionsHeaders(a.Key)
		if session != "" {
			h["x-claude-code-session-id"] = session
		}
		resp, reply := s.Do("POST", responsesPath, h, []byte(`{"model":"gpt-6-sol","input":"hi"`+extra+`}`))
		var r struct{ ID string }
		if resp.StatusCode != 200 || json.Unmarshal(reply, &r) != nil || r.ID == "" {
			t.Fatalf("create in session %q: %d %s", session, resp.StatusCode, reply)
		}
		return r.ID
	}
	create("", "")
	accountKey = lastBetaKey(s, "POST", "/v1/responses")
	// A session whose key is not the account's.
	for i := 0; i < 32 && (creator == "" || creator == accountKey); i++ {
		id = create(fmt.Sprintf("session-%d", i), "")
		creator = lastBetaKey(s, "POST", "/v1/responses")
	}
	if creator == "" || creator == accountKey {
		t.Fatalf("no session steered off the account's key %q", accountKey)
	}
	return id, creator, accountKey, create
}

// A stored response created through a shared key before its account was
// pinned to a key of its own stays with the shared key's vendor account:
// after the restart that pins the account, its retrieval and continuations
// (over HTTP and on the socket) are answered 404 saying why, and never
// reach the shared key: the pin holds on every path.
func TestStoredResponseBehindANewPin(t *testing.T) {
	rs := redistest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { rdb.Close() })
	a := newAccountIn(t, store.New(rdb, store.Options{}), pricing.NanoUSD(100))

	before := launchtest.Start(t, launch.Options{Pool: 3, RedisAddr: rs.Addr})
	waitHealthRoute(t, before, "primary")
	resp, reply := before.Do("POST", responsesPath, chatCompletionsHeaders(a.Key), []byte(`{"model":"gpt-6-sol","input":"hi"}`))
	var created struct{ ID string }
	if resp.StatusCode != 200 || json.Unmarshal(reply, &created) != nil || created.ID == "" {
		t.Fatalf("create: %d %s", resp.StatusCode, reply)
	}
	creator := lastBetaKey(before, "POST", "/v1/responses")
	own := poolKeys[0]
	if own == creator {
		own = poolKeys[1]
	}

	// The same store, the account now pinned to a key other than the one
	// that created its response.
	after := launchtest.Start(t, launch.Options{Pool: 3, RedisAddr: rs.Addr, Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			for j := range c.Upstreams[i].VendorKeys {
				if k := &c.Upstreams[i].VendorKeys[j]; k.Name == own {
					k.Accounts = []string{a.ID}
				}
			}
		}
	}})
	waitHealthRoute(t, after, "primary")
	crossed := func(what string, status int, body, retry string) {
		t.Helper()
		if status != 404 || !strings.Contains(body, created.ID) || !strings.Contains(body, "no longer use") || retry != "false" {
			t.Errorf("%s of %s (created through %s, the account now pinned to %s): %d %s, x-should-retry %q; want 404 saying why, not to be retried",
				what, created.ID, creator, own, status, body, retry)
		}
	}
	resp, reply = after.Do("GET", responsesPath+"/"+created.ID, chatCompletionsHeaders(a.Key), nil)
	crossed("retrieval", resp.StatusCode, string(reply), resp.Header.Get("x-should-retry"))
	resp, reply = after.Do("POST", responsesPath, chatCompletionsHeaders(a.Key),
		[]byte(`{"model":"gpt-6-sol","input":"more","previous_response_id":"`+created.ID+`"}`))
	crossed("HTTP continuation", resp.StatusCode, string(reply), resp.Header.Get("x-should-retry"))
	w := mustDialSocket(t, after, a.Key, nil)
	evs := w.create(`{"model":"gpt-6-sol","input":"more","previous_response_id":"` + created.ID + `"}`)
	if e := evs[len(evs)-1]; e.Type != "error" {
		t.Errorf("socket continuation: %s; want an error event", e.raw)
	} else {
		crossed("socket continuation", e.Status, e.Error.Message, e.Headers["x-should-retry"])
	}
	// The socket goes on, on the account's own key.
	socketBilled(t, w.create(`{"model":"gpt-6-sol","input":"afresh"}`))
	w.c.Close(websocket.StatusNormalClosure, "")

	for _, f := range []*launch.Fake{after.Primary, after.Reserve} {
		for _, rec := range f.Requests() {
			if k := betaKeyOf(rec); rec.Format == config.FormatChatCompletions && k != "" && k != own {
				t.Errorf("%s %s reached %s; the pinned account's requests go to %s alone", rec.Method, rec.Path, k, own)
			}
		}
	}
}
