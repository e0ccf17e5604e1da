package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

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
	create := func(session, extra string) string {
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
	accountKey := lastBetaKey(s, "POST", "/v1/responses")
	// A session whose key is not the account's.
	var id, creator string
	for i := 0; i < 32 && (creator == "" || creator == accountKey); i++ {
		id = create(fmt.Sprintf("session-%d", i), "")
		creator = lastBetaKey(s, "POST", "/v1/responses")
	}
	if creator == "" || creator == accountKey {
		t.Fatalf("no session steered off the account's key %q", accountKey)
	}

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
