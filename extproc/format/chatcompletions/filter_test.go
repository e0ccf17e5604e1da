package chatcompletions

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/internal/usage"
)

// addedUsage is a stream request whose client did not ask for usage, as
// ParseRequest returns it: the gateway asks the vendor for it.
func addedUsage(t testing.TB) format.Request {
	req, err := Format{}.ParseRequest([]byte(`{"model":"o4-mini","stream":true,"messages":[]}`), "application/json")
	if err != nil || req.Edit.IsZero() || req.IncludeUsage {
		t.Fatalf("ParseRequest: %+v, %v", req, err)
	}
	return req
}

// rewrite runs chunks through a fresh rewriter and returns what the client
// receives, the rewriter, and how many chunks were changed.
func rewrite(t testing.TB, req format.Request, chunks ...[]byte) ([]byte, format.Rewriter, int) {
	m, ok := Format{}.NewMeter(req, nil, eventStream).(format.Rewriter)
	if !ok {
		t.Fatal("NewMeter did not return a Rewriter")
	}
	var client []byte
	changed := 0
	for i, c := range chunks {
		p := append([]byte(nil), c...)
		out, ch := m.Rewrite(p, i == len(chunks)-1)
		if !ch && !bytes.Equal(out, p) {
			t.Fatalf("chunk %d: unchanged, yet out differs from it", i)
		}
		if ch {
			changed++
		}
		client = append(client, out...)
		for i := range p {
			p[i] = 'X' // the rewriter must not have kept p
		}
	}
	return client, m, changed
}

// forEachCut calls check with a stream whole, cut in two at every offset,
// in three at offsets around each event boundary, and byte by byte.
func forEachCut(stream []byte, check func(how string, chunks ...[]byte)) {
	check("whole", stream)
	for i := range len(stream) + 1 {
		check(fmt.Sprintf("split at %d", i), stream[:i], stream[i:])
	}
	for i := range len(stream) - 1 {
		if stream[i] == '\n' || stream[i] == '\r' {
			for j := i + 1; j < min(i+4, len(stream)); j++ {
				check(fmt.Sprintf("split at %d,%d", i, j), stream[:i], stream[i:j], stream[j:])
			}
		}
	}
	bytewise := make([][]byte, len(stream))
	for i := range stream {
		bytewise[i] = stream[i : i+1]
	}
	check("byte by byte", bytewise...)
}

// withoutUsage is what the vendor would have streamed without
// include_usage, derived from a recording with it: no usage chunk and no
// "usage":null member (which the vendor's chunks carry last, or before
// "obfuscation"). It also returns how many usage chunks it took out.
func withoutUsage(rec []byte) ([]byte, int) {
	var out []byte
	n := 0
	for _, ev := range bytes.SplitAfter(rec, []byte("\n\n")) {
		if bytes.Contains(ev, []byte(`"choices":[],"usage":{`)) {
			n++
			continue
		}
		out = append(out, bytes.ReplaceAll(ev, []byte(`,"usage":null`), nil)...)
	}
	return out, n
}

func TestUsageFilterRecordings(t *testing.T) {
	req := addedUsage(t)
	tests := []struct {
		file string
		want usage.Report
	}{
		{"text_usage.sse", usage.Report{Usage: usage.Usage{Input: 93, CacheRead: 1024, Output: 46}, Model: "gpt-4o-2024-08-06", ServiceTier: "default"}},
		// The vendor's exact figures, reasoning tokens included: the text
		// shows 5 words of 1290 output tokens.
		{"reasoning_usage.sse", usage.Report{Usage: usage.Usage{Input: 2048, Output: 1290, Reasoning: 1216}, Model: "o4-mini-2025-04-16", ServiceTier: "default"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			rec := formattest.Read(t, tt.file)
			client, n := withoutUsage(rec)
			if n != 1 || bytes.Contains(client, []byte(`"usage"`)) {
				t.Fatalf("recording has %d usage chunks", n)
			}
			want := formattest.LineEndings(client)
			for name, stream := range formattest.LineEndings(rec) {
				forEachCut(stream, func(how string, chunks ...[]byte) {
					got, m, _ := rewrite(t, req, chunks...)
					if !bytes.Equal(got, want[name]) {
						t.Fatalf("%s %s: client got\n%q\nwant\n%q", name, how, got, want[name])
					}
					for _, complete := range []bool{true, false} {
						if u := m.Usage(complete); u != tt.want {
							t.Fatalf("%s %s: Usage(%v) = %+v, want %+v", name, how, complete, u, tt.want)
						}
					}
				})
			}
		})
	}
}

func TestUsageFilterEvents(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"last member", `data: {"id":"a","choices":[{"index":0}],"usage":null}` + "\n\n", `data: {"id":"a","choices":[{"index":0}]}` + "\n\n"},
		{"before another", `data: {"id":"a","usage":null,"obfuscation":"x"}` + "\n\n", `data: {"id":"a","obfuscation":"x"}` + "\n\n"},
		{"first member", `data: {"usage":null,"id":"a"}` + "\n\n", `data: {"id":"a"}` + "\n\n"},
		{"only member", `data: {"usage":null}` + "\n\n", `data: {}` + "\n\n"},
		{"spaces", `data: { "id" : "a" , "usage" : null }` + "\n\n", `data: { "id" : "a" }` + "\n\n"},
		{"spaces, first", `data: { "usage" : null , "id":"a"}` + "\n\n", `data: { "id":"a"}` + "\n\n"},
		{"no space after colon", `data:{"id":"a","usage":null}` + "\n\n", `data:{"id":"a"}` + "\n\n"},
		{"two spaces after colon", `data:  {"id":"a","usage":null}` + "\n\n", `data:  {"id":"a"}` + "\n\n"},
		{"event name first", "event: message\n" + `data: {"id":"a","usage":null}` + "\n\n", "event: message\n" + `data: {"id":"a"}` + "\n\n"},
		{"comment first", ": ping\n" + `data: {"id":"a","usage":null}` + "\n\n", ": ping\n" + `data: {"id":"a"}` + "\n\n"},
		{"quoted in content", `data: {"choices":[{"delta":{"content":"\"usage\":null"}}],"usage":null}` + "\n\n", `data: {"choices":[{"delta":{"content":"\"usage\":null"}}]}` + "\n\n"},
		{"usage with choices", `data: {"choices":[{"index":0}],"usage":{"prompt_tokens":1}}` + "\n\n", `data: {"choices":[{"index":0}]}` + "\n\n"},
		{"usage chunk", `data: {"id":"a","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}` + "\n\n", ``},
		{"usage chunk, spaces", `data: {"id":"a","choices":[ ],"usage":{"prompt_tokens":1}}` + "\n\n", ``},
		{"usage chunk, usage first", `data: {"usage":{"prompt_tokens":1},"choices":[]}` + "\n\n", ``},
		// Left as they are: the client reads them the same either way.
		{"escaped key", `data: {"id":"a","\u0075sage":null}` + "\n\n", `data: {"id":"a","\u0075sage":null}` + "\n\n"},
		{"data on two lines", "data: {\"id\":\"a\",\ndata: \"usage\":null}\n\n", "data: {\"id\":\"a\",\ndata: \"usage\":null}\n\n"},
		{"field after data", `data: {"id":"a","usage":null}` + "\nid: 7\n\n", `data: {"id":"a","usage":null}` + "\nid: 7\n\n"},
		{"nested usage", `data: {"choices":[{"delta":{"usage":null}}]}` + "\n\n", `data: {"choices":[{"delta":{"usage":null}}]}` + "\n\n"},
		{"done", "data: [DONE]\n\n", "data: [DONE]\n\n"},
		{"not json", "data: usage\n\n", "data: usage\n\n"},
		{"error", `data: {"error":{"message":"m","type":"server_error","param":null,"code":null}}` + "\n\n", `data: {"error":{"message":"m","type":"server_error","param":null,"code":null}}` + "\n\n"},
		{"blank lines", "\n\n\n" + `data: {"usage":null}` + "\n\n\n", "\n\n\n" + `data: {}` + "\n\n\n"},
		{"unfinished at the end", `data: {"id":"a","usage":null}` + "\n", `data: {"id":"a","usage":null}` + "\n"},
	}
	req := addedUsage(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Between two other events, so that line endings around it
			// are exercised.
			const around = "data: {\"id\":\"b\"}\n\n"
			in, want := around+tt.in, around+tt.want
			if !strings.HasPrefix(tt.name, "unfinished") {
				in, want = in+around, want+around
			}
			for name, stream := range formattest.LineEndings([]byte(in)) {
				wantLE := formattest.LineEndings([]byte(want))[name]
				forEachCut(stream, func(how string, chunks ...[]byte) {
					if got, _, _ := rewrite(t, req, chunks...); !bytes.Equal(got, wantLE) {
						t.Fatalf("%s %s: got %q, want %q", name, how, got, wantLE)
					}
				})
			}
			for _, data := range bytes.Split([]byte(tt.want), []byte("\n")) {
				if d, ok := bytes.CutPrefix(data, []byte("data:")); ok && bytes.HasPrefix(bytes.TrimSpace(d), []byte("{")) && !strings.Contains(tt.name, "two lines") && !json.Valid(d) {
					t.Fatalf("rewritten data is not JSON: %s", d)
				}
			}
		})
	}
}

// A chunk that holds whole events needing no change is not rewritten, so
// Envoy receives no mutation for it.
func TestUsageFilterLeavesWholeEvents(t *testing.T) {
	stream := []byte(": ping\n\ndata: {\"id\":\"a\",\"choices\":[]}\n\ndata: [DONE]\n\n")
	got, _, changed := rewrite(t, addedUsage(t), stream[:8], stream[8:])
	if !bytes.Equal(got, stream) || changed != 0 {
		t.Fatalf("got %q with %d chunks changed", got, changed)
	}
	// Cut inside an event: the part is held back, then released.
	_, _, changed = rewrite(t, addedUsage(t), stream[:20], stream[20:])
	if changed != 2 {
		t.Fatalf("%d chunks changed, want 2", changed)
	}
}

// A chunk holding only the usage chunk becomes empty; the LF of a CRLF that
// ended it, arriving in the next chunk, goes with it.
func TestUsageFilterCRLFAcrossChunks(t *testing.T) {
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\r\n\r"
	got, m, _ := rewrite(t, addedUsage(t), []byte("data: {\"choices\":[{}],\"usage\":null}\r\n\r"), []byte("\n"+usage), []byte("\ndata: [DONE]\r\n\r\n"))
	if want := "data: {\"choices\":[{}]}\r\n\r\ndata: [DONE]\r\n\r\n"; string(got) != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if u := m.Usage(false); u.Input != 3 || u.Output != 4 || u.Estimated {
		t.Fatalf("usage %+v", u)
	}
}

// An event larger than the filter holds passes through as it arrives.
func TestUsageFilterLargeEvent(t *testing.T) {
	big := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("a", maxHeld) + "\"}}],\"usage\":null}\n\n"
	tail := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n"
	stream := []byte(big + tail)
	for _, at := range []int{0, 10, maxHeld / 2, maxHeld + 10, len(big) - 1, len(big), len(big) + 5} {
		got, m, _ := rewrite(t, addedUsage(t), stream[:at], stream[at:])
		if want := big + "data: [DONE]\n\n"; string(got) != want {
			t.Fatalf("split at %d: got %d bytes, want %d", at, len(got), len(want))
		}
		if u := m.Usage(true); u.Input != 3 || u.Output != 4 || u.Estimated {
			t.Fatalf("split at %d: usage %+v", at, u)
		}
	}
}

// Cut short before the usage chunk, the stream is estimated; what arrived
// reaches the client, unfinished event included.
func TestUsageFilterTruncated(t *testing.T) {
	rec := formattest.Read(t, "reasoning_usage.sse")
	at := bytes.Index(rec, []byte(`"choices":[],"usage":{`)) + 5
	got, m, _ := rewrite(t, addedUsage(t), rec[:at/2], rec[at/2:at])
	evStart := bytes.LastIndex(rec[:at], []byte("\n\n")) + 2
	want, _ := withoutUsage(rec[:evStart])
	if want = append(want, rec[evStart:at]...); !bytes.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if u := m.Usage(false); !u.Estimated || u.Output == 0 {
		t.Fatalf("usage %+v", u)
	}
}

func TestNewMeterRewritesOnlyAddedUsage(t *testing.T) {
	tests := []struct {
		name        string
		body        string
		contentType string
		want        bool
	}{
		{"stream without usage", `{"model":"m","stream":true}`, eventStream, true},
		{"client asked for usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, eventStream, false},
		{"not a stream", `{"model":"m"}`, eventStream, false},
		{"JSON reply", `{"model":"m","stream":true}`, "application/json", false},
	}
	for _, tt := range tests {
		req, err := Format{}.ParseRequest([]byte(tt.body), "application/json")
		if err != nil {
			t.Fatal(err)
		}
		_, ok := Format{}.NewMeter(req, nil, tt.contentType).(format.Rewriter)
		if ok != tt.want {
			t.Errorf("%s: Rewriter %v, want %v", tt.name, ok, tt.want)
		}
	}
}

func TestUsageFilterDoesNotAllocate(t *testing.T) {
	m := Format{}.NewMeter(addedUsage(t), nil, eventStream).(format.Rewriter)
	ev := []byte(chunkEvent)
	for range streamTextLimit {
		m.Rewrite(ev, false)
	}
	if allocs := testing.AllocsPerRun(200, func() { m.Rewrite(ev[:70], false); m.Rewrite(ev[70:], false) }); allocs != 0 {
		t.Fatalf("%v allocations per chunk", allocs)
	}
}

func BenchmarkUsageFilter(b *testing.B) {
	m := Format{}.NewMeter(addedUsage(b), nil, eventStream).(format.Rewriter)
	ev := []byte(chunkEvent)
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		m.Rewrite(ev, false)
	}
}

// The client receives the same bytes however the stream is cut, and the
// meter reads the same usage.
func FuzzUsageFilter(f *testing.F) {
	for _, name := range []string{"text_usage.sse", "tool_calls.sse", "reasoning_usage.sse"} {
		rec := formattest.Read(f, name)
		f.Add(rec, uint16(len(rec)/2), uint16(len(rec)/3))
	}
	f.Add([]byte("data: {\"usage\":null}\r\r: x\rdata: {\"choices\":[],\"usage\":{}}\r\n\r\ndata: [DONE]\n\n"), uint16(3), uint16(40))
	req := addedUsage(f)
	f.Fuzz(func(t *testing.T, stream []byte, i, j uint16) {
		a, b := int(i)%(len(stream)+1), int(j)%(len(stream)+1)
		a, b = min(a, b), max(a, b)
		whole, mw, _ := rewrite(t, req, stream)
		split, ms, _ := rewrite(t, req, stream[:a], stream[a:b], stream[b:])
		if !bytes.Equal(whole, split) {
			t.Fatalf("split at %d,%d: %q, whole: %q", a, b, split, whole)
		}
		if !bytes.Contains(stream, []byte("usage")) && !bytes.Contains(stream, []byte(`\u`)) && !bytes.Equal(whole, stream) {
			t.Fatalf("changed a stream without usage: %q", whole)
		}
		if u, v := mw.Usage(false), ms.Usage(false); u != v {
			t.Fatalf("usage whole %+v, split %+v", u, v)
		}
	})
}
