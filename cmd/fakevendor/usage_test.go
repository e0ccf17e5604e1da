package main

import (
	"strings"
	"testing"
)

// The usage controls report every billed dimension: 5-minute and 1-hour
// cache writes, web searches, a set input size and the service tier (messages);
// audio, reasoning and the service tier (chat completions), in JSON and in streams.
func TestMessagesEveryDimension(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"messages","cache_read_tokens":70,"cache_write_tokens":30,"cache_write_1h_tokens":40,` +
		`"web_search_requests":3,"input_tokens":250000,"service_tier":"priority"}`)
	_, data := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple)
	m := jsonObject(t, string(data))
	if num(t, m, "usage", "cache_creation_input_tokens") != 70 || num(t, m, "usage", "cache_creation", "ephemeral_5m_input_tokens") != 30 ||
		num(t, m, "usage", "cache_creation", "ephemeral_1h_input_tokens") != 40 || num(t, m, "usage", "server_tool_use", "web_search_requests") != 3 ||
		num(t, m, "usage", "input_tokens") != 250000 || str(t, m, "usage", "service_tier") != "priority" {
		t.Errorf("usage %s", data)
	}
	evs := messagesStream(t, tf, strings.Replace(messagesSimple, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	start := jsonObject(t, evs[0].data)
	if num(t, start, "message", "usage", "cache_creation", "ephemeral_1h_input_tokens") != 40 || num(t, start, "message", "usage", "input_tokens") != 250000 {
		t.Errorf("message_start %s", evs[0].data)
	}
	delta := jsonObject(t, evs[len(evs)-2].data)
	if num(t, delta, "usage", "server_tool_use", "web_search_requests") != 3 {
		t.Errorf("message_delta %s", evs[len(evs)-2].data)
	}
}

func TestChatCompletionsEveryDimension(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","cache_read_tokens":7,"audio_input_tokens":11,"audio_output_tokens":13,` +
		`"reasoning_tokens":17,"input_tokens":300000,"service_tier":"flex"}`)
	body := `{"model":"beta-large","messages":[{"role":"user","content":"Hi"}]}`
	_, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", body)
	c := jsonObject(t, string(data))
	check := func(how string, c map[string]any) {
		t.Helper()
		words := 12
		if num(t, c, "usage", "prompt_tokens") != 300000+7+11 || num(t, c, "usage", "completion_tokens") != words+17+13 ||
			num(t, c, "usage", "prompt_tokens_details", "audio_tokens") != 11 || num(t, c, "usage", "completion_tokens_details", "audio_tokens") != 13 ||
			num(t, c, "usage", "completion_tokens_details", "reasoning_tokens") != 17 || str(t, c, "service_tier") != "flex" {
			t.Errorf("%s: %v", how, c)
		}
	}
	check("json", c)
	chunks := chatStream(t, tf, strings.Replace(body, `"messages"`, `"stream":true,"stream_options":{"include_usage":true},"messages"`, 1))
	check("stream", chunks[len(chunks)-1])
	if str(t, chunks[0], "service_tier") != "flex" {
		t.Errorf("first chunk %v", chunks[0])
	}
}
