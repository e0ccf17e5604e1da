package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Every way a body names an object the vendor keeps behind the one vendor
// key, through Envoy: a stored response and the items of one are forwarded
// for the account they are bound to and refused (404, the vendor's words)
// for any other; files, vector stores, containers, skills, prompts,
// conversations and earlier audio replies, which no account can own, are
// refused for everyone. Nothing refused reaches the vendor.
func TestStoredObjectReferences(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	owner := s.NewAccount(100, noLimits)
	other := s.NewAccount(100, noLimits)
	const model = "gpt-6-sol"
	ctx := context.Background()

	// The owner's stored response, with a reasoning item and a message.
	h := chatCompletionsHeaders(owner.Key)
	h["x-fake-controls"] = `{"reasoning_tokens":30}`
	resp, reply := s.Do("POST", responsesPath, h, []byte(fmt.Sprintf(`{"model":%q,"input":"Remember this."}`, model)))
	if resp.StatusCode != 200 {
		t.Fatalf("create: %d %s", resp.StatusCode, reply)
	}
	var created struct {
		ID     string
		Output []struct{ ID, Type string }
	}
	mustJSON(t, reply, &created)
	var msgID, rsID string
	var items []string
	for _, it := range created.Output {
		items = append(items, it.ID)
		switch it.Type {
		case "message":
			msgID = it.ID
		case "reasoning":
			rsID = it.ID
		}
	}
	if created.ID == "" || msgID == "" || rsID == "" {
		t.Fatalf("reply names no response, message or reasoning item: %s", reply)
	}
	// The response and its items are bound by the gateway as its reply
	// passes (the items before its last chunk goes).
	for _, id := range items {
		if got, err := s.Store.ResponseOwner(ctx, id); err != nil || got != owner.ID {
			t.Fatalf("item %s bound to %q (%v), want the owner %s", id, got, err, owner.ID)
		}
	}

	body := func(fields string) string {
		return fmt.Sprintf(`{"model":%q,%s}`, model, fields)
	}
	input := func(item string) string {
		return body(`"input":[{"role":"user","content":"more"},` + item + `]`)
	}
	bound := []struct{ name, path, body string }{
		{"previous_response_id", responsesPath, body(fmt.Sprintf(`"input":"more","previous_response_id":%q`, created.ID))},
		{"item_reference", responsesPath, input(fmt.Sprintf(`{"type":"item_reference","id":%q}`, msgID))},
		{"untyped item", responsesPath, input(fmt.Sprintf(`{"id":%q}`, msgID))},
		{"null type", responsesPath, input(fmt.Sprintf(`{"type":null,"id":%q}`, msgID))},
		{"reasoning without its content", responsesPath, input(fmt.Sprintf(`{"type":"reasoning","id":%q,"summary":[]}`, rsID))},
		{"approval_request_id", responsesPath, input(fmt.Sprintf(`{"type":"mcp_approval_response","approval_request_id":%q,"approve":true}`, msgID))},
		{"comparison_response_id", responsesPath, body(fmt.Sprintf(`"input":"more","prompt_cache_options":{"comparison_response_id":%q}`, created.ID))},
		{"item_reference, token count", responsesPath + "/input_tokens", input(fmt.Sprintf(`{"type":"item_reference","id":%q}`, msgID))},
	}
	refused := func(who string, path, body, param string) {
		t.Helper()
		before := clientRequests(s)
		resp, out := s.Do("POST", path, chatCompletionsHeaders(who), []byte(body))
		var e struct {
			Error struct {
				Message, Type string
				Param         *string
			}
		}
		if resp.StatusCode != 404 || json.Unmarshal(out, &e) != nil || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "not found") {
			t.Errorf("%s: %d %s, want 404 not found", body, resp.StatusCode, out)
		}
		if param != "" && (e.Error.Param == nil || *e.Error.Param != param) {
			t.Errorf("%s: param %v, want %q", body, e.Error.Param, param)
		}
		if after := clientRequests(s); after != before {
			t.Errorf("%s: the vendor received %d requests", body, after-before)
		}
	}
	for _, rq := range bound {
		t.Run(rq.name, func(t *testing.T) {
			refused(other.Key, rq.path, rq.body, "")
			if resp, out := s.Do("POST", rq.path, chatCompletionsHeaders(owner.Key), []byte(rq.body)); resp.StatusCode != 200 {
				t.Errorf("owner: %d %s", resp.StatusCode, out)
			}
		})
	}
	// An item nobody bound is nobody's.
	refused(owner.Key, responsesPath, input(`{"type":"item_reference","id":"msg_nobody"}`), "")

	for _, rq := range []struct{ name, path, body, param string }{
		{"input_file", responsesPath, input(`{"role":"user","content":[{"type":"input_file","file_id":"file-abc"}]}`), "input[1].content[0].file_id"},
		{"input_image", responsesPath, input(`{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_image","file_id":"file-img"}]}`), "input[1].content[1].file_id"},
		{"file_search", responsesPath, body(`"input":"x","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]`), "tools[0].vector_store_ids"},
		{"container id", responsesPath, body(`"input":"x","tools":[{"type":"code_interpreter","container":"cntr_1"}]`), "tools[0].container"},
		{"container files", responsesPath, body(`"input":"x","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-1"]}}]`), "tools[0].container.file_ids"},
		{"prompt", responsesPath, body(`"prompt":{"id":"pmpt_1","version":"1"}`), "prompt.id"},
		{"conversation", responsesPath, body(`"input":"x","conversation":"conv_1"`), "conversation"},
		{"conversation object", responsesPath, body(`"input":"x","conversation":{"id":"conv_1"}`), "conversation.id"},
		{"conversation, token count", responsesPath + "/input_tokens", body(`"input":"x","conversation":"conv_1"`), "conversation"},
		{"chat file", betaPath, fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-abc"}}]}]}`, betaModel),
			"messages[0].content[0].file.file_id"},
		{"chat audio", betaPath, fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"},{"role":"assistant","audio":{"id":"audio_1"}}]}`, betaModel),
			"messages[1].audio.id"},
	} {
		t.Run(rq.name, func(t *testing.T) {
			refused(owner.Key, rq.path, rq.body, rq.param)
			refused(other.Key, rq.path, rq.body, rq.param)
		})
	}

	// Neither account paid for a refusal: the owner's create and the
	// turns it was forwarded, the other account nothing.
	entries, _, err := s.Store.Ledger(ctx, owner.ID, "", 50)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + len(bound) - 1; len(entries) != want { // the token count is free
		t.Errorf("owner: %d ledger entries, want %d", len(entries), want)
	}
	if o, _, _ := s.Store.Ledger(ctx, other.ID, "", 10); len(o) != 0 {
		t.Errorf("the other account was billed: %+v", o)
	}
}
