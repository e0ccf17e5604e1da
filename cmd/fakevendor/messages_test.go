package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const messagesSimple = `{"model":"alpha-large","max_tokens":100,"messages":[{"role":"user","content":"Hello big world"}]}`

func TestMessagesMessage(t *testing.T) {
	tf := newTestFake(t, nil)
	resp, data := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	if got := resp.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("content-type %q", got)
	}
	if got := resp.Header.Get("X-Fake-Vendor"); got != "primary" {
		t.Errorf("x-fake-vendor %q", got)
	}
	if got := resp.Header.Get("request-id"); !strings.HasPrefix(got, "req_") {
		t.Errorf("request-id %q", got)
	}
	m := jsonObject(t, string(data))
	if got := keys(t, m); got != "content,id,model,role,stop_reason,stop_sequence,type,usage" {
		t.Errorf("message keys %s", got)
	}
	if !strings.HasPrefix(str(t, m, "id"), "msg_") || str(t, m, "type") != "message" || str(t, m, "role") != "assistant" {
		t.Errorf("bad envelope %v", m)
	}
	if str(t, m, "model") != "alpha-large" || str(t, m, "stop_reason") != "end_turn" || path(t, m, "stop_sequence") != nil {
		t.Errorf("bad model or stop %v", m)
	}
	if got := keys(t, path(t, m, "content", 0)); got != "text,type" {
		t.Errorf("text block keys %s", got)
	}
	want := "Echo: Hello big world Hello big world Hello big world Hello big"
	if got := str(t, m, "content", 0, "text"); got != want || str(t, m, "content", 0, "type") != "text" {
		t.Errorf("text %q, want %q", got, want)
	}
	u := path(t, m, "usage")
	if got := keys(t, u); got != "cache_creation,cache_creation_input_tokens,cache_read_input_tokens,input_tokens,output_tokens,service_tier" {
		t.Errorf("usage keys %s", got)
	}
	if num(t, u, "input_tokens") != ceil8(len(messagesSimple)) || num(t, u, "output_tokens") != 12 ||
		num(t, u, "cache_read_input_tokens") != 0 || num(t, u, "cache_creation_input_tokens") != 0 {
		t.Errorf("usage %v", u)
	}
}

func TestMessagesMaxTokensAndReplyWords(t *testing.T) {
	tf := newTestFake(t, nil)
	body := `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"one two three four"}]}`
	_, data := tf.call("POST", tf.messages.URL+"/v1/messages", body)
	m := jsonObject(t, string(data))
	if str(t, m, "content", 0, "text") != "Echo: one two" || num(t, m, "usage", "output_tokens") != 3 || str(t, m, "stop_reason") != "max_tokens" {
		t.Errorf("capped reply %s", data)
	}

	tf.setControl(`{"format":"messages","reply_words":4}`)
	body = `{"model":"m","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image","source":{}},{"type":"text","text":"b"}]}]}`
	_, data = tf.call("POST", tf.messages.URL+"/v1/messages", body)
	m = jsonObject(t, string(data))
	if str(t, m, "content", 0, "text") != "Echo: a b a" || str(t, m, "stop_reason") != "end_turn" {
		t.Errorf("4-word reply %s", data)
	}

	// No user text at all: filler words.
	body = `{"model":"m","messages":[{"role":"user","content":[]}]}`
	_, data = tf.call("POST", tf.messages.URL+"/v1/messages", body)
	m = jsonObject(t, string(data))
	if str(t, m, "content", 0, "text") != "Echo: lorem ipsum dolor" {
		t.Errorf("filler reply %s", data)
	}
}

func TestMessagesCacheControls(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"messages","cache_read_tokens":70,"cache_write_tokens":30}`)
	_, data := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple)
	m := jsonObject(t, string(data))
	if num(t, m, "usage", "cache_read_input_tokens") != 70 || num(t, m, "usage", "cache_creation_input_tokens") != 30 ||
		num(t, m, "usage", "cache_creation", "ephemeral_5m_input_tokens") != 30 || num(t, m, "usage", "input_tokens") != ceil8(len(messagesSimple)) {
		t.Errorf("cache usage %s", data)
	}
}

// messagesStream posts a streaming request and returns its events.
func messagesStream(t *testing.T, tf *testFake, body string) []sseEvent {
	t.Helper()
	resp, data := tf.call("POST", tf.messages.URL+"/v1/messages", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, "text/event-stream") {
		t.Errorf("content-type %q", got)
	}
	if got := resp.Header.Get("Cache-Control"); got != "no-cache" {
		t.Errorf("cache-control %q", got)
	}
	evs := parseSSE(t, data)
	for _, ev := range evs {
		if str(t, jsonObject(t, ev.data), "type") != ev.event {
			t.Errorf("event %q carries data of type %s", ev.event, ev.data)
		}
	}
	return evs
}

func eventNames(evs []sseEvent) string {
	var names []string
	for _, ev := range evs {
		names = append(names, ev.event)
	}
	return strings.Join(names, " ")
}

func TestMessagesStream(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"cache_read_tokens":5,"cache_write_tokens":6}`)
	body := `{"model":"alpha-small","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"Hi \"there\"\n"}]}`
	evs := messagesStream(t, tf, body)
	want := "message_start content_block_start ping" + strings.Repeat(" content_block_delta", 12) +
		" content_block_stop message_delta message_stop"
	if got := eventNames(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}

	start := jsonObject(t, evs[0].data)
	msg := path(t, start, "message")
	if got := keys(t, msg); got != "content,id,model,role,stop_reason,stop_sequence,type,usage" {
		t.Errorf("message_start keys %s", got)
	}
	if str(t, msg, "model") != "alpha-small" || path(t, msg, "stop_reason") != nil || path(t, msg, "stop_sequence") != nil ||
		len(path(t, msg, "content").([]any)) != 0 || str(t, msg, "type") != "message" || str(t, msg, "role") != "assistant" {
		t.Errorf("message_start %s", evs[0].data)
	}
	if num(t, msg, "usage", "input_tokens") != ceil8(len(body)) || num(t, msg, "usage", "output_tokens") != 1 ||
		num(t, msg, "usage", "cache_read_input_tokens") != 5 || num(t, msg, "usage", "cache_creation_input_tokens") != 6 {
		t.Errorf("message_start usage %s", evs[0].data)
	}
	if compactJSON(t, evs[1].data) != `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` {
		t.Errorf("content_block_start %s", evs[1].data)
	}
	var text strings.Builder
	for _, ev := range evs[3:15] {
		d := jsonObject(t, ev.data)
		if num(t, d, "index") != 0 || str(t, d, "delta", "type") != "text_delta" {
			t.Errorf("delta %s", ev.data)
		}
		text.WriteString(str(t, d, "delta", "text"))
	}
	if want := `Echo: Hi "there" Hi "there" Hi "there" Hi "there" Hi "there" Hi`; text.String() != want {
		t.Errorf("streamed text %q, want %q", text.String(), want)
	}
	if compactJSON(t, evs[15].data) != `{"type":"content_block_stop","index":0}` {
		t.Errorf("content_block_stop %s", evs[15].data)
	}
	if compactJSON(t, evs[16].data) != `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":12}}` {
		t.Errorf("message_delta %s", evs[16].data)
	}
	if compactJSON(t, evs[17].data) != `{"type":"message_stop"}` {
		t.Errorf("message_stop %s", evs[17].data)
	}

	// The stream says what the non-streaming reply says.
	_, data := tf.call("POST", tf.messages.URL+"/v1/messages", strings.Replace(body, `"stream":true`, `"stream":false`, 1))
	if got := str(t, jsonObject(t, string(data)), "content", 0, "text"); got != text.String() {
		t.Errorf("non-streaming text %q differs from streamed %q", got, text.String())
	}
}

const messagesTools = `"tools":[{"name":"get_weather","description":"d","input_schema":{"type":"object","properties":{"location":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["location","unit","days"]}},{"name":"other","input_schema":{"type":"object"}}]`

func TestMessagesToolCall(t *testing.T) {
	tf := newTestFake(t, nil)
	body := `{"model":"m","max_tokens":100,` + messagesTools + `,"messages":[{"role":"user","content":"weather?"}]}`
	wantArgs := `{"location":"Paris","unit":"celsius","days":1}`

	// Off by default: tools offered, text answered.
	_, data := tf.call("POST", tf.messages.URL+"/v1/messages", body)
	if str(t, jsonObject(t, string(data)), "stop_reason") != "end_turn" {
		t.Fatalf("tool call without the control: %s", data)
	}

	tf.setControl(`{"format":"messages","tool_call":true}`)
	_, data = tf.call("POST", tf.messages.URL+"/v1/messages", body)
	m := jsonObject(t, string(data))
	block := path(t, m, "content", 0)
	if got := keys(t, block); got != "id,input,name,type" {
		t.Errorf("tool_use keys %s", got)
	}
	if str(t, m, "stop_reason") != "tool_use" || str(t, block, "type") != "tool_use" || str(t, block, "name") != "get_weather" ||
		!strings.HasPrefix(str(t, block, "id"), "toolu_") {
		t.Errorf("tool reply %s", data)
	}
	input, _ := json.Marshal(path(t, block, "input"))
	if compactJSON(t, string(input)) != compactJSON(t, `{"days":1,"location":"Paris","unit":"celsius"}`) {
		t.Errorf("input %s", input)
	}
	if num(t, m, "usage", "output_tokens") != ceil8(len(wantArgs)) {
		t.Errorf("tool output tokens %s", data)
	}

	evs := messagesStream(t, tf, strings.Replace(body, `"max_tokens":100,`, `"max_tokens":100,"stream":true,`, 1))
	frags := ceil8(len(wantArgs))
	want := "message_start content_block_start ping" + strings.Repeat(" content_block_delta", frags) +
		" content_block_stop message_delta message_stop"
	if got := eventNames(evs); got != want {
		t.Fatalf("events\n got %s\nwant %s", got, want)
	}
	cb := path(t, jsonObject(t, evs[1].data), "content_block")
	if str(t, cb, "type") != "tool_use" || str(t, cb, "name") != "get_weather" || keys(t, path(t, cb, "input")) != "" ||
		!strings.HasPrefix(str(t, cb, "id"), "toolu_") {
		t.Errorf("content_block_start %s", evs[1].data)
	}
	var args strings.Builder
	for _, ev := range evs[3 : 3+frags] {
		d := jsonObject(t, ev.data)
		if str(t, d, "delta", "type") != "input_json_delta" {
			t.Errorf("delta %s", ev.data)
		}
		args.WriteString(str(t, d, "delta", "partial_json"))
	}
	if args.String() != wantArgs {
		t.Errorf("streamed arguments %s, want %s", args.String(), wantArgs)
	}
	md := jsonObject(t, evs[len(evs)-2].data)
	if str(t, md, "delta", "stop_reason") != "tool_use" || num(t, md, "usage", "output_tokens") != frags {
		t.Errorf("message_delta %s", evs[len(evs)-2].data)
	}

	// A turn returning the tool result is answered in text.
	body = `{"model":"m","max_tokens":100,` + messagesTools + `,"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}]}`
	_, data = tf.call("POST", tf.messages.URL+"/v1/messages", body)
	m = jsonObject(t, string(data))
	if str(t, m, "stop_reason") != "end_turn" || !strings.HasPrefix(str(t, m, "content", 0, "text"), "Echo: sunny sunny") {
		t.Errorf("reply to tool result %s", data)
	}
}

func TestMessagesCountTokensAndModels(t *testing.T) {
	tf := newTestFake(t, nil)
	body := `{"model":"m","messages":[{"role":"user","content":"count me"}]}`
	_, data := tf.call("POST", tf.messages.URL+"/v1/messages/count_tokens", body)
	if compactJSON(t, string(data)) != `{"input_tokens":`+itoa(ceil8(len(body)))+`}` {
		t.Errorf("count_tokens %s", data)
	}

	_, data = tf.call("GET", tf.messages.URL+"/v1/models", "")
	m := jsonObject(t, string(data))
	if got := keys(t, m); got != "data,first_id,has_more,last_id" {
		t.Errorf("model list keys %s", got)
	}
	if str(t, m, "first_id") != "alpha-large" || str(t, m, "last_id") != "alpha-small" || path(t, m, "has_more") != false {
		t.Errorf("model list %s", data)
	}
	if got := keys(t, path(t, m, "data", 0)); got != "created_at,display_name,id,lifecycle,type" {
		t.Errorf("model keys %s", got)
	}
	if str(t, m, "data", 1, "id") != "alpha-small" || str(t, m, "data", 1, "type") != "model" {
		t.Errorf("model list %s", data)
	}

	resp, data := tf.call("GET", tf.messages.URL+"/v1/models/alpha-small", "")
	if resp.StatusCode != 200 || str(t, jsonObject(t, string(data)), "id") != "alpha-small" {
		t.Errorf("model get %d %s", resp.StatusCode, data)
	}
	resp, data = tf.call("GET", tf.messages.URL+"/v1/models/nope", "")
	if resp.StatusCode != 404 || str(t, jsonObject(t, string(data)), "error", "type") != "not_found_error" {
		t.Errorf("unknown model %d %s", resp.StatusCode, data)
	}
}

func TestMessagesErrors(t *testing.T) {
	tf := newTestFake(t, nil)
	for _, c := range []struct {
		method, path, body string
		status             int
		typ                string
	}{
		{"POST", "/v1/messages", `{"model":`, 400, "invalid_request_error"},
		{"POST", "/v1/messages", `{"messages":"no"}`, 400, "invalid_request_error"},
		{"POST", "/v1/complete", `{}`, 404, "not_found_error"},
		{"GET", "/v1/messages", ``, 404, "not_found_error"},
		{"POST", "/v1/chat/completions", `{}`, 404, "not_found_error"},
	} {
		resp, data := tf.call(c.method, tf.messages.URL+c.path, c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		checkMessagesError(t, data, c.typ)
	}
}

// checkMessagesError checks the vendor's error shape exactly.
func checkMessagesError(t *testing.T, data []byte, typ string) {
	t.Helper()
	m := jsonObject(t, string(data))
	if keys(t, m) != "error,type" || str(t, m, "type") != "error" || keys(t, path(t, m, "error")) != "message,type" ||
		str(t, m, "error", "type") != typ || str(t, m, "error", "message") == "" {
		t.Errorf("error body %s, want type %s", data, typ)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
