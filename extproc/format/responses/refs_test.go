package responses

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
)

func item(id string) format.Ref     { return format.Ref{Kind: format.StoredItem, ID: id} }
func response(id string) format.Ref { return format.Ref{Kind: format.StoredResponse, ID: id} }

// Each way a body names a stored response or an item of one is listed for
// the processor to check against the account; an item bringing its own
// content is not a reference, and what names nothing is forwarded as it is.
func TestParseRequestRefs(t *testing.T) {
	in := func(items ...string) string {
		return `{"model":"m","input":[` + strings.Join(items, ",") + `]}`
	}
	formattest.CheckAccepts(t, Format{}.ParseRequest, []struct {
		Name, Body string
		Want       format.Request
	}{
		{"item_reference", in(`{"type":"item_reference","id":"msg_1"}`), format.Request{Model: "m", Refs: []format.Ref{item("msg_1")}}},
		{"untyped", in(`{"id":"msg_1"}`), format.Request{Model: "m", Refs: []format.Ref{item("msg_1")}}},
		{"null type", in(`{"type":null,"id":"rs_1"}`), format.Request{Model: "m", Refs: []format.Ref{item("rs_1")}}},
		// Without a type the vendor may read the id: fail closed.
		{"untyped with content", in(`{"role":"user","content":"hi","id":"msg_2"}`), format.Request{Model: "m", Refs: []format.Ref{item("msg_2")}}},
		{"reasoning without its content", in(`{"type":"reasoning","id":"rs_1","summary":[]}`), format.Request{Model: "m", Refs: []format.Ref{item("rs_1")}}},
		{"reasoning, null content", in(`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":null}`), format.Request{Model: "m", Refs: []format.Ref{item("rs_1")}}},
		{"message without content", in(`{"type":"message","id":"msg_3","role":"assistant"}`), format.Request{Model: "m", Refs: []format.Ref{item("msg_3")}}},
		{"function call without arguments", in(`{"type":"function_call","id":"fc_1","call_id":"c","name":"f"}`), format.Request{Model: "m", Refs: []format.Ref{item("fc_1")}}},
		{"built-in tool call", in(`{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"q"}}`), format.Request{Model: "m", Refs: []format.Ref{item("ws_1")}}},
		{"unknown type", in(`{"type":"future_item","id":"fi_1","content":"x"}`), format.Request{Model: "m", Refs: []format.Ref{item("fi_1")}}},
		{"approval", in(`{"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true}`), format.Request{Model: "m", Refs: []format.Ref{item("mcpr_1")}}},
		{"comparison response", `{"model":"m","prompt_cache_options":{"comparison_response_id":"resp_9"}}`, format.Request{Model: "m", Refs: []format.Ref{response("resp_9")}}},
		{"in order, once", `{"model":"m","previous_response_id":"resp_1","input":[{"id":"msg_1"},{"type":"item_reference","id":"msg_1"},{"id":"rs_2"}]}`,
			format.Request{Model: "m", Refs: []format.Ref{response("resp_1"), item("msg_1"), item("rs_2")}, Own: Fields{PreviousResponseID: "resp_1"}}},

		{"items with their content", in(
			`{"type":"message","id":"msg_1","role":"assistant","content":[{"type":"output_text","text":"hi"}]}`,
			`{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAA"}`,
			`{"type":"function_call","id":"fc_1","call_id":"c","name":"f","arguments":"{}"}`,
			`{"type":"function_call_output","id":"fco_1","call_id":"c","output":"ok"}`,
			`{"type":"custom_tool_call","id":"ctc_1","call_id":"c","name":"f","input":"x"}`,
			`{"type":"compaction","id":"cmp_1","encrypted_content":"gAAA"}`,
			`{"type":"mcp_approval_response","id":"mcpa_1","approve":false}`,
		), format.Request{Model: "m"}},
		{"items without ids", in(`{"type":"reasoning","summary":[]}`, `{"role":"user","content":"hi"}`, `{"type":"web_search_call","id":null}`, `"text"`),
			format.Request{Model: "m"}},
		{"content sent inline", in(`{"role":"user","content":[{"type":"input_file","file_data":"data:application/pdf;base64,AA==","filename":"a.pdf"},` +
			`{"type":"input_image","image_url":"https://example.com/a.png","file_id":null}]}`), format.Request{Model: "m"}},
		{"tools naming nothing", `{"model":"m","tools":[{"type":"file_search","vector_store_ids":[]},{"type":"code_interpreter","container":{"type":"auto","file_ids":[]}},` +
			`{"type":"shell","environment":{"type":"container_auto","skills":[{"type":"inline","name":"n","description":"d","source":{}}]}},{"type":"image_generation","input_image_mask":{"image_url":"data:,"}}]}`,
			format.Request{Model: "m", HasTools: true, Own: Fields{PaidTools: true}}},
		{"nulls", `{"model":"m","prompt":null,"conversation":null,"prompt_cache_options":{"comparison_response_id":null},"tools":[{"type":"file_search","vector_store_ids":null}]}`,
			format.Request{Model: "m", HasTools: true, Own: Fields{PaidTools: true}}},
	})
}

// An object no account can own is refused with the vendor's 404, naming
// the parameter and what to send instead.
func TestParseRequestUnbound(t *testing.T) {
	for _, tc := range []struct{ name, body, param, msg string }{
		{"input_file", `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"x"},{"type":"input_file","file_id":"file-abc"}]}]}`,
			"input[0].content[1].file_id", `File with id "file-abc" not found. Files are not available through this gateway: send the file's content`},
		{"input_image", `{"model":"m","input":[{"role":"user","content":"x"},{"role":"user","content":[{"type":"input_image","file_id":"file-img"}]}]}`,
			"input[1].content[0].file_id", `File with id "file-img" not found.`},
		{"function output file", `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":[{"type":"input_file","file_id":"file-1"}]}]}`,
			"input[0].output[0].file_id", `File with id "file-1"`},
		{"screenshot", `{"model":"m","input":[{"type":"computer_call_output","call_id":"c","output":{"type":"computer_screenshot","file_id":"file-2"}}]}`,
			"input[0].output.file_id", `File with id "file-2"`},
		{"shell call container", `{"model":"m","input":[{"type":"shell_call_output","call_id":"c","output":[]},{"type":"shell_call","call_id":"c","action":{},"environment":{"type":"container_reference","container_id":"cntr_1"}}]}`,
			"input[1].environment.container_id", `Container with id "cntr_1" not found. Containers are not available`},
		{"vector store", `{"model":"m","tools":[{"type":"web_search"},{"type":"file_search","vector_store_ids":["vs_1","vs_2"]}]}`,
			"tools[1].vector_store_ids", `Vector store with id "vs_1" not found. Vector stores are not available`},
		{"container id", `{"model":"m","tools":[{"type":"code_interpreter","container":"cntr_2"}]}`, "tools[0].container", `Container with id "cntr_2"`},
		{"container files", `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":["file-3"]}}]}`,
			"tools[0].container.file_ids", `File with id "file-3"`},
		{"container skill", `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto","skills":[{"type":"skill_reference","skill_id":"skill_1"}]}}]}`,
			"tools[0].container.skills", `Skill with id "skill_1" not found. Stored skills are not available`},
		{"shell container", `{"model":"m","tools":[{"type":"shell","environment":{"type":"container_reference","container_id":"cntr_3"}}]}`,
			"tools[0].environment.container_id", `Container with id "cntr_3"`},
		{"shell files", `{"model":"m","tools":[{"type":"shell","environment":{"type":"container_auto","file_ids":["file-4"]}}]}`,
			"tools[0].environment.file_ids", `File with id "file-4"`},
		{"shell skill", `{"model":"m","tools":[{"type":"shell","environment":{"type":"container_auto","skills":[{"type":"skill_reference","skill_id":"skill_2"}]}}]}`,
			"tools[0].environment.skills", `Skill with id "skill_2"`},
		{"image mask", `{"model":"m","tools":[{"type":"image_generation","input_image_mask":{"file_id":"file-5"}}]}`,
			"tools[0].input_image_mask.file_id", `File with id "file-5"`},
		{"prompt", `{"model":"m","prompt":{"id":"pmpt_1","version":"2","variables":{"x":"y"}}}`,
			"prompt.id", `Prompt with id "pmpt_1" not found. Stored prompts are not available through this gateway: send the instructions`},
		{"conversation", `{"model":"m","conversation":"conv_1"}`,
			"conversation", `Conversation with id "conv_1" not found. Conversations are not available through this gateway: continue a response with previous_response_id`},
		{"conversation object", `{"model":"m","conversation":{"id":"conv_2"}}`, "conversation.id", `Conversation with id "conv_2"`},
		{"first named", `{"model":"m","conversation":"conv_3","prompt":{"id":"pmpt_2"}}`, "conversation", `"conv_3"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, parse := range map[string]func([]byte) error{
				"create": func(b []byte) error { _, err := Format{}.ParseRequest(b, "application/json"); return err },
				"count":  func(b []byte) error { _, err := References(b); return err },
			} {
				var fe *format.Error
				if err := parse([]byte(tc.body)); !errors.As(err, &fe) || fe.Kind != format.NotFound || fe.Param != tc.param || !strings.Contains(fe.Message, tc.msg) {
					t.Errorf("%s: got %v (%+v), want 404 on %s saying %q", name, err, fe, tc.param, tc.msg)
				}
			}
		})
	}
}

// A reference of the wrong shape is a 400 naming it, and any 400 comes
// before a 404, as the vendor checks a body's shape before it looks up
// what the body names.
func TestParseRequestRefsRejects(t *testing.T) {
	var many strings.Builder
	many.WriteString(`{"model":"m","input":[`)
	for i := range MaxRefs + 1 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"id":"msg_%d"}`, i)
	}
	many.WriteString(`]}`)
	formattest.CheckRejects(t, Format{}.ParseRequest, []struct{ Name, Body, Param, Msg string }{
		{"item id a number", `{"model":"m","input":[{"type":"item_reference","id":5}]}`, "input[0].id", "must be a string"},
		{"item id malformed", `{"model":"m","input":["x",{"id":"../msg"}]}`, "input[1].id", "must be an item id"},
		{"item type a number", `{"model":"m","input":[{"type":5,"id":"msg_1"}]}`, "input[0].type", "must be a string"},
		{"approval id", `{"model":"m","input":[{"type":"mcp_approval_response","approval_request_id":true,"approve":true}]}`, "input[0].approval_request_id", "must be an item id"},
		{"file id a number", `{"model":"m","input":[{"role":"user","content":[{"type":"input_file","file_id":7}]}]}`, "input[0].content[0].file_id", "must be a file id"},
		{"vector stores a string", `{"model":"m","tools":[{"type":"file_search","vector_store_ids":"vs_1"}]}`, "tools[0].vector_store_ids", "must be an array"},
		{"vector store a number", `{"model":"m","tools":[{"type":"file_search","vector_store_ids":[1]}]}`, "tools[0].vector_store_ids", "must be a vector store id"},
		{"container a number", `{"model":"m","tools":[{"type":"code_interpreter","container":1}]}`, "tools[0].container", "must be a container id"},
		{"container files an object", `{"model":"m","tools":[{"type":"code_interpreter","container":{"type":"auto","file_ids":{}}}]}`, "tools[0].container.file_ids", "must be an array"},
		{"prompt a string", `{"model":"m","prompt":"pmpt_1"}`, "prompt", "must be an object"},
		{"prompt without id", `{"model":"m","prompt":{"version":"1"}}`, "prompt.id", "must be a prompt id"},
		{"conversation a number", `{"model":"m","conversation":5}`, "conversation", "must be a conversation id"},
		{"conversation without id", `{"model":"m","conversation":{}}`, "conversation.id", "must be a conversation id"},
		{"comparison id", `{"model":"m","prompt_cache_options":{"comparison_response_id":"a b"}}`, "prompt_cache_options.comparison_response_id", "must be a response id"},
		{"400 before 404", `{"model":"m","conversation":"conv_1","store":"yes"}`, "store", "boolean"},
		{"model before 404", `{"conversation":"conv_1"}`, "model", "required"},
		{"too many", many.String(), "input", "more than 256 stored items"},
	})
}

// A token count names stored objects as a create does, without a model.
func TestReferences(t *testing.T) {
	refs, err := References([]byte(`{"input":[{"type":"item_reference","id":"msg_1"}],"previous_response_id":"resp_1"}`))
	if err != nil || len(refs) != 2 || refs[0] != item("msg_1") || refs[1] != response("resp_1") {
		t.Fatalf("%+v %v", refs, err)
	}
	if refs, err := References([]byte(`{"input":"hi"}`)); err != nil || refs != nil {
		t.Fatalf("%+v %v", refs, err)
	}
	for _, body := range []string{`{"previous_response_id":5}`, `{"input":[{"id":"a b"}]}`, `nope`} {
		if _, err := References([]byte(body)); err == nil {
			t.Errorf("%s accepted", body)
		}
	}
}

// Reading references costs a request that names none nothing more than
// its other fields: two allocations (as before references were read),
// whatever its size.
func TestParseRequestAllocations(t *testing.T) {
	body := formattest.BigRequest(`{"model":"gpt-5","stream":true,"tools":[{"type":"function","name":"f"}],"input":[`, 10<<10)
	formattest.CheckParseAllocs(t, Format{}.ParseRequest, body, 2)
}
