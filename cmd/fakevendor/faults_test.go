package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// rawPost posts with one extra header and reports what came back, a reset
// included, without failing.
func rawPost(url, body, key, value string) (status int, data []byte, err error) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set(key, value)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err = io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

const chatToolOffer = `{"model":"beta-large","messages":[{"role":"user","content":"hi"}],` +
	`"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`

// Requests offering tools are billed the tool prompt on top of their body.
func TestToolPromptTokens(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","tool_prompt_tokens":300}`)
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatToolOffer)
	if got, want := num(t, jsonObject(t, string(data)), "usage", "prompt_tokens"), ceil8(len(chatToolOffer))+300; got != want {
		t.Fatalf("prompt_tokens %d, want %d", got, want)
	}
	_, data = tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple)
	if got, want := num(t, jsonObject(t, string(data)), "usage", "prompt_tokens"), ceil8(len(chatSimple)); got != want {
		t.Fatalf("prompt_tokens without tools %d, want %d", got, want)
	}
}

// n choices are all billed, streamed or not.
func TestChatCompletionsN(t *testing.T) {
	tf := newTestFake(t, nil)
	body := `{"model":"beta-large","n":3,"messages":[{"role":"user","content":"hi"}]}`
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", body)
	m := jsonObject(t, string(data))
	if got := len(path(t, m, "choices").([]any)); got != 3 {
		t.Fatalf("%d choices", got)
	}
	if got := num(t, m, "usage", "completion_tokens"); got != 3*defaultReplyWords {
		t.Fatalf("completion_tokens %d", got)
	}
	stream := `{"model":"beta-large","n":2,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	_, data = tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", stream)
	if !strings.Contains(string(data), `"index":1,"delta":{"content":`) || !strings.Contains(string(data), `"completion_tokens":24`) {
		t.Fatalf("stream of 2 choices: %s", data)
	}
}

// x-fake-controls steers one request: a reset before the first event.
func TestAbortAtStartPerRequest(t *testing.T) {
	tf := newTestFake(t, nil)
	stream := `{"model":"beta-large","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	status, data, err := rawPost(tf.chatCompletions.URL+"/v1/chat/completions", stream, "x-fake-controls", `{"abort_at_start":true}`)
	if err == nil || status != 200 || len(data) > 0 {
		t.Fatalf("stream not reset after its headers, before its first event: %d %q %v", status, data, err)
	}
	if status, _, err := rawPost(tf.chatCompletions.URL+"/v1/chat/completions", chatSimple, "x-fake-controls", `{"abort_at_start":true}`); err == nil || status != 0 {
		t.Fatalf("reply not reset before its headers: %d %v", status, err)
	}
	// The next request, without the header, is served.
	if resp, _ := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if status, _, _ := rawPost(tf.chatCompletions.URL+"/v1/chat/completions", chatSimple, "x-fake-controls", `{"status":500}`); status != 400 {
		t.Fatalf("a per-request status: %d, want 400", status)
	}
}
