package responses

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/internal/usage"
)

const eventStream = "text/event-stream"

func meterOf(req format.Request, body []byte, contentType string) func(chunks ...[]byte) format.Meter {
	return func(chunks ...[]byte) format.Meter {
		return formattest.Feed(Format{}.NewMeter(req, body, contentType), chunks...)
	}
}

// The final response's figures: input without the cached tokens, reasoning
// inside output, the tier the reply reports, and the built-in tool calls
// its output items show (two searches; two calls in one container are one
// code interpreter session).
func TestJSONMeter(t *testing.T) {
	formattest.CheckJSON(t, formattest.Read(t, "response.json"), meterOf(format.Request{}, nil, "application/json"), usage.Report{
		Usage: usage.Usage{Input: 176, CacheRead: 1024, Output: 300, Reasoning: 256,
			WebSearches: 2, FileSearches: 1, CodeInterpreter: 1, ImageGenerations: 1},
		Model: "gpt-5-2025-08-07", ServiceTier: "priority",
	})
	formattest.CheckJSON(t, formattest.Read(t, "compaction.json"), meterOf(format.Request{}, nil, "application/json"), usage.Report{
		Usage: usage.Usage{Input: 5000, Output: 120},
	})
}

func TestStreamMeter(t *testing.T) {
	formattest.CheckStream(t, formattest.Read(t, "stream.sse"), meterOf(format.Request{Stream: true}, nil, eventStream), usage.Report{
		Usage: usage.Usage{Input: 512, CacheRead: 1536, Output: 700, Reasoning: 640, WebSearches: 1},
		Model: "gpt-5.1-codex", ServiceTier: "default",
	})
	// An incomplete response bills what it reports.
	formattest.CheckStream(t, formattest.Read(t, "incomplete.sse"), meterOf(format.Request{Stream: true}, nil, eventStream), usage.Report{
		Usage: usage.Usage{Input: 100, Output: 16}, Model: "gpt-5.1-codex", ServiceTier: "flex",
	})
	// A failed response that reports no usage bills nothing, exactly.
	formattest.CheckStream(t, formattest.Read(t, "failed.sse"), meterOf(format.Request{Stream: true}, nil, eventStream), usage.Report{
		Model: "gpt-5.1-codex", ServiceTier: "auto",
	})
}

// The stored response a reply names, and whether it has ended.
func TestStoredResponse(t *testing.T) {
	for _, tc := range []struct {
		file, ct, id string
		final        bool
	}{
		{"response.json", "application/json", "resp_68af4c1b2c8c8190a1b2c3d4e5f60718", true},
		{"queued.json", "application/json", "resp_bg1", false},
		{"compaction.json", "application/json", "cmp_1", true},
		{"stream.sse", eventStream, "resp_s1", true},
		{"incomplete.sse", eventStream, "resp_s1", true},
	} {
		m := meterOf(format.Request{}, nil, tc.ct)(formattest.Read(t, tc.file))
		if id, final := m.(format.Stored).Response(); id != tc.id || final != tc.final {
			t.Errorf("%s: %q %v, want %q %v", tc.file, id, final, tc.id, tc.final)
		}
	}
	// The id is known from the stream's first event, before the end.
	rec := formattest.Read(t, "stream.sse")
	first := rec[:bytes.Index(rec, []byte("\n\n"))+2]
	m := meterOf(format.Request{}, nil, eventStream)(first)
	if id, final := m.(format.Stored).Response(); id != "resp_s1" || final {
		t.Errorf("after the first event: %q %v", id, final)
	}
	// A broken JSON reply names nothing.
	rj := formattest.Read(t, "response.json")
	if id, _ := meterOf(format.Request{}, nil, "application/json")(rj[:len(rj)/2]).(format.Stored).Response(); id != "" {
		t.Errorf("a cut reply names %q", id)
	}
}

// A stream cut before its terminal event is estimated: the tool calls of
// the items done so far, output from the text seen, input from the
// request.
func TestStreamCutIsEstimated(t *testing.T) {
	rec := formattest.Read(t, "stream.sse")
	cut := rec[:bytes.Index(rec, []byte("event: response.output_item.added\ndata: {\"output_index\":3"))]
	body := formattest.Read(t, "request.json")
	m := meterOf(format.Request{Stream: true}, body, eventStream)(cut)
	for _, complete := range []bool{true, false} {
		u := m.Usage(complete)
		if !u.Estimated || u.WebSearches != 1 || u.Output == 0 || u.Input == 0 || u.CacheRead != 0 {
			t.Errorf("Usage(%v) = %+v", complete, u)
		}
	}
	// A queued background reply has no usage yet: estimated.
	q := meterOf(format.Request{Background: true}, body, "application/json")(formattest.Read(t, "queued.json"))
	if u := q.Usage(true); !u.Estimated || u.Input == 0 || u.Output != 0 {
		t.Errorf("queued: %+v", u)
	}
}

func TestStreamMeterMemory(t *testing.T) {
	var stream bytes.Buffer
	for range 4000 {
		stream.WriteString(`event: response.output_text.delta` + "\n" + `data: {"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":0,"content_index":0,"delta":" word","logprobs":[]}` + "\n\n")
	}
	formattest.CheckStreamMemory(t, stream.Bytes(), 20<<10, func() format.Meter {
		return Format{}.NewMeter(format.Request{Stream: true}, nil, eventStream)
	})
}

func FuzzStreamMeter(f *testing.F) {
	for _, name := range []string{"stream.sse", "incomplete.sse", "failed.sse"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2), uint16(len(rec)/3))
	}
	body := []byte(`{"model":"m","input":"Hi there"}`)
	f.Fuzz(func(t *testing.T, stream []byte, i, j uint16) {
		formattest.CheckSplitsAgree(t, stream, []uint16{i, j}, meterOf(format.Request{Stream: true}, body, eventStream), true, false)
	})
}

func FuzzJSONMeter(f *testing.F) {
	for _, name := range []string{"response.json", "queued.json", "compaction.json"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2))
	}
	f.Fuzz(func(t *testing.T, reply []byte, i uint16) {
		formattest.CheckSplitsAgree(t, reply, []uint16{i}, meterOf(format.Request{}, nil, "application/json"), true)
	})
}

// The ids of a reply's output items, which later requests may name alone:
// in the order they appear, once each, whatever the chunking; none from a
// broken reply; valid ids only, and at most format.MaxItems.
func TestStoredItems(t *testing.T) {
	stream := formattest.Read(t, "stream.sse")
	want := []string{"rs_1", "ws_1", "fc_1", "msg_1"}
	for cut := 0; cut <= len(stream); cut++ {
		m := meterOf(format.Request{Stream: true}, nil, eventStream)(stream[:cut], stream[cut:])
		if got := m.(format.StoredItems).Items(); !slices.Equal(got, want) {
			t.Fatalf("stream cut at %d: items %v, want %v", cut, got, want)
		}
	}
	// A stream cut short has bound what it showed.
	half := bytes.Index(stream, []byte(`"fc_1"`))
	m := meterOf(format.Request{Stream: true}, nil, eventStream)(stream[:half])
	if got := m.(format.StoredItems).Items(); !slices.Equal(got, want[:2]) {
		t.Errorf("cut stream: items %v", got)
	}

	reply := formattest.Read(t, "response.json")
	json := meterOf(format.Request{}, nil, "application/json")
	if got := json(reply).(format.StoredItems).Items(); !slices.Equal(got, []string{"rs_1", "ws_1", "ws_2", "ci_1", "ci_2", "fs_1", "ig_1", "msg_1"}) {
		t.Errorf("JSON reply: items %v", got)
	}
	if got := json(reply[:len(reply)-2]).(format.StoredItems).Items(); len(got) != 0 {
		t.Errorf("broken JSON reply: items %v", got)
	}
	var many bytes.Buffer
	many.WriteString(`{"id":"resp_1","status":"completed","output":[{"id":"../x"},{"id":5}`)
	for i := range format.MaxItems + 10 {
		fmt.Fprintf(&many, `,{"type":"message","id":"msg_%d"}`, i)
	}
	many.WriteString(`]}`)
	got := json(many.Bytes()).(format.StoredItems).Items()
	if len(got) != format.MaxItems || got[0] != "msg_0" {
		t.Errorf("%d items, first %q", len(got), got[0])
	}
}
