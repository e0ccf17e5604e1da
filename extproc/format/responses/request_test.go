package responses

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
)

func TestParseRequestAccepts(t *testing.T) {
	formattest.CheckAccepts(t, Format{}.ParseRequest, []struct {
		Name, Body string
		Want       format.Request
	}{
		{"minimal", `{"model":"gpt-5","input":"hi"}`, format.Request{Model: "gpt-5"}},
		{"codex", string(formattest.Read(t, "request.json")), format.Request{Model: "gpt-5.1-codex", Stream: true, MaxTokens: 4096, HasMaxTokens: true, Session: "abc",
			HasTools: true, NoStore: true, Own: Fields{PaidTools: true, MaxToolCalls: 3, HasMaxToolCalls: true}}},
		{"background, continued", `{"model":"o3-deep-research","background":true,"previous_response_id":"resp_abc-1","store":true}`,
			format.Request{Model: "o3-deep-research", Background: true, Refs: []format.Ref{{Kind: format.StoredResponse, ID: "resp_abc-1"}}, Own: Fields{PreviousResponseID: "resp_abc-1"}}},
		{"function tools only", `{"model":"m","tools":[{"type":"function","name":"f"}]}`, format.Request{Model: "m", HasTools: true}},
		{"dated web search", `{"model":"m","tools":[{"type":"web_search_preview_2025_03_11"}]}`, format.Request{Model: "m", HasTools: true, Own: Fields{PaidTools: true}}},
		{"nulls", `{"model":"m","max_output_tokens":null,"previous_response_id":null,"store":null,"max_tool_calls":null,"conversation":null}`, format.Request{Model: "m"}},
		{"zero tool calls", `{"model":"m","max_tool_calls":0}`, format.Request{Model: "m", Own: Fields{HasMaxToolCalls: true}}},
	})
}

func TestParseRequestRejects(t *testing.T) {
	formattest.CheckRejects(t, Format{}.ParseRequest, []struct{ Name, Body, Param, Msg string }{
		{"no model", `{"input":"hi"}`, "model", "required"},
		{"bad limit", `{"model":"m","max_output_tokens":0}`, "max_output_tokens", "positive"},
		{"bad store", `{"model":"m","store":"no"}`, "store", "boolean"},
		{"bad background", `{"model":"m","background":1}`, "background", "boolean"},
		{"bad previous id", `{"model":"m","previous_response_id":"../x"}`, "previous_response_id", "response id"},
		{"previous id too long", `{"model":"m","previous_response_id":"` + string(make([]byte, 0)) + longID + `"}`, "previous_response_id", "response id"},
		{"negative tool calls", `{"model":"m","max_tool_calls":-1}`, "max_tool_calls", "non-negative"},
		{"repeated key", `{"model":"m","model":"n"}`, "model", "more than once"},
		{"not an object", `[1]`, "", "JSON object"},
	})
}

var longID = "resp_" + string(bytesOf('a', MaxIDBytes))

func bytesOf(c byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = c
	}
	return b
}

func FuzzParseRequest(f *testing.F) {
	seeds := []string{
		`{"model":"m","previous_response_id":"resp_1","background":true,"tools":[{"type":"web_search"}],"max_tool_calls":2}`,
		`{"model":"m","input":[{"type":"item_reference","id":"msg_1"},{"id":"rs_1"},{"type":null,"id":"x"},{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"e"}]}`,
		`{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}],"tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`,
		`{"model":"m","conversation":{"id":"conv_1"},"prompt":{"id":"pmpt_1"},"tools":[{"type":"code_interpreter","container":"cntr_1"}]}`,
	}
	formattest.FuzzParse(f, Format{}.ParseRequest, seeds, func(t *testing.T, body []byte, req format.Request, doc map[string]any) {
		if doc["model"] != req.Model {
			t.Fatalf("model %q, document %v", req.Model, doc["model"])
		}
		own, _ := req.Own.(Fields)
		if p, _ := doc["previous_response_id"].(string); p != own.PreviousResponseID {
			t.Fatalf("previous_response_id %q, document %v", own.PreviousResponseID, doc["previous_response_id"])
		}
		if n, ok := doc["max_output_tokens"].(float64); ok != req.HasMaxTokens || ok && int64(n) != req.MaxTokens {
			t.Fatalf("max_output_tokens %d %v, document %v", req.MaxTokens, req.HasMaxTokens, doc["max_output_tokens"])
		}
		if s, ok := doc["store"].(bool); ok && s == req.NoStore {
			t.Fatalf("store %v, NoStore %v", s, req.NoStore)
		}
		// Every reference the parse lists is a valid id, once; every
		// item_reference the document holds is among them.
		for i, r := range req.Refs {
			if !ValidID(r.ID) || slices.Contains(req.Refs[:i], r) {
				t.Fatalf("ref %+v in %+v", r, req.Refs)
			}
		}
		items, _ := doc["input"].([]any)
		for _, it := range items {
			m, _ := it.(map[string]any)
			if id, ok := m["id"].(string); ok && m["type"] == "item_reference" && !slices.Contains(req.Refs, format.Ref{Kind: format.StoredItem, ID: id}) {
				t.Fatalf("item_reference %q not in %+v", id, req.Refs)
			}
		}
		_ = json.Valid(body)
	})
}

func TestFoldedKeysRefused(t *testing.T) {
	formattest.CheckFoldedKeys(t, Format{}.ParseRequest, "application/json", requestQuery.Paths())
}
