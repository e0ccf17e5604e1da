package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/eventually"
)

func TestForcedStatus(t *testing.T) {
	tf := newTestFake(t, nil)
	for _, c := range []struct {
		status       int
		messagesType string
		chatType     string
		chatCode     string
		retryAfter   bool
	}{
		{429, "rate_limit_error", "requests", "rate_limit_exceeded", true},
		{503, "api_error", "server_error", "service_unavailable", true},
		{529, "overloaded_error", "server_error", "server_error", true},
		{500, "api_error", "server_error", "server_error", false},
		{400, "invalid_request_error", "invalid_request_error", "invalid_request", false},
		{403, "permission_error", "invalid_request_error", "forbidden", false},
	} {
		tf.setControl(`{"status":` + itoa(c.status) + `,"retry_after":"7"}`)
		resp, data := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple)
		if resp.StatusCode != c.status {
			t.Errorf("messages: status %d, want %d", resp.StatusCode, c.status)
		}
		checkMessagesError(t, data, c.messagesType)
		if got, want := resp.Header.Get("Retry-After"), map[bool]string{true: "7"}[c.retryAfter]; got != want {
			t.Errorf("messages %d: retry-after %q, want %q", c.status, got, want)
		}
		if resp.Header.Get("request-id") == "" || resp.Header.Get("X-Fake-Vendor") != "primary" {
			t.Errorf("messages %d: headers %v", c.status, resp.Header)
		}

		resp, data = tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple)
		if resp.StatusCode != c.status {
			t.Errorf("chat completions: status %d, want %d", resp.StatusCode, c.status)
		}
		checkChatError(t, data, c.chatType, c.chatCode)
		if got, want := resp.Header.Get("Retry-After"), map[bool]string{true: "7"}[c.retryAfter]; got != want {
			t.Errorf("chat completions %d: retry-after %q, want %q", c.status, got, want)
		}
	}

	// Without retry_after, no header.
	tf.setControl(`{"status":429,"retry_after":""}`)
	resp, _ := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "" {
		t.Errorf("429 without retry_after: %d %v", resp.StatusCode, resp.Header)
	}
	// Streaming requests get the error as JSON, not a stream.
	resp, data := tf.call("POST", tf.messages.URL+"/v1/messages", strings.Replace(messagesSimple, `"max_tokens":100`, `"max_tokens":100,"stream":true`, 1))
	if resp.StatusCode != 429 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("streaming 429: %d %v %s", resp.StatusCode, resp.Header, data)
	}
	// status 0 clears it.
	tf.setControl(`{"status":0}`)
	if resp, data := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple); resp.StatusCode != 200 {
		t.Errorf("after clearing: %d %s", resp.StatusCode, data)
	}
}

func TestStatusCountAndProbes(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"chat_completions","status":503,"status_count":2}`)

	// Probes neither see a counted status nor count it down.
	if resp, _ := tf.call("GET", tf.chatCompletions.URL+"/v1/models", ""); resp.StatusCode != 200 {
		t.Errorf("probe during counted status: %d", resp.StatusCode)
	}
	// The other vendor is not affected.
	if resp, _ := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple); resp.StatusCode != 200 {
		t.Errorf("messages: %d", resp.StatusCode)
	}
	for i, want := range []int{503, 503, 200, 200} {
		resp, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple)
		if resp.StatusCode != want {
			t.Errorf("request %d: status %d, want %d: %s", i, resp.StatusCode, want, data)
		}
	}
	var ctl map[string]Controls
	_, data := tf.call("GET", tf.control.URL+"/control", "")
	mustUnmarshal(t, data, &ctl)
	if ctl["chat_completions"].Status != 0 || ctl["chat_completions"].StatusCount != 0 {
		t.Errorf("status not cleared after its count: %+v", ctl["chat_completions"])
	}

	// An open-ended status reaches the probes too.
	tf.setControl(`{"format":"chat_completions","status":503}`)
	resp, data := tf.call("GET", tf.chatCompletions.URL+"/v1/models", "")
	if resp.StatusCode != 503 {
		t.Errorf("probe during open-ended status: %d", resp.StatusCode)
	}
	checkChatError(t, data, "server_error", "service_unavailable")

	_, data = tf.call("GET", tf.control.URL+"/stats", "")
	if compactJSON(t, string(data)) != `{"chat_completions":4,"chat_completions_hung":0,"chat_completions_in_flight":0,"chat_completions_peak_in_flight":1,"chat_completions_probes":2,"messages":1,"messages_hung":0,"messages_in_flight":0,"messages_peak_in_flight":1,"messages_probes":0}` {
		t.Errorf("stats %s", data)
	}
}

// probes_pass fails model requests while the probe path still answers: a
// vendor that health checks cannot see failing.
func TestStatusWithProbesPassing(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"status":503,"probes_pass":true}`)
	for range 2 {
		if resp, data := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple); resp.StatusCode != 503 {
			t.Errorf("model request: %d %s, want 503", resp.StatusCode, data)
		}
		if resp, data := tf.call("GET", tf.messages.URL+"/v1/models", ""); resp.StatusCode != 200 {
			t.Errorf("probe: %d %s, want 200", resp.StatusCode, data)
		}
	}
	// Turned off, the probes see the outage again.
	tf.setControl(`{"probes_pass":false}`)
	if resp, _ := tf.call("GET", tf.messages.URL+"/v1/models", ""); resp.StatusCode != 503 {
		t.Errorf("probe with probes_pass off: %d, want 503", resp.StatusCode)
	}
}

func TestCredentials(t *testing.T) {
	tf := newTestFake(t, func(c *config) {
		c.messagesKey = "alpha-secret"
		c.chatCompletionsKey = "beta-secret"
	})
	for _, c := range []struct {
		header []string
		status int
	}{
		{nil, 401},
		{[]string{"X-Api-Key", "wrong"}, 401},
		{[]string{"Authorization", "Bearer wrong"}, 401},
		{[]string{"Authorization", "alpha-secret"}, 401},
		{[]string{"X-Api-Key", "alpha-secret"}, 200},
		{[]string{"Authorization", "Bearer alpha-secret"}, 200},
	} {
		resp, data := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple, c.header...)
		if resp.StatusCode != c.status {
			t.Errorf("messages %v: status %d, want %d", c.header, resp.StatusCode, c.status)
		}
		if c.status == 401 {
			checkMessagesError(t, data, "authentication_error")
		}
	}
	for _, c := range []struct {
		header []string
		status int
	}{
		{nil, 401},
		{[]string{"Authorization", "Bearer wrong"}, 401},
		{[]string{"Authorization", "Bearer beta-secretx"}, 401},
		{[]string{"X-Api-Key", "beta-secret"}, 401},
		{[]string{"Authorization", "Bearer beta-secret"}, 200},
	} {
		resp, data := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple, c.header...)
		if resp.StatusCode != c.status {
			t.Errorf("chat completions %v: status %d, want %d", c.header, resp.StatusCode, c.status)
		}
		if c.status == 401 {
			checkChatError(t, data, "invalid_request_error", "invalid_api_key")
		}
	}
	// Probes need the credential too.
	if resp, _ := tf.call("GET", tf.messages.URL+"/v1/models", ""); resp.StatusCode != 401 {
		t.Errorf("messages probe without key: %d", resp.StatusCode)
	}
}

func TestRecords(t *testing.T) {
	tf := newTestFake(t, func(c *config) { c.maxRecords = 3 })
	// Odd spacing, escapes and raw UTF-8: the record must keep the bytes.
	body := "{ \"model\" : \"m\",\n\t\"max_tokens\":10, \"messages\":[{\"role\":\"user\",\"content\":\"h\\u00e9llo — ünïcode\"}] }  "
	tf.call("POST", tf.messages.URL+"/v1/messages?beta=true", body, "X-Api-Key", "k1", "Anthropic-Version", "2023-06-01")
	recs := tf.records()
	if len(recs) != 1 {
		t.Fatalf("%d records", len(recs))
	}
	r := recs[0]
	if !bytes.Equal(r.Body, []byte(body)) {
		t.Errorf("recorded body %q, want %q", r.Body, body)
	}
	if r.Format != "messages" || r.Name != "primary" || r.Method != "POST" || r.Path != "/v1/messages" || r.Query != "beta=true" ||
		r.Headers.Get("X-Api-Key") != "k1" || r.Headers.Get("Anthropic-Version") != "2023-06-01" || r.At.IsZero() || r.Seq != 1 {
		t.Errorf("record %+v", r)
	}

	// The wire format: body in base64, at in RFC 3339.
	_, data := tf.call("GET", tf.control.URL+"/requests", "")
	var raw []map[string]any
	mustUnmarshal(t, data, &raw)
	if got := keys(t, raw[0]); got != "at,body,format,headers,host,method,name,path,query,seq" {
		t.Errorf("record keys %s", got)
	}

	// The ring keeps the newest, oldest first.
	for i := range 4 {
		tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", `{"n":`+itoa(i)+`}`)
	}
	recs = tf.records()
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	for i, r := range recs {
		if want := `{"n":` + itoa(i+1) + `}`; string(r.Body) != want || r.Format != "chat_completions" || r.Seq != uint64(i+3) {
			t.Errorf("record %d: %s seq %d, want %s", i, r.Body, r.Seq, want)
		}
	}

	// Filters.
	_, data = tf.call("GET", tf.control.URL+"/requests?format=messages", "")
	if compactJSON(t, string(data)) != "[]" {
		t.Errorf("filtered records %s", data)
	}

	// Reset clears records, counters and controls.
	tf.setControl(`{"status":500}`)
	tf.call("POST", tf.control.URL+"/reset", "")
	if recs := tf.records(); len(recs) != 0 {
		t.Errorf("%d records after reset", len(recs))
	}
	_, data = tf.call("GET", tf.control.URL+"/stats", "")
	if compactJSON(t, string(data)) != `{"chat_completions":0,"chat_completions_hung":0,"chat_completions_in_flight":0,"chat_completions_peak_in_flight":0,"chat_completions_probes":0,"messages":0,"messages_hung":0,"messages_in_flight":0,"messages_peak_in_flight":0,"messages_probes":0}` {
		t.Errorf("stats after reset %s", data)
	}
	if resp, _ := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple); resp.StatusCode != 200 {
		t.Errorf("status after reset %d", resp.StatusCode)
	}
}

func TestAbortAfterEvents(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"abort_after_events":4}`)

	resp, data, err := tf.do("POST", tf.messages.URL+"/v1/messages", strings.Replace(messagesSimple, `"max_tokens":100`, `"max_tokens":100,"stream":true`, 1))
	if err == nil {
		t.Errorf("messages stream ended cleanly, want a reset")
	}
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
	evs := parseSSE(t, data)
	if got := eventNames(evs); got != "message_start content_block_start ping content_block_delta" {
		t.Errorf("messages events before the reset: %s", got)
	}

	_, data, err = tf.do("POST", tf.chatCompletions.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`)
	if err == nil {
		t.Errorf("chat completions stream ended cleanly, want a reset")
	}
	if evs := parseSSE(t, data); len(evs) != 4 {
		t.Errorf("chat completions: %d events before the reset, want 4", len(evs))
	}

	// Non-streaming replies are not affected.
	if resp, _ := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple); resp.StatusCode != 200 {
		t.Errorf("non-streaming: %d", resp.StatusCode)
	}
	// A stream shorter than the limit completes.
	tf.setControl(`{"abort_after_events":100}`)
	tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[]}`)
}

func TestDelaysStillAnswer(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"latency_ms":1,"event_delay_ms":1,"reply_words":2}`)
	evs := messagesStream(t, tf, `{"model":"m","stream":true,"messages":[]}`)
	if len(evs) != 3+2+3 {
		t.Errorf("%d events", len(evs))
	}
	if resp, _ := tf.call("GET", tf.chatCompletions.URL+"/v1/models", ""); resp.StatusCode != 200 {
		t.Errorf("probe: %d", resp.StatusCode)
	}
}

func TestControlAPI(t *testing.T) {
	tf := newTestFake(t, nil)
	for _, body := range []string{
		`{"format":"responses_v0"}`,
		`{"status":200}`,
		`{"latency_ms":-1}`,
		`{"statsu":500}`,
		`{"status":"500"}`,
		`not json`,
	} {
		resp, data := tf.call("POST", tf.control.URL+"/control", body)
		if resp.StatusCode != 400 || !json.Valid(data) {
			t.Errorf("POST /control %s: %d %s", body, resp.StatusCode, data)
		}
	}

	// Absent fields stay as they were; format "" sets both.
	tf.setControl(`{"format":"messages","latency_ms":5,"tool_call":true}`)
	tf.setControl(`{"reply_words":3}`)
	_, data := tf.call("GET", tf.control.URL+"/control", "")
	var ctl map[string]Controls
	mustUnmarshal(t, data, &ctl)
	if want := (Controls{LatencyMS: 5, ToolCall: true, ReplyWords: 3}); ctl["messages"] != want {
		t.Errorf("messages controls %+v, want %+v", ctl["messages"], want)
	}
	if want := (Controls{ReplyWords: 3}); ctl["chat_completions"] != want {
		t.Errorf("chat completions controls %+v, want %+v", ctl["chat_completions"], want)
	}

	resp, data := tf.call("GET", tf.control.URL+"/healthz", "")
	if resp.StatusCode != 200 {
		t.Errorf("healthz %d %s", resp.StatusCode, data)
	}
	if resp, _ := tf.call("GET", tf.control.URL+"/v1/models", ""); resp.StatusCode != 404 {
		t.Errorf("control serves vendor paths: %d", resp.StatusCode)
	}
}

// hang holds requests, probes too, without an answer until it is turned
// off; then their connections are dropped and nothing was generated.
func TestHang(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"format":"messages","hang":true}`)
	type result struct {
		err  error
		code int
	}
	done := make(chan result, 2)
	send := func(method, url, body string) {
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("x-api-key", "k")
		resp, err := http.DefaultClient.Do(req)
		r := result{err: err}
		if err == nil {
			r.code = resp.StatusCode
			resp.Body.Close()
		}
		done <- r
	}
	go send("POST", tf.messages.URL+"/v1/messages", messagesSimple)
	go send("GET", tf.messages.URL+"/v1/models", "")
	// Both are received and held.
	eventually.That(t, 5*time.Second, "one request and one probe held", func() (bool, string) {
		hung, probes := tf.f.messagesCount.hung.Load(), tf.f.messagesCount.probes.Load()
		return hung == 1 && probes == 1, fmt.Sprintf("hung %d, probes %d", hung, probes)
	})
	select {
	case r := <-done:
		t.Fatalf("a hung request was answered: %+v", r)
	default:
	}
	// chat completions is not hung.
	if resp, _ := tf.call("POST", tf.chatCompletions.URL+"/v1/chat/completions", chatSimple); resp.StatusCode != 200 {
		t.Fatalf("chat completions while messages hangs: %d", resp.StatusCode)
	}
	tf.setControl(`{"format":"messages","hang":false}`)
	for range 2 {
		if r := <-done; r.err == nil {
			t.Fatalf("a released hung request got an answer: %d", r.code)
		}
	}
	if resp, _ := tf.call("POST", tf.messages.URL+"/v1/messages", messagesSimple); resp.StatusCode != 200 {
		t.Fatalf("after the hang: %d", resp.StatusCode)
	}
}

// first_event_delay_ms holds a stream's first event back, not its headers:
// the client has the 200 before the vendor sends the first event.
func TestFirstEventDelay(t *testing.T) {
	tf := newTestFake(t, nil)
	tf.setControl(`{"first_event_delay_ms":300,"reply_words":2}`)
	resp, err := http.Post(tf.messages.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	headersAt := time.Now().UnixNano()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %v", resp.StatusCode, err)
	}
	evs := parseSSE(t, body)
	if len(evs) != 3+2+3 || evs[0].sentNano <= headersAt {
		t.Fatalf("%d events, the first sent %d ns after the headers arrived", len(evs), evs[0].sentNano-headersAt)
	}
}
