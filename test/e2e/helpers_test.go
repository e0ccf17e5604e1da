// Package e2e tests the gateway end to end: real Envoy, the real sidecar,
// real redis-server and the fake vendors, all on loopback, spoken to over
// HTTP through Envoy's listener.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/test/launch"
)

const (
	alphaModel = "claude-sonnet-4-5"
	betaModel  = "gpt-4o-mini"
	alphaPath  = "/alpha/v1/messages"
	betaPath   = "/beta/v1/chat/completions"
)

// upstreamModel is the model the tests send each upstream.
var upstreamModel = map[string]string{"alpha": alphaModel, "beta": betaModel}

// noLimits is an account with neither rate nor daily limits.
var noLimits = account.Limits{}

func messagesBody(stream bool, extra string) []byte {
	return []byte(fmt.Sprintf(`{"model":%q,"max_tokens":256,"stream":%t,"system":"Be brief.",`+
		`"messages":[{"role":"user","content":"Hello there, gateway"}]%s}`, alphaModel, stream, extra))
}

func chatCompletionsBody(stream, includeUsage bool, extra string) []byte {
	opts := ""
	if includeUsage {
		opts = `,"stream_options":{"include_usage":true}`
	}
	return []byte(fmt.Sprintf(`{"model":%q,"max_tokens":256,"stream":%t%s,`+
		`"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hello there, gateway"}]%s}`,
		betaModel, stream, opts, extra))
}

func messagesHeaders(key string) map[string]string {
	return map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
}

func chatCompletionsHeaders(key string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + key, "content-type": "application/json"}
}

// event is one SSE event and when the client received it.
type event struct {
	Name string
	Data string
	At   time.Time
}

// open posts a request and returns the response with its body unread, for
// tests that read a stream piece by piece or cut it short.
func open(t *testing.T, ctx context.Context, s *launch.Stack, path string, header map[string]string, body []byte) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL+path, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// stream posts a request and reads its SSE reply event by event as it
// arrives.
func stream(t *testing.T, s *launch.Stack, path string, header map[string]string, body []byte) (*http.Response, []event) {
	t.Helper()
	resp := open(t, context.Background(), s, path, header, body)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp, nil
	}
	return resp, readEvents(t, bufio.NewReader(resp.Body))
}

func readEvents(t *testing.T, r *bufio.Reader) []event {
	t.Helper()
	var evs []event
	var cur event
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return evs
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if cur.Data != "" || cur.Name != "" {
				cur.At = time.Now()
				evs = append(evs, cur)
				cur = event{}
			}
		case strings.HasPrefix(line, "event:"):
			cur.Name = strings.TrimSpace(line[6:])
		case strings.HasPrefix(line, "data:"):
			cur.Data += strings.TrimSpace(line[5:])
		}
	}
}

// tokens is usage as a vendor reported it.
type tokens struct {
	Input, Output, CacheWrite, CacheRead int64
}

// messagesUsage reads usage from a the messages format reply (JSON or events).
func messagesUsage(t *testing.T, body []byte, evs []event) tokens {
	t.Helper()
	var u tokens
	type usage struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	}
	if evs == nil {
		var m struct{ Usage usage }
		mustJSON(t, body, &m)
		return tokens{m.Usage.InputTokens, m.Usage.OutputTokens, m.Usage.CacheCreationInputTokens, m.Usage.CacheReadInputTokens}
	}
	for _, e := range evs {
		switch e.Name {
		case "message_start":
			var m struct{ Message struct{ Usage usage } }
			mustJSON(t, []byte(e.Data), &m)
			u.Input, u.CacheWrite, u.CacheRead = m.Message.Usage.InputTokens, m.Message.Usage.CacheCreationInputTokens, m.Message.Usage.CacheReadInputTokens
		case "message_delta":
			var m struct{ Usage usage }
			mustJSON(t, []byte(e.Data), &m)
			u.Output = m.Usage.OutputTokens
		}
	}
	return u
}

// chatCompletionsUsage reads usage from a the chat-completions format reply; prompt tokens include cached
// ones.
func chatCompletionsUsage(t *testing.T, body []byte, evs []event) tokens {
	t.Helper()
	type usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
	conv := func(x usage) tokens {
		c := x.PromptTokensDetails.CachedTokens
		return tokens{Input: x.PromptTokens - c, Output: x.CompletionTokens, CacheRead: c}
	}
	if evs == nil {
		var m struct{ Usage usage }
		mustJSON(t, body, &m)
		return conv(m.Usage)
	}
	for _, e := range evs {
		if e.Data == "[DONE]" {
			continue
		}
		var m struct{ Usage *usage }
		mustJSON(t, []byte(e.Data), &m)
		if m.Usage != nil {
			return conv(*m.Usage)
		}
	}
	t.Fatal("no usage chunk in the stream")
	return tokens{}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("not JSON (%v): %s", err, b)
	}
}

// num reads a number at a dotted path of a decoded JSON object.
func num(t *testing.T, m map[string]any, path string) float64 {
	t.Helper()
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			t.Fatalf("%s: not an object at %q", path, p)
		}
		cur = obj[p]
	}
	f, ok := cur.(float64)
	if !ok {
		t.Fatalf("%s = %v (%T), want a number", path, cur, cur)
	}
	return f
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }
