package main

import (
	"encoding/json"
	"strings"
	"testing"
)

const chatSimple = `{"model":"beta-large","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"Hello big world"}]}`

func TestChatCompletionsCompletion(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","cache_read_tokens":40,"cache_write_tokens":99}`)
	resp, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	if got := resp.Header.Get("x-request-id"); !strings.HasPrefix(got, "req_") {
		t.Errorf("x-request-id %q", got)
	}
	if got := resp.Header.Get("X-Fake-Vendor"); got != "primary" {
		t.Errorf("x-fake-vendor %q", got)
	}
	m := jsonObject(t, string(data))
	if got := keys(t, m); got != "choices,created,id,model,object,service_tier,system_fingerprint,usage" {
		t.Errorf("completion keys %s", got)
	}
	if !strings.HasPrefix(str(t, m, "id"), "chatcmpl-") || str(t, m, "object") != "chat.completion" ||
		str(t, m, "model") != "beta-large" || num(t, m, "created") <= 0 {
		t.Errorf("envelope %s", data)
	}
	ch := path(t, m, "choices", 0)
	if got := keys(t, ch); got != "finish_reason,index,logprobs,message" {
		t.Errorf("choice keys %s", got)
	}
	if str(t, ch, "finish_reason") != "stop" || num(t, ch, "index") != 0 || path(t, ch, "logprobs") != nil {
		t.Errorf("choice %s", data)
	}
	if got := keys(t, path(t, ch, "message")); got != "annotations,content,refusal,role" {
		t.Errorf("message keys %s", got)
	}
	want := "Echo: Hello big world Hello big world Hello big world Hello big"
	if str(t, ch, "message", "content") != want || str(t, ch, "message", "role") != "assistant" {
		t.Errorf("message %s", data)
	}
	u := path(t, m, "usage")
	prompt := ceil8(len(chatSimple)) + 40
	if num(t, u, "prompt_tokens") != prompt || num(t, u, "completion_tokens") != 12 || num(t, u, "total_tokens") != prompt+12 ||
		num(t, u, "prompt_tokens_details", "cached_tokens") != 40 || num(t, u, "completion_tokens_details", "reasoning_tokens") != 0 {
		t.Errorf("usage %s", data)
	}
}

func TestChatCompletionsTokenLimits(t *testing.T) {
	tf := newTestFake(t, nil)
	for _, c := range []struct {
		limits string
		words  int
		finish string
	}{
		{`"max_tokens":5`, 5, "length"},
		{`"max_completion_tokens":3,"max_tokens":5`, 3, "length"},
		{`"max_completion_tokens":30`, 12, "stop"},
		{`"max_tokens":null`, 12, "stop"},
	} {
		body := `{"model":"m",` + c.limits + `,"messages":[{"role":"user","content":[{"type":"text","text":"x y"}]}]}`
		_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", body)
		m := jsonObject(t, string(data))
		text := str(t, m, "choices", 0, "message", "content")
		want := strings.Join(strings.Fields(strings.Repeat("x y ", 6))[:c.words-1], " ")
		if text != "Echo: "+want || num(t, m, "usage", "completion_tokens") != c.words ||
			str(t, m, "choices", 0, "finish_reason") != c.finish {
			t.Errorf("%s: %s", c.limits, data)
		}
	}
}

// chatStream posts a streaming request and returns the data of its events,
// checking that it ends with [DONE].
func chatStream(t *testing.T, tf *testFake, body string) []map[string]any {
	t.Helper()
	resp, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	if got := resp.Header.Get("Content-Type"); !strings.HasPrefix(got, "text/event-stream") {
		t.Errorf("content-type %q", got)
	}
	evs := parseSSE(t, data)
	if len(evs) == 0 || evs[len(evs)-1].data != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %s", data)
	}
	var chunks []map[string]any
	for _, ev := range evs[:len(evs)-1] {
		if ev.event != "" {
			t.Errorf("event line %q", ev.event)
		}
		c := jsonObject(t, ev.data)
		if str(t, c, "object") != "chat.completion.chunk" || str(t, c, "system_fingerprint") == "" || num(t, c, "created") <= 0 {
			t.Errorf("chunk envelope %s", ev.data)
		}
		chunks = append(chunks, c)
	}
	for _, c := range chunks {
		if path(t, c, "id") != path(t, chunks[0], "id") {
			t.Errorf("chunk ids differ")
		}
	}
	return chunks
}

func TestChatCompletionsStream(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"cache_read_tokens":7}`)
	for _, includeUsage := range []bool{false, true} {
		body := `{"model":"beta-large","stream":true,"messages":[{"role":"user","content":"Hi <b> & more"}]}`
		if includeUsage {
			body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
		}
		chunks := chatStream(t, tf, body)
		n := 1 + 12 + 1 // role, words, finish
		if includeUsage {
			n++
		}
		if len(chunks) != n {
			t.Fatalf("include_usage=%v: %d chunks, want %d", includeUsage, len(chunks), n)
		}
		wantKeys := "choices,created,id,model,object,service_tier,system_fingerprint"
		if includeUsage {
			wantKeys += ",usage"
		}
		for _, c := range chunks {
			if got := keys(t, c); got != wantKeys {
				t.Errorf("include_usage=%v: chunk keys %s", includeUsage, got)
			}
			if str(t, c, "model") != "beta-large" {
				t.Errorf("model %v", c)
			}
		}
		first := path(t, chunks[0], "choices", 0)
		if compactJSON(t, mustJSON(t, path(t, first, "delta"))) != `{"content":"","refusal":null,"role":"assistant"}` ||
			path(t, first, "finish_reason") != nil || path(t, first, "logprobs") != nil || num(t, first, "index") != 0 {
			t.Errorf("first chunk %v", chunks[0])
		}
		var text strings.Builder
		for _, c := range chunks[1:13] {
			if path(t, c, "choices", 0, "finish_reason") != nil {
				t.Errorf("finish_reason in a content chunk: %v", c)
			}
			text.WriteString(str(t, c, "choices", 0, "delta", "content"))
		}
		if want := "Echo: Hi <b> & more Hi <b> & more Hi <b> &"; text.String() != want {
			t.Errorf("streamed %q, want %q", text.String(), want)
		}
		last := path(t, chunks[13], "choices", 0)
		if str(t, last, "finish_reason") != "stop" || keys(t, path(t, last, "delta")) != "" {
			t.Errorf("finish chunk %v", chunks[13])
		}
		if !includeUsage {
			continue
		}
		for _, c := range chunks[:14] {
			if path(t, c, "usage") != nil {
				t.Errorf("usage not null before the last chunk: %v", c)
			}
		}
		u := chunks[14]
		if len(path(t, u, "choices").([]any)) != 0 {
			t.Errorf("usage chunk has choices: %v", u)
		}
		prompt := ceil8(len(body)) + 7
		if num(t, u, "usage", "prompt_tokens") != prompt || num(t, u, "usage", "completion_tokens") != 12 ||
			num(t, u, "usage", "total_tokens") != prompt+12 || num(t, u, "usage", "prompt_tokens_details", "cached_tokens") != 7 {
			t.Errorf("usage chunk %v", u)
		}
	}
}

// A reasoning model reports thought it does not show: completion_tokens
// counts it, completion_tokens_details.reasoning_tokens names it, and the
// text is what it would be without. Usage is streamed only when asked for.
func TestChatCompletionsReasoning(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","reasoning_tokens":377}`)
	resp, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, data)
	}
	m := jsonObject(t, string(data))
	prompt := ceil8(len(chatSimple))
	if u := path(t, m, "usage"); num(t, u, "completion_tokens") != 12+377 || num(t, u, "total_tokens") != prompt+12+377 ||
		num(t, u, "completion_tokens_details", "reasoning_tokens") != 377 {
		t.Errorf("usage %s", data)
	}
	if got := str(t, m, "choices", 0, "message", "content"); got != "Echo: Hello big world Hello big world Hello big world Hello big" {
		t.Errorf("content %q", got)
	}

	stream := strings.Replace(chatSimple, `"model":"beta-large",`, `"model":"beta-large","stream":true,`, 1)
	for _, opts := range []string{``, `"stream_options":{"include_usage":false},`, `"stream_options":{},`} {
		chunks := chatStream(t, tf, strings.Replace(stream, `"stream":true,`, `"stream":true,`+opts, 1))
		for _, c := range chunks {
			if _, ok := c["usage"]; ok {
				t.Fatalf("%s: a chunk has usage: %v", opts, c)
			}
		}
		if len(chunks) != 14 {
			t.Fatalf("%s: %d chunks", opts, len(chunks))
		}
	}
	chunks := chatStream(t, tf, strings.Replace(stream, `"stream":true,`, `"stream":true,"stream_options":{"include_usage":true},`, 1))
	u := chunks[len(chunks)-1]
	if len(chunks) != 15 || num(t, u, "usage", "completion_tokens") != 12+377 || num(t, u, "usage", "completion_tokens_details", "reasoning_tokens") != 377 {
		t.Errorf("usage chunk %v of %d", u, len(chunks))
	}
}

const chatTools = `"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":["string","null"]},"metric":{"type":"boolean"}},"required":["location","metric"]}}}]`

func TestChatCompletionsToolCall(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","tool_call":true}`)
	wantArgs := `{"location":"Paris","metric":true}`
	body := `{"model":"m",` + chatTools + `,"messages":[{"role":"user","content":"weather?"}]}`
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", body)
	m := jsonObject(t, string(data))
	ch := path(t, m, "choices", 0)
	msg := path(t, ch, "message")
	if str(t, ch, "finish_reason") != "tool_calls" || path(t, msg, "content") != nil {
		t.Errorf("tool reply %s", data)
	}
	tc := path(t, msg, "tool_calls", 0)
	if !strings.HasPrefix(str(t, tc, "id"), "call_") || str(t, tc, "type") != "function" ||
		str(t, tc, "function", "name") != "get_weather" || str(t, tc, "function", "arguments") != wantArgs {
		t.Errorf("tool call %s", data)
	}
	if num(t, m, "usage", "completion_tokens") != ceil8(len(wantArgs)) {
		t.Errorf("tool completion tokens %s", data)
	}

	chunks := chatStream(t, tf, strings.Replace(body, `"model":"m",`, `"model":"m","stream":true,"stream_options":{"include_usage":true},`, 1))
	frags := ceil8(len(wantArgs))
	if len(chunks) != 1+frags+1+1 {
		t.Fatalf("%d chunks, want %d", len(chunks), 1+frags+2)
	}
	head := path(t, chunks[0], "choices", 0, "delta")
	if str(t, head, "role") != "assistant" || path(t, head, "content") != nil {
		t.Errorf("first chunk %v", chunks[0])
	}
	htc := path(t, head, "tool_calls", 0)
	if num(t, htc, "index") != 0 || !strings.HasPrefix(str(t, htc, "id"), "call_") || str(t, htc, "type") != "function" ||
		str(t, htc, "function", "name") != "get_weather" || str(t, htc, "function", "arguments") != "" {
		t.Errorf("first tool chunk %v", chunks[0])
	}
	var args strings.Builder
	for _, c := range chunks[1 : 1+frags] {
		tc := path(t, c, "choices", 0, "delta", "tool_calls", 0)
		if num(t, tc, "index") != 0 {
			t.Errorf("fragment %v", c)
		}
		args.WriteString(str(t, tc, "function", "arguments"))
	}
	if args.String() != wantArgs {
		t.Errorf("streamed arguments %s, want %s", args.String(), wantArgs)
	}
	if str(t, chunks[1+frags], "choices", 0, "finish_reason") != "tool_calls" {
		t.Errorf("finish chunk %v", chunks[1+frags])
	}
	if num(t, chunks[2+frags], "usage", "completion_tokens") != frags {
		t.Errorf("usage chunk %v", chunks[2+frags])
	}

	// After a tool message, text again.
	body = `{"model":"m",` + chatTools + `,"messages":[{"role":"user","content":"weather?"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"sunny"}]}`
	_, data = tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", body)
	m = jsonObject(t, string(data))
	if str(t, m, "choices", 0, "finish_reason") != "stop" || !strings.HasPrefix(str(t, m, "choices", 0, "message", "content"), "Echo: sunny sunny") {
		t.Errorf("reply to tool result %s", data)
	}
}

func TestChatCompletionsModelsAndErrors(t *testing.T) {
	tf := newTestFake(t, nil)
	_, data := tf.call("GET", tf.chatCompletions.URL+"/v1/models", "")
	if compactJSON(t, string(data)) != `{"object":"list","data":[{"id":"beta-large","object":"model","created":1735689600,"owned_by":"system"}]}` {
		t.Errorf("models %s", data)
	}
	resp, data := tf.call("GET", tf.chatCompletions.URL+"/v1/models/beta-large", "")
	if resp.StatusCode != 200 || str(t, jsonObject(t, string(data)), "id") != "beta-large" {
		t.Errorf("model get %d %s", resp.StatusCode, data)
	}

	for _, c := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/chat/completions", `not json`, 400, "invalid_request"},
		{"POST", "/v1/messages", `{}`, 404, "not_found"},
		{"GET", "/v1/chat/completions", ``, 404, "not_found"},
		{"GET", "/v1/models/nope", ``, 404, "not_found"},
	} {
		resp, data := tf.call(c.method, tf.chatCompletions.URL+c.path, c.body)
		if resp.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d", c.method, c.path, resp.StatusCode, c.status)
		}
		checkChatError(t, data, "invalid_request_error", c.code)
	}
}

// checkChatError checks the vendor's error shape exactly.
func checkChatError(t *testing.T, data []byte, typ, code string) {
	t.Helper()
	m := jsonObject(t, string(data))
	e := path(t, m, "error")
	if keys(t, m) != "error" || keys(t, e) != "code,message,param,type" || str(t, e, "type") != typ ||
		str(t, e, "code") != code || path(t, e, "param") != nil || str(t, e, "message") == "" {
		t.Errorf("error body %s, want type %s code %s", data, typ, code)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
