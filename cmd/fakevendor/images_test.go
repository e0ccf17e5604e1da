package main

import (
	"strings"
	"testing"
)

// GPT image models report text input and image output tokens by size and
// quality; a stream is each image's partial images, then its completed
// event with its usage; dall-e models report no usage.
func TestImages(t *testing.T) {
	tf := newTestFake(t, nil)
	url := tf.chatCompletions.URL + "/v1/images/generations"

	resp, data := tf.call("POST", url, `{"model":"gpt-image-1","prompt":"a lighthouse at dawn","n":2,"size":"1024x1536","quality":"high"}`)
	j := jsonObject(t, string(data))
	if resp.StatusCode != 200 || num(t, j, "usage", "input_tokens_details", "text_tokens") != 5 || num(t, j, "usage", "output_tokens") != 2*6240 {
		t.Fatalf("gpt-image-1 %d %s", resp.StatusCode, data)
	}

	resp, data = tf.call("POST", url, `{"model":"gpt-image-1","prompt":"a lighthouse","stream":true,"partial_images":2}`)
	events := parseSSE(t, data)
	last := jsonObject(t, events[len(events)-1].data)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || len(events) != 3 ||
		str(t, jsonObject(t, events[0].data), "type") != "image_generation.partial_image" || str(t, last, "type") != "image_generation.completed" ||
		num(t, last, "usage", "output_tokens") != 1056+200 {
		t.Fatalf("stream %s", data)
	}

	resp, data = tf.call("POST", url, `{"model":"dall-e-3","prompt":"a lighthouse","n":1}`)
	if resp.StatusCode != 200 || strings.Contains(string(data), "usage") || !strings.Contains(string(data), `"url"`) {
		t.Fatalf("dall-e-3 %d %s", resp.StatusCode, data)
	}
	if resp, _ := tf.call("POST", url, `{"model":"gpt-image-1"}`); resp.StatusCode != 400 {
		t.Fatalf("no prompt: %d", resp.StatusCode)
	}
}
