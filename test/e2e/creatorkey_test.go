package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/config"
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
