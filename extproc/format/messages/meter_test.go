package messages

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

const eventStream = "text/event-stream; charset=utf-8"

// meter runs a reply through a fresh meter in the given chunks.
func meter(body []byte, contentType string, chunks ...[]byte) format.Meter {
	return formattest.Feed(Format{}.NewMeter(format.Request{}, body, contentType), chunks...)
}

// meterOf returns a constructor of meters for replies of contentType to body.
func meterOf(body []byte, contentType string) func(chunks ...[]byte) format.Meter {
	return func(chunks ...[]byte) format.Meter { return meter(body, contentType, chunks...) }
}

// forEachSplit checks a recording whole, split in two at every offset, and
// one byte at a time, in each line-ending variant.
func forEachSplit(t *testing.T, rec []byte, check func(how string, m format.Meter)) {
	formattest.ForEachSplit(rec, meterOf(nil, eventStream), check)
}

func TestStreamMeterRecordings(t *testing.T) {
	tests := []struct {
		file string
		want usage.Report
	}{
		{"text.sse", usage.Report{Usage: usage.Usage{Input: 25, Output: 31}, Model: "claude-sonnet-4-5-20250929", ServiceTier: "standard"}},
		{"tool_use.sse", usage.Report{Usage: usage.Usage{Input: 472, Output: 89, CacheWrite5m: 1536, CacheRead: 20480}, Model: "claude-opus-4-1-20250805"}},
		// Input and cache figures repeated in message_delta replace the
		// zeros of message_start.
		// Cache writes split by lifetime, web searches and the service tier,
		// reported in message_start and repeated in message_delta.
		{"every_dimension.sse", usage.Report{Usage: usage.Usage{Input: 30, Output: 120, CacheWrite5m: 1000, CacheWrite1h: 2000, CacheRead: 4000, WebSearches: 2}, Model: "claude-opus-4-8", ServiceTier: "priority"}},
		{"thinking.sse", usage.Report{Usage: usage.Usage{Input: 3210, Output: 412, CacheWrite5m: 2048}, Model: "claude-sonnet-4-5-20250929"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			// message_stop was seen, so the figures are final even if the
			// body did not reach the client.
			formattest.CheckStream(t, formattest.Read(t, tt.file), meterOf(nil, eventStream), tt.want)
		})
	}
}

// deltaText is the text the content_block_delta events of a recording carry.
func deltaText(t *testing.T, rec []byte) []byte {
	var text []byte
	for _, line := range bytes.Split(rec, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var ev struct {
			Type  string
			Delta map[string]any
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "content_block_delta" {
			continue
		}
		for _, k := range []string{"text", "partial_json", "thinking"} {
			if s, ok := ev.Delta[k].(string); ok {
				text = append(text, s...)
			}
		}
	}
	return text
}

func TestStreamMeterError(t *testing.T) {
	rec := formattest.Read(t, "error.sse")
	want := usage.Report{Usage: usage.Usage{Input: 120, Output: tokens.MessagesRatio.Count(int64(len(deltaText(t, rec))))}, Model: "claude-haiku-4-5-20251001", Estimated: true}
	if want.Output < 5 {
		t.Fatalf("test text too short: %d tokens", want.Output)
	}
	forEachSplit(t, rec, func(how string, m format.Meter) {
		if got := m.Usage(true); got != want {
			t.Fatalf("%s: got %+v, want %+v", how, got, want)
		}
	})
}

func TestStreamMeterTruncated(t *testing.T) {
	body := formattest.Read(t, "request.json")
	rec := formattest.Read(t, "tool_use.sse")
	inputEstimate := estimateInput(body)
	if inputEstimate < 100 {
		t.Fatalf("input estimate %d is implausibly small", inputEstimate)
	}
	events := bytes.SplitAfter(rec, []byte("\n\n"))
	for n := range len(events) - 1 { // all but the last event: no message_stop
		stream := bytes.Join(events[:n], nil)
		got := meter(body, eventStream, stream).Usage(false)
		if n >= len(events)-2 {
			// message_delta's final count arrived: exact, message_stop or not.
			want := usage.Report{Usage: usage.Usage{Input: 472, CacheWrite5m: 1536, CacheRead: 20480, Output: 89}, Model: "claude-opus-4-1-20250805"}
			if got != want {
				t.Fatalf("%d events, final usage seen: got %+v, want %+v", n, got, want)
			}
			continue
		}
		if !got.Estimated {
			t.Fatalf("%d events: not estimated", n)
		}
		text := deltaText(t, stream)
		switch n {
		case 0:
			want := usage.Report{Usage: usage.Usage{Input: inputEstimate}, Estimated: true}
			if got != want {
				t.Fatalf("no events: got %+v, want %+v", got, want)
			}
		default:
			// Observed input and cache figures stand; output is the larger
			// of the last reported figure and the counted text.
			reported := int64(2)
			if n >= len(events)-2 {
				reported = 89 // message_delta seen
			}
			want := usage.Report{Usage: usage.Usage{Input: 472, CacheWrite5m: 1536, CacheRead: 20480, Output: max(reported, tokens.MessagesRatio.Count(int64(len(text))))}, Model: "claude-opus-4-1-20250805", Estimated: true}
			if got != want {
				t.Fatalf("%d events: got %+v, want %+v", n, got, want)
			}
		}
	}
	// Cut at every byte before message_delta has fully arrived: never a
	// panic, always estimated, never less than what the vendor had reported.
	deltaEnd := len(rec) - len(events[len(events)-1]) - len(events[len(events)-2])
	for i := range deltaEnd {
		got := meter(body, eventStream, rec[:i]).Usage(false)
		if !got.Estimated || got.Input <= 0 || got.Output < 0 {
			t.Fatalf("cut at %d: %+v", i, got)
		}
	}
}

func TestStreamMeterLongOutputIsExtrapolated(t *testing.T) {
	var stream bytes.Buffer
	stream.WriteString("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"m\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
	sentence := "The gateway meters every streamed reply without holding it. "
	var all strings.Builder
	for range 1000 {
		fmt.Fprintf(&stream, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":%q}}\n\n", sentence)
		all.WriteString(sentence)
	}
	m := meter(nil, eventStream, stream.Bytes())
	got := m.Usage(false)
	// Messages-format text is estimated at the calibrated bytes per token.
	want := tokens.MessagesRatio.Count(int64(all.Len()))
	if got.Output != want {
		t.Fatalf("output %d, want about %d", got.Output, want)
	}
}

func TestJSONMeter(t *testing.T) {
	tests := []struct {
		file string
		want usage.Report
	}{
		{"message.json", usage.Report{Usage: usage.Usage{Input: 2095, Output: 503}, Model: "claude-sonnet-4-5-20250929"}},
		{"message_cache.json", usage.Report{Usage: usage.Usage{Input: 50, Output: 74, CacheWrite5m: 1024, CacheRead: 100000}, Model: "claude-opus-4-1-20250805", ServiceTier: "standard"}},
		{"message_every.json", usage.Report{Usage: usage.Usage{Input: 30, Output: 500, CacheWrite5m: 1000, CacheWrite1h: 2000, CacheRead: 4000, WebSearches: 3}, Model: "claude-opus-4-8", ServiceTier: "priority"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			rec := formattest.Read(t, tt.file)
			for _, ct := range []string{"application/json", ""} {
				formattest.CheckJSON(t, rec, meterOf(nil, ct), tt.want)
			}
		})
	}
}

func TestJSONMeterTruncated(t *testing.T) {
	body := formattest.Read(t, "request.json")
	rec := formattest.Read(t, "message_cache.json")
	cut := bytes.Index(rec, []byte(`"usage"`))
	got := meter(body, "application/json", rec[:cut]).Usage(false)
	text := []byte("I'll look that up.")
	text = append(text, `{"location":"San Francisco, CA","unit":"celsius"}`...)
	want := usage.Report{Usage: usage.Usage{Input: estimateInput(body), Output: tokens.MessagesRatio.Count(int64(len(text)))}, Model: "claude-opus-4-1-20250805", Estimated: true}
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// Without usage but otherwise whole.
	got = meter(body, "application/json", []byte(`{"model":"m","content":[{"type":"text","text":"hello world"}]}`)).Usage(true)
	want = usage.Report{Usage: usage.Usage{Input: estimateInput(body), Output: 4}, Model: "m", Estimated: true} // 11 bytes at 3.5 a token
	if got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestJSONMeterOversized(t *testing.T) {
	m := Format{}.NewMeter(format.Request{}, nil, "application/json")
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	m.Write([]byte(`{"model":"m","usage":{"input_tokens":1,"output_tokens":2},"pad":"`))
	for range 40 {
		m.Write(chunk)
	}
	m.Write([]byte(`"}`))
	if got := m.Usage(true); !got.Estimated {
		t.Fatalf("an oversized reply should be estimated: %+v", got)
	}
	if n := len(m.(*jsonMeter).Bytes()); n > format.MaxJSONBody {
		t.Fatalf("buffered %d bytes", n)
	}
}

func TestErrorBody(t *testing.T) {
	// The vendor's documented error types.
	documented := []string{"invalid_request_error", "authentication_error", "billing_error", "permission_error",
		"not_found_error", "request_too_large", "rate_limit_error", "api_error", "timeout_error", "overloaded_error"}
	types := formattest.CheckErrorBodies(t, Format{}, documented, func(b []byte) (string, string, error) {
		var got struct {
			Type  string
			Error struct{ Type, Message string }
		}
		err := json.Unmarshal(b, &got)
		if err == nil && got.Type != "error" {
			err = fmt.Errorf("type %q, want error", got.Type)
		}
		return got.Error.Type, got.Error.Message, err
	})
	// The SDKs raise by status; these are the types whose meaning a client sees.
	if types[format.Unauthenticated] != "authentication_error" || types[format.RateLimited] != "rate_limit_error" ||
		types[format.NotFound] != "not_found_error" || types[format.ModelNotFound] != "invalid_request_error" {
		t.Fatalf("types %q", types)
	}
}

// streamPrefix and deltaEvent make up the benchmark's stream.
const streamPrefix = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5-20250929\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"

const deltaEvent = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello, world \u00e9\\u00e9\"}}\n\n"

// BenchmarkStreamMeterWrite measures one content_block_delta event per
// operation, in the steady state: buffers grown and the text sample full.
func BenchmarkStreamMeterWrite(b *testing.B) {
	m := meter(nil, eventStream, []byte(streamPrefix))
	formattest.BenchmarkWrite(b, m, []byte(deltaEvent), streamTextLimit)
}

func TestStreamMeterWriteDoesNotAllocate(t *testing.T) {
	// Before the sample fills, buffers grow a few times; after, never.
	m := meter(nil, eventStream, []byte(streamPrefix))
	formattest.CheckWriteDoesNotAllocate(t, m, []byte(deltaEvent), streamTextLimit+1, 50)
}

func FuzzStreamMeter(f *testing.F) {
	for _, name := range []string{"text.sse", "tool_use.sse", "thinking.sse", "error.sse"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2), uint16(len(rec)/3))
	}
	f.Add([]byte("data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-1,\"input_tokens\":1e2}}\n\n"), uint16(5), uint16(7))
	body := []byte(`{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"Hi there"}]}`)
	f.Fuzz(func(t *testing.T, stream []byte, i, j uint16) {
		formattest.CheckSplitsAgree(t, stream, []uint16{i, j}, meterOf(body, eventStream), true, false)
	})
}

func FuzzJSONMeter(f *testing.F) {
	for _, name := range []string{"message.json", "message_cache.json"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2))
	}
	f.Fuzz(func(t *testing.T, reply []byte, i uint16) {
		formattest.CheckSplitsAgree(t, reply, []uint16{i}, meterOf(nil, "application/json"), true)
	})
}

// TestStreamMeterMemory measures the heap an open stream keeps, after a
// realistic reply long enough to fill the text sample.
func TestStreamMeterMemory(t *testing.T) {
	var stream bytes.Buffer
	stream.WriteString(streamPrefix)
	for range 2000 {
		stream.WriteString(deltaEvent)
	}
	formattest.CheckStreamMemory(t, stream.Bytes(), 20<<10, func() format.Meter {
		return Format{}.NewMeter(format.Request{Stream: true}, nil, eventStream)
	})
}

// A stream without valid final figures is never free: a message_start
// without usage, or figures that are strings or negative, are estimated from
// the request and the streamed text, and flagged.
func TestStreamWithoutValidFiguresIsEstimated(t *testing.T) {
	rec := string(formattest.Read(t, "text.sse"))
	const start = `"usage":{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1,"service_tier":"standard"}`
	const delta = `"usage":{"output_tokens":31}`
	if !strings.Contains(rec, start) || !strings.Contains(rec, delta) {
		t.Fatal("recording changed")
	}
	body := []byte(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`)
	for name, rec := range map[string]string{
		"message_start without usage": strings.Replace(rec, ","+start, "", 1),
		"string input":                strings.Replace(rec, `"input_tokens":25`, `"input_tokens":"25"`, 1),
		"negative input":              strings.Replace(rec, `"input_tokens":25`, `"input_tokens":-25`, 1),
		"string output":               strings.Replace(rec, delta, `"usage":{"output_tokens":"31"}`, 1),
		"negative output":             strings.Replace(rec, delta, `"usage":{"output_tokens":-31}`, 1),
		"no message_delta usage":      strings.Replace(rec, ","+delta, "", 1),
	} {
		u := meter(body, eventStream, []byte(rec)).Usage(true)
		if !u.Estimated || u.Input == 0 || u.Output < 10 {
			t.Errorf("%s: %+v; want estimated, with input and the streamed text's output", name, u)
		}
	}
}
