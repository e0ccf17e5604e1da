package chatcompletions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

const eventStream = "text/event-stream"

// meter runs a reply through a fresh meter in the given chunks.
func meter(req format.Request, body []byte, contentType string, chunks ...[]byte) format.Meter {
	return formattest.Feed(Format{}.NewMeter(req, body, contentType), chunks...)
}

// meterOf returns a constructor of meters for replies of contentType to
// req and body.
func meterOf(req format.Request, body []byte, contentType string) func(chunks ...[]byte) format.Meter {
	return func(chunks ...[]byte) format.Meter { return meter(req, body, contentType, chunks...) }
}

// forEachSplit checks a recording whole, split in two at every offset, and
// one byte at a time, in each line-ending variant.
func forEachSplit(t *testing.T, req format.Request, body, rec []byte, check func(how string, m format.Meter)) {
	formattest.ForEachSplit(rec, meterOf(req, body, eventStream), check)
}

func TestStreamMeterUsageChunk(t *testing.T) {
	req := format.Request{Model: "m", Stream: true, IncludeUsage: true}
	tests := []struct {
		file string
		want usage.Report
	}{
		{"text_usage.sse", usage.Report{Usage: usage.Usage{Input: 93, CacheRead: 1024, Output: 46}, Model: "gpt-4o-2024-08-06", ServiceTier: "default"}},
		// completion_tokens already includes the reasoning tokens.
		{"every_dimension.sse", usage.Report{Usage: usage.Usage{Input: 700, CacheRead: 200, AudioInput: 100, Output: 350, AudioOutput: 50, Reasoning: 120}, Model: "gpt-5.4-2026-03-05", ServiceTier: "flex"}},
		{"reasoning_usage.sse", usage.Report{Usage: usage.Usage{Input: 2048, Output: 1290, Reasoning: 1216}, Model: "o4-mini-2025-04-16", ServiceTier: "default"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			formattest.CheckStream(t, formattest.Read(t, tt.file), meterOf(req, nil, eventStream), tt.want)
		})
	}
}

// chunkText is the text a recording's deltas carry, in order.
func chunkText(t *testing.T, rec []byte) []byte {
	var text []byte
	for _, line := range bytes.Split(rec, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok || string(data) == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string
					Refusal   *string
					ToolCalls []struct {
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				}
			}
		}
		if err := json.Unmarshal(data, &chunk); err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != nil {
				text = append(text, *c.Delta.Content...)
			}
			if c.Delta.Refusal != nil {
				text = append(text, *c.Delta.Refusal...)
			}
			for _, tc := range c.Delta.ToolCalls {
				text = append(text, tc.Function.Name...)
				text = append(text, tc.Function.Arguments...)
			}
		}
	}
	return text
}

// promptEstimate is the oracle for estimateInput on request.json: message
// text, tool calls and tool definitions, one per line, plus the template
// overhead.
func promptEstimate(t *testing.T, body []byte) int64 {
	var req struct {
		Messages []struct {
			Content   json.RawMessage
			ToolCalls []struct {
				Function struct{ Name, Arguments string }
			} `json:"tool_calls"`
		}
		Tools []json.RawMessage
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for _, m := range req.Messages {
		var s string
		var parts []struct{ Type, Text string }
		switch {
		case json.Unmarshal(m.Content, &s) == nil:
			text.WriteString(s + "\n")
		case json.Unmarshal(m.Content, &parts) == nil:
			for _, p := range parts {
				if p.Type == "text" {
					text.WriteString(p.Text + "\n")
				}
			}
		}
		for _, tc := range m.ToolCalls {
			text.WriteString(tc.Function.Name + "\n" + tc.Function.Arguments + "\n")
		}
	}
	for _, tool := range req.Tools {
		text.Write(tool)
		text.WriteString("\n")
	}
	return tokens.Count([]byte(text.String())) + 3*int64(len(req.Messages)) + 3
}

func TestStreamMeterWithoutUsage(t *testing.T) {
	body := formattest.Read(t, "request.json")
	req, err := Format{}.ParseRequest(body, "application/json")
	if err != nil {
		t.Fatal(err)
	}
	rec := formattest.Read(t, "tool_calls.sse")
	want := usage.Report{Usage: usage.Usage{Input: promptEstimate(t, body), Output: tokens.Count(chunkText(t, rec))}, Model: "gpt-4o-mini-2024-07-18", Estimated: true}
	if want.Input < 200 || want.Output < 20 {
		t.Fatalf("implausible expectation %+v", want)
	}
	if got := meter(req, body, eventStream, rec).Usage(true); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// Every split, without a request body to keep the input estimate cheap:
	// it is then the template overhead alone.
	want.Input = tokensPerReply
	forEachSplit(t, req, nil, rec, func(how string, m format.Meter) {
		if got := m.Usage(true); got != want {
			t.Fatalf("%s: got %+v, want %+v", how, got, want)
		}
	})
}

func TestStreamMeterTruncated(t *testing.T) {
	body := formattest.Read(t, "request.json")
	req := format.Request{Model: "gpt-4o", Stream: true, IncludeUsage: true}
	rec := formattest.Read(t, "text_usage.sse")
	events := bytes.SplitAfter(rec, []byte("\n\n"))
	events = events[:len(events)-1] // the empty rest after the last event
	usageAt := len(events) - 2      // the usage chunk, before [DONE]
	if !bytes.Contains(events[usageAt], []byte(`"usage":{`)) {
		t.Fatal("recording does not end with usage and [DONE]")
	}
	inputEstimate := estimateInput(body)
	for n := range len(events) + 1 {
		stream := bytes.Join(events[:n], nil)
		got := meter(req, body, eventStream, stream).Usage(false)
		var want usage.Report
		switch {
		case n == 0:
			want = usage.Report{Usage: usage.Usage{Input: inputEstimate}, Estimated: true}
		case n <= usageAt:
			want = usage.Report{Usage: usage.Usage{Input: inputEstimate, Output: tokens.Count(chunkText(t, stream))}, Model: "gpt-4o-2024-08-06", ServiceTier: "default", Estimated: true}
		default:
			// The usage chunk is final: exact, [DONE] or not.
			want = usage.Report{Usage: usage.Usage{Input: 93, CacheRead: 1024, Output: 46}, Model: "gpt-4o-2024-08-06", ServiceTier: "default"}
		}
		if got != want {
			t.Fatalf("%d events: got %+v, want %+v", n, got, want)
		}
	}
}

func TestStreamMeterErrorChunk(t *testing.T) {
	stream := []byte("data: {\"id\":\"c\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"partial answer\"}}]}\n\n" +
		"data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n")
	got := meter(format.Request{Stream: true}, nil, eventStream, stream).Usage(true)
	want := usage.Report{Usage: usage.Usage{Input: tokensPerReply, Output: tokens.Count([]byte("partial answer"))}, Model: "gpt-4o", Estimated: true}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestStreamMeterSeveralChoices(t *testing.T) {
	stream := []byte(`data: {"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"hello"}},{"index":1,"delta":{"content":" world"}}]}` + "\n\ndata: [DONE]\n\n")
	got := meter(format.Request{Stream: true}, nil, eventStream, stream).Usage(true)
	if want := tokens.Count([]byte("hello world")); got.Output != want || !got.Estimated {
		t.Fatalf("got %+v, want output %d", got, want)
	}
}

func TestJSONMeter(t *testing.T) {
	tests := []struct {
		file string
		want usage.Report
	}{
		{"completion.json", usage.Report{Usage: usage.Usage{Input: 1117, Output: 46}, Model: "gpt-4o-2024-08-06", ServiceTier: "default"}},
		// Audio in and out, reasoning, the priority tier: every figure split
		// out of the inclusive totals.
		{"completion_every.json", usage.Report{Usage: usage.Usage{Input: 700, CacheRead: 200, AudioInput: 100, Output: 350, AudioOutput: 50, Reasoning: 120}, Model: "gpt-audio-2025-08-28", ServiceTier: "priority"}},
		{"completion_cached.json", usage.Report{Usage: usage.Usage{Input: 86, CacheRead: 1920, Output: 300}, Model: "gpt-4.1-2025-04-14", ServiceTier: "default"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			formattest.CheckJSON(t, formattest.Read(t, tt.file), meterOf(format.Request{}, nil, "application/json"), tt.want)
		})
	}
}

func TestJSONMeterWithoutUsage(t *testing.T) {
	body := formattest.Read(t, "request.json")
	reply := []byte(`{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Sunny, 22 degrees.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"lookup","arguments":"{\"q\":1}"}}]},"finish_reason":"stop"}]}`)
	got := meter(format.Request{}, body, "application/json", reply).Usage(true)
	want := usage.Report{Usage: usage.Usage{Input: promptEstimate(t, body), Output: tokens.Count([]byte(`Sunny, 22 degrees.lookup{"q":1}`))}, Model: "gpt-4o", Estimated: true}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// Cut before usage: estimated too.
	rec := formattest.Read(t, "completion.json")
	cut := bytes.Index(rec, []byte(`"usage"`))
	got = meter(format.Request{}, body, "application/json", rec[:cut]).Usage(false)
	if !got.Estimated || got.Model != "gpt-4o-2024-08-06" || got.Output <= 0 || got.Input != promptEstimate(t, body) {
		t.Fatalf("truncated: %+v", got)
	}
}

func TestErrorBody(t *testing.T) {
	// The types the vendor sends.
	documented := []string{"invalid_request_error", "insufficient_quota", "request_forbidden", "requests", "server_error"}
	codes := map[string]any{}
	types := formattest.CheckErrorBodies(t, Format{}, documented, func(b []byte) (string, string, error) {
		var got struct{ Error map[string]any }
		if err := json.Unmarshal(b, &got); err != nil {
			return "", "", err
		}
		e := got.Error
		if param, ok := e["param"]; !ok || param != nil {
			return "", "", fmt.Errorf("param not null")
		}
		code, ok := e["code"]
		if !ok {
			return "", "", fmt.Errorf("no code")
		}
		typ, _ := e["type"].(string)
		msg, _ := e["message"].(string)
		codes[typ+" "+fmt.Sprint(code)] = true
		return typ, msg, nil
	})
	// Clients branch on these codes; a plain refusal has a null code.
	for _, want := range []string{"invalid_request_error model_not_found", "invalid_request_error invalid_api_key",
		"insufficient_quota daily_limit_exceeded", "requests rate_limit_exceeded", "invalid_request_error <nil>"} {
		if codes[want] == nil {
			t.Errorf("no error with type and code %q among %v", want, codes)
		}
	}
	if types[format.DailyLimit] == types[format.RateLimited] {
		t.Errorf("a daily limit must not read as a rate limit clients retry at once")
	}
	b := Format{}.ErrorBody(format.Invalid("max_tokens", "m"))
	if !bytes.Contains(b, []byte(`"param":"max_tokens"`)) {
		t.Errorf("param: %s", b)
	}
}

const chunkEvent = `data: {"id":"chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT","object":"chat.completion.chunk","created":1741569952,"model":"gpt-4o-2024-08-06","service_tier":"default","system_fingerprint":"fp_eb9dce56a8","choices":[{"index":0,"delta":{"content":" help"},"logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n"

// BenchmarkStreamMeterWrite measures one chunk per operation in the steady
// state. With include_usage the text is only sampled; without it, it is
// tokenized as it streams, in 8 KiB windows.
func BenchmarkStreamMeterWrite(b *testing.B) {
	for _, includeUsage := range []bool{true, false} {
		b.Run(fmt.Sprintf("include_usage=%v", includeUsage), func(b *testing.B) {
			m := Format{}.NewMeter(format.Request{Stream: true, IncludeUsage: includeUsage}, nil, eventStream)
			formattest.BenchmarkWrite(b, m, []byte(chunkEvent), streamTextLimit)
		})
	}
}

func TestStreamMeterWriteDoesNotAllocate(t *testing.T) {
	m := Format{}.NewMeter(format.Request{Stream: true, IncludeUsage: true}, nil, eventStream)
	formattest.CheckWriteDoesNotAllocate(t, m, []byte(chunkEvent), streamTextLimit, 70)
}

func FuzzStreamMeter(f *testing.F) {
	for _, name := range []string{"text_usage.sse", "tool_calls.sse", "reasoning_usage.sse"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2), uint16(len(rec)/3), false)
	}
	f.Add([]byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":9}}}\n\ndata: [DONE]\n\n"), uint16(3), uint16(40), true)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"Hi there"}]}`)
	f.Fuzz(func(t *testing.T, stream []byte, i, j uint16, includeUsage bool) {
		req := format.Request{Stream: true, IncludeUsage: includeUsage}
		formattest.CheckSplitsAgree(t, stream, []uint16{i, j}, meterOf(req, body, eventStream), true, false)
	})
}

func FuzzJSONMeter(f *testing.F) {
	for _, name := range []string{"completion.json", "completion_cached.json"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2))
	}
	f.Fuzz(func(t *testing.T, reply []byte, i uint16) {
		formattest.CheckSplitsAgree(t, reply, []uint16{i}, meterOf(format.Request{}, nil, "application/json"), true)
	})
}

// TestStreamMeterMemory measures the heap an open stream keeps, after a
// reply long enough to fill the text buffer, with and without include_usage,
// and when the gateway added it (the meter then also rewrites the stream).
func TestStreamMeterMemory(t *testing.T) {
	if err := tokens.Init(); err != nil { // the vocabulary is shared, not per stream
		t.Fatal(err)
	}
	var stream bytes.Buffer
	for range 2000 {
		stream.WriteString(chunkEvent)
	}
	for name, req := range map[string]format.Request{
		"include_usage=true":  {Stream: true, IncludeUsage: true},
		"include_usage=false": {Stream: true},
		"usage added":         addedUsage(t),
	} {
		t.Run(name, func(t *testing.T) {
			formattest.CheckStreamMemory(t, stream.Bytes(), 20<<10, func() format.Meter {
				return Format{}.NewMeter(req, nil, eventStream)
			})
		})
	}
}

// A request with web_search_options runs one search, which the reply's usage
// does not count.
func TestWebSearchIsCountedFromTheRequest(t *testing.T) {
	body := []byte(`{"model":"gpt-4o-search-preview","web_search_options":{},"messages":[{"role":"user","content":"news?"}]}`)
	req, err := Format{}.ParseRequest(body, "application/json")
	if err != nil || !req.WebSearch {
		t.Fatalf("ParseRequest: %+v, %v", req, err)
	}
	m := Format{}.NewMeter(req, body, "application/json")
	m.Write(formattest.Read(t, "completion.json"))
	if got := m.Usage(true); got.WebSearches != 1 || got.Estimated {
		t.Errorf("json: %+v", got)
	}
	s := Format{}.NewMeter(req, body, eventStream)
	s.Write(formattest.Read(t, "text_usage.sse"))
	if got := s.Usage(true); got.WebSearches != 1 || got.Estimated {
		t.Errorf("stream: %+v", got)
	}
	plain, _ := Format{}.ParseRequest([]byte(`{"model":"gpt-4o","messages":[]}`), "application/json")
	if plain.WebSearch {
		t.Error("no web_search_options, yet WebSearch")
	}
}

// A usage chunk whose final figures are strings or negative is not the
// vendor's word: the stream is estimated and flagged, never free.
func TestStreamWithoutValidFiguresIsEstimated(t *testing.T) {
	rec := string(formattest.Read(t, "every_dimension.sse"))
	if !strings.Contains(rec, `"prompt_tokens":1000,"completion_tokens":400`) {
		t.Fatal("recording changed")
	}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`)
	for name, rec := range map[string]string{
		"string completion":   strings.Replace(rec, `"completion_tokens":400`, `"completion_tokens":"400"`, 1),
		"negative completion": strings.Replace(rec, `"completion_tokens":400`, `"completion_tokens":-400`, 1),
		"string prompt":       strings.Replace(rec, `"prompt_tokens":1000`, `"prompt_tokens":"1000"`, 1),
	} {
		u := meter(format.Request{}, body, eventStream, []byte(rec)).Usage(true)
		if !u.Estimated || u.Input+u.CacheRead+u.AudioInput == 0 || u.Output+u.AudioOutput == 0 {
			t.Errorf("%s: %+v; want estimated, with input and output", name, u)
		}
	}
}
