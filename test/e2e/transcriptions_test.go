package e2e

import (
	"bufio"
	"bytes"
	"context"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

const transcriptionsPath = "/beta/v1/audio/transcriptions"

// transcriptionForm is a multipart transcription request of fileBytes of
// audio and the given fields, with the headers to send it.
func transcriptionForm(t *testing.T, key string, fileBytes int, fields ...string) ([]byte, map[string]string) {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		if err := w.WriteField(fields[i], fields[i+1]); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := w.CreateFormFile("file", "speech.mp3")
	if err != nil {
		t.Fatal(err)
	}
	fw.Write(bytes.Repeat([]byte{0xff, 0xfb, 0x90, 0x44}, fileBytes/4))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), map[string]string{"Authorization": "Bearer " + key, "Content-Type": w.FormDataContentType()}
}

// transcriptionUsage is the usage a transcription reply reports.
type transcriptionUsage struct {
	Type              string  `json:"type"`
	InputTokens       int64   `json:"input_tokens"`
	OutputTokens      int64   `json:"output_tokens"`
	Seconds           float64 `json:"seconds"`
	InputTokenDetails struct {
		TextTokens  int64 `json:"text_tokens"`
		AudioTokens int64 `json:"audio_tokens"`
	} `json:"input_token_details"`
}

// transcriptionCost computes, from the catalogue entry alone, what the
// reported usage costs in nano-USD, rounded up once: text and audio input
// and output tokens at their per-token prices, or the duration in whole
// seconds (a fraction rounded up) at input_cost_per_second.
func transcriptionCost(t *testing.T, e map[string]any, u transcriptionUsage) int64 {
	t.Helper()
	if u.Type == "duration" {
		secs := int64(u.Seconds)
		if float64(secs) < u.Seconds {
			secs++
		}
		return entryCost(t, e, priceTerm{secs, "input_cost_per_second"})
	}
	return entryCost(t, e,
		priceTerm{u.InputTokenDetails.TextTokens, "input_cost_per_token"},
		priceTerm{u.InputTokenDetails.AudioTokens, "input_cost_per_audio_token"},
		priceTerm{u.OutputTokens, "output_cost_per_token"})
}

// Audio transcriptions through Envoy, billed from the catalogue to the
// nano-USD: token models from the reply's usage, JSON and streamed;
// whisper-1 from the reply's duration. Replies without usage are refused
// before the vendor sees them, malformed forms are 400 in OpenAI's shape,
// an oversize upload 413 before buffering; another account sees none of it.
func TestTranscriptions(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	other := s.NewAccount(10, noLimits)
	cat := catalogueEntries(t, s.Config.Catalogue)
	ctx := context.Background()

	type call struct {
		model  string
		size   int
		fields []string
		stream bool
	}
	calls := []call{
		{"gpt-4o-transcribe", 48_000, []string{"prompt", "Speakers: Ada, Grace, Hedy."}, false},
		{"gpt-4o-transcribe", 32_000, nil, true},
		{"gpt-4o-mini-transcribe", 16_000, nil, false},
		{"gpt-4o-mini-transcribe", 24_000, nil, true},
		{"whisper-1", 40_000, nil, false},                                         // 2.5 s: billed 3
		{"whisper-1", 64_000, []string{"response_format", "verbose_json"}, false}, // 4 s
	}
	var want []int64
	for _, c := range calls {
		fields := append([]string{"model", c.model}, c.fields...)
		if c.stream {
			fields = append(fields, "stream", "true")
		}
		body, hdr := transcriptionForm(t, acct.Key, c.size, fields...)
		resp, out := s.Do("POST", transcriptionsPath, hdr, body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.model, resp.StatusCode, out)
		}
		var u transcriptionUsage
		if c.stream {
			if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("%s stream: content type %q", c.model, resp.Header.Get("Content-Type"))
			}
			evs := readEvents(t, bufio.NewReader(bytes.NewReader(out)))
			var done struct {
				Type  string
				Usage transcriptionUsage
			}
			mustJSON(t, []byte(evs[len(evs)-1].Data), &done)
			if done.Type != "transcript.text.done" || len(evs) < 2 {
				t.Fatalf("%s stream: %s", c.model, out)
			}
			u = done.Usage
		} else {
			var r struct{ Usage transcriptionUsage }
			mustJSON(t, out, &r)
			u = r.Usage
		}
		if u.Type == "" || u.Type == "tokens" && u.InputTokenDetails.AudioTokens == 0 || u.Type == "duration" && u.Seconds == 0 {
			t.Fatalf("%s: the vendor reported %+v", c.model, u)
		}
		want = append(want, transcriptionCost(t, cat[c.model], u))
	}
	entries, _, err := s.Store.Ledger(ctx, acct.ID, "", 20)
	if err != nil || len(entries) != len(calls) {
		t.Fatalf("ledger: %d entries, %v", len(entries), err)
	}
	for j, e := range entries { // oldest first
		if e.Cost != want[j] || e.Estimated || e.Status != 200 || string(e.Requested) != calls[j].model || e.Stream != calls[j].stream {
			t.Errorf("%s (stream %v): cost %d, want %d: %+v", calls[j].model, calls[j].stream, e.Cost, want[j], e.Settlement)
		}
	}
	if e := entries[4]; e.Usage.AudioSeconds != 3 || e.Usage.Input+e.Usage.AudioInput+e.Usage.Output != 0 {
		t.Errorf("whisper-1 of 2.5 s: usage %+v", e.Usage)
	}

	// Refusals: the gateway answers, in OpenAI's error shape, and the vendor
	// is never asked.
	before := s.Primary.APIRequests() // probes (health checks) aside
	body, hdr := transcriptionForm(t, acct.Key, 4000, "model", "whisper-1", "response_format", "text")
	resp, out := s.Do("POST", transcriptionsPath, hdr, body)
	checkError(t, transcriptionsPath, resp.StatusCode, resp.Header.Get("content-type"), out, 400, "", "")
	if !strings.Contains(string(out), "response_format") || !strings.Contains(string(out), "no usage") {
		t.Errorf("text format refused with %s", out)
	}
	_, hdr = transcriptionForm(t, acct.Key, 10, "model", "whisper-1")
	resp, out = s.Do("POST", transcriptionsPath, hdr, []byte("--not-the-boundary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1"))
	checkError(t, transcriptionsPath, resp.StatusCode, resp.Header.Get("content-type"), out, 400, "", "")
	if !strings.Contains(string(out), "multipart") {
		t.Errorf("malformed form refused with %s", out)
	}
	resp, out = s.Do("POST", transcriptionsPath, chatCompletionsHeaders(acct.Key), []byte(`{"model":"whisper-1"}`))
	checkError(t, transcriptionsPath, resp.StatusCode, resp.Header.Get("content-type"), out, 400, "", "")
	resp, out = postExpectingRefusal(t, s, transcriptionsPath, hdr, 32<<20+1)
	checkError(t, transcriptionsPath, resp.StatusCode, resp.Header.Get("content-type"), out, 413, "", "request_too_large")
	if after := s.Primary.APIRequests(); after != before {
		t.Errorf("%d refused requests reached the vendor", after-before)
	}
	if entries, _, _ := s.Store.Ledger(ctx, acct.ID, "", 20); len(entries) != len(calls) {
		t.Errorf("refusals billed: %d ledger entries", len(entries))
	}

	// The vendor keeps nothing a transcription creates; what the gateway
	// keeps (usage, ledger) is the first account's alone.
	mine := s.Usage(acct.Key, "day")
	if u := mine["usage"].(map[string]any); u["requests"] != float64(len(calls)) || u["audio_seconds"] != float64(7) {
		t.Errorf("first account's usage %v", u)
	}
	theirs := s.Usage(other.Key, "day")
	if u := theirs["usage"].(map[string]any); u["requests"] != float64(0) || u["audio_seconds"] != float64(0) || u["cost_usd"] != float64(0) {
		t.Errorf("second account's usage %v", u)
	}
	if entries, _, err := s.Store.Ledger(ctx, other.ID, "", 20); err != nil || len(entries) != 0 {
		t.Errorf("second account's ledger %v %v", entries, err)
	}
}
