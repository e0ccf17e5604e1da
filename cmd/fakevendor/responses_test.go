package main

import (
	"encoding/base64"
	"strings"
	"testing"
)

// A response's usage is predictable: input ceil(len(body)/8) plus the
// cache reads inside it, output the words plus the reasoning tokens; its
// items are a reasoning summary, the web searches asked for and the text;
// the stream's terminal event carries the same response.
func TestResponsesJSONAndStream(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","reasoning_tokens":7,"cache_read_tokens":5,"web_search_requests":2,"service_tier":"priority","reply_words":4}`)
	body := `{"model":"gpt-5","input":"Hello fake vendor"}`
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/responses", body)
	r := jsonObject(t, string(data))
	if str(t, r, "status") != "completed" || str(t, r, "service_tier") != "priority" ||
		num(t, r, "usage", "input_tokens") != ceil8(len(body))+5 || num(t, r, "usage", "input_tokens_details", "cached_tokens") != 5 ||
		num(t, r, "usage", "output_tokens") != 4+7 || num(t, r, "usage", "output_tokens_details", "reasoning_tokens") != 7 {
		t.Fatalf("response %s", data)
	}
	var types []string
	for i := range 4 {
		types = append(types, str(t, r, "output", i, "type"))
	}
	if strings.Join(types, ",") != "reasoning,web_search_call,web_search_call,message" || !strings.HasPrefix(str(t, r, "output", 3, "content", 0, "text"), "Echo:") {
		t.Fatalf("output %s", data)
	}

	_, data = tf.call("POST", tf.chatCompletions.URL+"/v1/responses", `{"model":"gpt-5","input":"Hello fake vendor","stream":true}`)
	evs := parseSSE(t, data)
	if evs[0].event != "response.created" || evs[len(evs)-1].event != "response.completed" {
		t.Fatalf("events %v", evs)
	}
	last := jsonObject(t, evs[len(evs)-1].data)
	if num(t, last, "response", "usage", "output_tokens") != 11 || num(t, last, "sequence_number") != len(evs)-1 {
		t.Fatalf("terminal %s", evs[len(evs)-1].data)
	}
}

// The other built-in tools' calls come as output items before the text:
// file searches, code interpreter calls spread over their containers,
// image generations.
func TestResponsesBuiltinToolCalls(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","file_search_calls":1,"code_interpreter_calls":3,"code_interpreter_containers":2,"image_generation_calls":1}`)
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/responses", `{"model":"gpt-5","input":"Use the tools"}`)
	r := jsonObject(t, string(data))
	var types, containers []string
	for i := range 6 {
		types = append(types, str(t, r, "output", i, "type"))
		if types[i] == "code_interpreter_call" {
			containers = append(containers, str(t, r, "output", i, "container_id"))
		}
	}
	if strings.Join(types, ",") != "file_search_call,code_interpreter_call,code_interpreter_call,code_interpreter_call,image_generation_call,message" ||
		strings.Join(containers, ",") != "cntr_fake_0,cntr_fake_1,cntr_fake_0" {
		t.Fatalf("output %s", data)
	}
}

// max_output_tokens below the reply ends it incomplete; fail_response
// fails it with its input billed.
func TestResponsesIncompleteAndFailed(t *testing.T) {
	tf := newTestFake(t, nil)
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/responses", `{"model":"m","input":"x","max_output_tokens":3}`)
	r := jsonObject(t, string(data))
	if str(t, r, "status") != "incomplete" || str(t, r, "incomplete_details", "reason") != "max_output_tokens" || num(t, r, "usage", "output_tokens") != 3 {
		t.Fatalf("incomplete %s", data)
	}
	tf.setControl(`{"format":"chat_completions","fail_response":true}`)
	_, data = tf.call("POST", tf.chatCompletions.URL+"/v1/responses", `{"model":"m","input":"x","stream":true}`)
	evs := parseSSE(t, data)
	last := jsonObject(t, evs[len(evs)-1].data)
	if evs[len(evs)-1].event != "response.failed" || num(t, last, "response", "usage", "output_tokens") != 0 || num(t, last, "response", "usage", "input_tokens") == 0 {
		t.Fatalf("failed %s", evs[len(evs)-1].data)
	}
}

// Stored responses: read back, streamed again, their input listed,
// continued, cancelled when in the background, deleted.
func TestStoredResponses(t *testing.T) {
	tf := newTestFake(t, nil)
	u := tf.chatCompletions.URL + "/v1/responses"
	_, data := tf.call("POST", u, `{"model":"m","input":"keep me"}`)
	id := str(t, jsonObject(t, string(data)), "id")
	if resp, got := tf.call("GET", u+"/"+id, ""); resp.StatusCode != 200 || str(t, jsonObject(t, string(got)), "id") != id {
		t.Fatalf("retrieve %d %s", resp.StatusCode, got)
	}
	if _, got := tf.call("GET", u+"/"+id+"?stream=true&starting_after=1", ""); parseSSE(t, got)[0].event != "response.output_item.added" {
		t.Fatalf("replay %s", got)
	}
	if _, got := tf.call("GET", u+"/"+id+"/input_items", ""); str(t, jsonObject(t, string(got)), "data", 0, "content", 0, "text") != "keep me" {
		t.Fatalf("input items %s", got)
	}
	if resp, got := tf.call("POST", u, `{"model":"m","input":"more","previous_response_id":"resp_nope"}`); resp.StatusCode != 404 {
		t.Fatalf("unknown previous id: %d %s", resp.StatusCode, got)
	}
	if resp, got := tf.call("POST", u+"/"+id+"/cancel", ""); resp.StatusCode != 400 {
		t.Fatalf("cancel of a foreground response: %d %s", resp.StatusCode, got)
	}

	// Background: queued, in progress for background_polls reads, then done.
	_, data = tf.call("POST", u, `{"model":"m","input":"later","background":true}`, "x-fake-controls", `{"background_polls":2}`)
	bg := jsonObject(t, string(data))
	if str(t, bg, "status") != "queued" || path(t, bg, "usage") != nil {
		t.Fatalf("background create %s", data)
	}
	var statuses []string
	for range 3 {
		_, got := tf.call("GET", u+"/"+str(t, bg, "id"), "")
		statuses = append(statuses, str(t, jsonObject(t, string(got)), "status"))
	}
	if strings.Join(statuses, ",") != "in_progress,in_progress,completed" {
		t.Fatalf("statuses %v", statuses)
	}
	_, data = tf.call("POST", u, `{"model":"m","input":"stop me","background":true}`, "x-fake-controls", `{"background_polls":5}`)
	c := jsonObject(t, string(data))
	_, got := tf.call("POST", u+"/"+str(t, c, "id")+"/cancel", "")
	cancelled := jsonObject(t, string(got))
	if str(t, cancelled, "status") != "cancelled" || num(t, cancelled, "usage", "output_tokens") != 0 || num(t, cancelled, "usage", "input_tokens") == 0 {
		t.Fatalf("cancel %s", got)
	}

	if resp, _ := tf.call("DELETE", u+"/"+id, ""); resp.StatusCode != 200 {
		t.Fatalf("delete %d", resp.StatusCode)
	}
	if resp, _ := tf.call("GET", u+"/"+id, ""); resp.StatusCode != 404 {
		t.Fatalf("retrieve after delete %d", resp.StatusCode)
	}
}

// Token counts, compaction and embeddings (floats or base64) with usage
// ceil(len(body)/8).
func TestInputTokensCompactEmbeddings(t *testing.T) {
	tf := newTestFake(t, nil)
	body := `{"model":"m","input":"count me"}`
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/responses/input_tokens", body)
	if num(t, jsonObject(t, string(data)), "input_tokens") != ceil8(len(body)) {
		t.Fatalf("input tokens %s", data)
	}
	_, data = tf.call("POST", tf.chatCompletions.URL+"/v1/responses/compact", body)
	if c := jsonObject(t, string(data)); str(t, c, "object") != "response.compaction" || num(t, c, "usage", "input_tokens") != ceil8(len(body)) || num(t, c, "usage", "output_tokens") != 5 {
		t.Fatalf("compact %s", data)
	}
	eb := `{"model":"text-embedding-3-small","input":["a","b"],"encoding_format":"base64"}`
	_, data = tf.call("POST", tf.chatCompletions.URL+"/v1/embeddings", eb)
	e := jsonObject(t, string(data))
	raw, err := base64.StdEncoding.DecodeString(str(t, e, "data", 1, "embedding"))
	if err != nil || len(raw) != 4*embeddingSize || num(t, e, "usage", "prompt_tokens") != ceil8(len(eb)) {
		t.Fatalf("embeddings %s", data)
	}
}
