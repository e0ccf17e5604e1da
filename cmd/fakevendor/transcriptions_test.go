package main

import (
	"bytes"
	"encoding/json"
	"mime/multipart"
	"strings"
	"testing"
)

// transcriptionBody builds a multipart transcription request.
func transcriptionBody(t *testing.T, fileBytes int, fields ...string) (body, contentType string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		w.WriteField(fields[i], fields[i+1])
	}
	fw, err := w.CreateFormFile("file", "speech.mp3")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(bytes.Repeat([]byte{0x55}, fileBytes))
	w.Close()
	return b.String(), w.FormDataContentType()
}

// Token models report audio and text input and output; whisper reports a
// duration from the file's size; the stream ends with the usage.
func TestTranscriptions(t *testing.T) {
	tf := newTestFake(t, nil)
	url := tf.chatCompletions.URL + "/v1/audio/transcriptions"

	body, ct := transcriptionBody(t, 16_000, "model", "gpt-4o-transcribe", "prompt", "sixteen bytes!!!")
	resp, data := tf.call("POST", url, body, "Content-Type", ct)
	j := jsonObject(t, string(data))
	if resp.StatusCode != 200 || str(t, j, "usage", "type") != "tokens" || num(t, j, "usage", "input_token_details", "audio_tokens") != 10 ||
		num(t, j, "usage", "input_token_details", "text_tokens") != 2 || num(t, j, "usage", "input_tokens") != 12 ||
		num(t, j, "usage", "output_tokens") != defaultReplyWords || !strings.HasPrefix(str(t, j, "text"), "Echo:") {
		t.Fatalf("tokens reply %d %s", resp.StatusCode, data)
	}

	tf.setControl(`{"format":"chat_completions","audio_input_tokens":70,"output_tokens":9}`)
	body, ct = transcriptionBody(t, 1000, "model", "gpt-4o-mini-transcribe", "stream", "true")
	resp, data = tf.call("POST", url, body, "Content-Type", ct)
	events := parseSSE(t, data)
	last := jsonObject(t, events[len(events)-1].data)
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") || len(events) != defaultReplyWords+1 ||
		str(t, jsonObject(t, events[0].data), "type") != "transcript.text.delta" || str(t, last, "type") != "transcript.text.done" ||
		num(t, last, "usage", "input_token_details", "audio_tokens") != 70 || num(t, last, "usage", "output_tokens") != 9 {
		t.Fatalf("stream %s", data)
	}

	// 40,000 bytes at 16 kB/s: 2.5 seconds; whisper never streams.
	body, ct = transcriptionBody(t, 40_000, "model", "whisper-1", "stream", "true", "response_format", "verbose_json")
	resp, data = tf.call("POST", url, body, "Content-Type", ct)
	j = jsonObject(t, string(data))
	if resp.StatusCode != 200 || str(t, j, "usage", "type") != "duration" || path(t, j, "usage", "seconds") != json.Number("2.5") || path(t, j, "duration") != json.Number("2.5") {
		t.Fatalf("whisper %d %s", resp.StatusCode, data)
	}
	body, ct = transcriptionBody(t, 100, "model", "whisper-1", "response_format", "text")
	resp, data = tf.call("POST", url, body, "Content-Type", ct)
	if resp.StatusCode != 200 || strings.Contains(string(data), "usage") || !strings.HasPrefix(string(data), "Echo:") {
		t.Fatalf("text %d %s", resp.StatusCode, data)
	}

	// No file, or not a form: the vendor's 400.
	resp, data = tf.call("POST", url, `{"model":"whisper-1"}`, "Content-Type", "application/json")
	if resp.StatusCode != 400 || str(t, jsonObject(t, string(data)), "error", "type") != "invalid_request_error" {
		t.Fatalf("json body %d %s", resp.StatusCode, data)
	}
	_, ct = transcriptionBody(t, 1, "model", "m")
	resp, _ = tf.call("POST", url, "--x\r\n", "Content-Type", ct)
	if resp.StatusCode != 400 {
		t.Fatalf("malformed form %d", resp.StatusCode)
	}
}
