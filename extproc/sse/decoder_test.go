package sse

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

type event struct{ Name, Data string }

// collect feeds chunks to a decoder and returns what it emitted.
func collect(d *Decoder, chunks ...[]byte) []event {
	var out []event
	for _, c := range chunks {
		d.Feed(c, func(e Event) {
			out = append(out, event{string(e.Name), string(e.Data)})
		})
	}
	return out
}

// reference decodes a whole stream the simple way, line by line, as the
// specification describes it. It is the oracle the incremental decoder is
// checked against.
func reference(stream []byte, limit int) (events []event) {
	stream = bytes.TrimPrefix(stream, []byte(byteOrderMark))
	var name, data []byte
	var hasData, dropping bool
	for {
		i := bytes.IndexAny(stream, "\r\n")
		if i < 0 {
			return events // an unterminated line never dispatches
		}
		line := stream[:i]
		if stream[i] == '\r' && i+1 < len(stream) && stream[i+1] == '\n' {
			i++
		}
		stream = stream[i+1:]
		switch {
		case len(line) == 0:
			if hasData && !dropping {
				events = append(events, event{string(name), string(data[:len(data)-1])})
			}
			name, data, hasData, dropping = nil, nil, false, false
		case dropping:
		case len(name)+len(data)+len(line) > limit:
			dropping = true
		case line[0] == ':':
		default:
			field, value, found := bytes.Cut(line, []byte(":"))
			if found {
				value = bytes.TrimPrefix(value, []byte(" "))
			}
			switch string(field) {
			case "event":
				name = append([]byte{}, value...)
			case "data":
				data = append(append(data, value...), '\n')
				hasData = true
			}
		}
	}
}

func TestDecoder(t *testing.T) {
	tests := []struct {
		name   string
		stream string
		want   []event
	}{
		{"named", "event: ping\ndata: {}\n\n", []event{{"ping", "{}"}}},
		{"unnamed", "data: x\n\n", []event{{"", "x"}}},
		{"multiline", "data: a\ndata: b\ndata\ndata:c\n\n", []event{{"", "a\nb\n\nc"}}},
		{"no space", "event:e\ndata:{\"a\":1}\n\n", []event{{"e", `{"a":1}`}}},
		{"one space only", "data:  two\n\n", []event{{"", " two"}}},
		{"crlf", "event: a\r\ndata: 1\r\n\r\nevent: b\r\ndata: 2\r\n\r\n", []event{{"a", "1"}, {"b", "2"}}},
		{"cr", "event: a\rdata: 1\r\r", []event{{"a", "1"}}},
		{"mixed endings", "data: 1\r\n\ndata: 2\r\rdata: 3\n\r\n", []event{{"", "1"}, {"", "2"}, {"", "3"}}},
		{"comments and ids", ": hi\nid: 7\nretry: 100\ndata: x\nfoo: bar\n\n", []event{{"", "x"}}},
		{"empty data dispatches", "data:\n\n", []event{{"", ""}}},
		{"no data no event", "event: x\n\ndata: y\n\n", []event{{"", "y"}}},
		{"last name wins", "event: a\nevent: b\ndata: y\n\n", []event{{"b", "y"}}},
		{"unterminated tail", "data: a\n\ndata: b\n", []event{{"", "a"}}},
		{"bom", "\xEF\xBB\xBFdata: a\n\n", []event{{"", "a"}}},
		{"bom only once", "\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n", nil},
		{"colon in value", "data: a: b\n\n", []event{{"", "a: b"}}},
		{"blank lines", "\n\n\r\n\rdata: a\n\n\n", []event{{"", "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stream := []byte(tt.stream)
			var d Decoder
			if got := collect(&d, stream); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("whole: got %q, want %q", got, tt.want)
			}
			checkSplits(t, stream, DefaultMaxEventSize)
		})
	}
}

// checkSplits feeds stream whole, in two pieces at every offset, in three
// pieces, and byte by byte, and compares each with the reference.
func checkSplits(t *testing.T, stream []byte, limit int) {
	t.Helper()
	want := reference(stream, limit)
	check := func(how string, chunks ...[]byte) {
		t.Helper()
		d := Decoder{MaxEventSize: limit}
		got := collect(&d, chunks...)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %q, want %q", how, got, want)
		}
	}
	check("whole", stream)
	for i := range len(stream) + 1 {
		check(fmt.Sprintf("split at %d", i), stream[:i], stream[i:])
	}
	for i := 0; i < len(stream); i += 7 {
		for j := i; j < len(stream); j += 5 {
			check(fmt.Sprintf("split at %d, %d", i, j), stream[:i], stream[i:j], stream[j:])
		}
	}
	bytewise := make([][]byte, len(stream))
	for i := range stream {
		bytewise[i] = stream[i : i+1]
	}
	check("byte by byte", bytewise...)
}

func TestLineEndingSplits(t *testing.T) {
	base := "event: message_start\ndata: {\"a\":1}\n\n: keep-alive\n\nevent: delta\ndata: line one\ndata: line two\n\n"
	for _, eol := range []string{"\n", "\r\n", "\r"} {
		t.Run(fmt.Sprintf("%q", eol), func(t *testing.T) {
			stream := []byte(strings.ReplaceAll(base, "\n", eol))
			want := []event{{"message_start", `{"a":1}`}, {"delta", "line one\nline two"}}
			var d Decoder
			if got := collect(&d, stream); !reflect.DeepEqual(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
			checkSplits(t, stream, DefaultMaxEventSize)
		})
	}
}

func TestCRLFSplitAcrossChunks(t *testing.T) {
	var d Decoder
	got := collect(&d, []byte("data: a\r"), []byte("\n\r"), []byte("\ndata: b\r"), []byte("\r"))
	want := []event{{"", "a"}, {"", "b"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestOversizedEventDropped(t *testing.T) {
	big := strings.Repeat("x", 100)
	stream := []byte("data: small\n\ndata: " + big + "\ndata: more\n\nevent: e\ndata: after\n\n")
	d := Decoder{MaxEventSize: 64}
	got := collect(&d, stream)
	want := []event{{"", "small"}, {"e", "after"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	checkSplits(t, stream, 64)

	// Many data lines that are each small but together too big.
	stream = []byte(strings.Repeat("data: 0123456789\n", 10) + "\ndata: ok\n\n")
	checkSplits(t, stream, 64)
	d = Decoder{MaxEventSize: 64}
	if got := collect(&d, stream); !reflect.DeepEqual(got, []event{{"", "ok"}}) {
		t.Fatalf("got %q", got)
	}
}

func TestUnterminatedLineIsBounded(t *testing.T) {
	d := Decoder{MaxEventSize: 1024}
	chunk := bytes.Repeat([]byte("y"), 4096)
	for range 1000 {
		collect(&d, chunk)
	}
	if cap(d.line) > 2048 {
		t.Fatalf("line buffer grew to %d bytes", cap(d.line))
	}
	got := collect(&d, []byte("\n\ndata: next\n\n"))
	if !reflect.DeepEqual(got, []event{{"", "next"}}) {
		t.Fatalf("got %q", got)
	}
}

func TestBuffersReleasedAfterLargeEvent(t *testing.T) {
	var d Decoder
	collect(&d, []byte("data: "+strings.Repeat("z", 200<<10)+"\n\n"))
	if cap(d.data) > retainLimit || cap(d.line) > retainLimit {
		t.Fatalf("kept %d + %d bytes", cap(d.data), cap(d.line))
	}
}

func TestEventWaitsForBlankLine(t *testing.T) {
	var d Decoder
	if got := collect(&d, []byte("data: a\n")); len(got) != 0 {
		t.Fatalf("dispatched %q before the blank line", got)
	}
	if got := collect(&d, []byte("\n")); !reflect.DeepEqual(got, []event{{"", "a"}}) {
		t.Fatalf("got %q", got)
	}
}

func TestIsEventStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream":                  true,
		"text/event-stream; charset=utf-8":   true,
		" Text/Event-Stream ;charset=UTF-8 ": true,
		"application/json":                   false,
		"":                                   false,
		"text/event-streams":                 false,
	} {
		if got := IsEventStream(ct); got != want {
			t.Errorf("IsEventStream(%q) = %v", ct, got)
		}
	}
}

func TestFeedDoesNotAllocate(t *testing.T) {
	chunk := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n")
	var d Decoder
	n := 0
	emit := func(Event) { n++ }
	d.Feed(chunk, emit) // grow the buffers
	allocs := testing.AllocsPerRun(100, func() {
		d.Feed(chunk[:40], emit)
		d.Feed(chunk[40:], emit)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per event", allocs)
	}
}

func BenchmarkFeed(b *testing.B) {
	chunk := []byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n")
	var d Decoder
	emit := func(Event) {}
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	for b.Loop() {
		d.Feed(chunk, emit)
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte("event: a\ndata: 1\n\n"), uint16(3), uint16(9), uint8(0))
	f.Add([]byte("data: a\r\n\r\ndata: b\r\rdata: c\n\n"), uint16(8), uint16(9), uint8(4))
	f.Add([]byte("\xEF\xBB\xBFdata: x\n\n: c\nid: 1\n\n"), uint16(1), uint16(2), uint8(1))
	f.Add([]byte("data: 0123456789012345678901234567890123456789\n\ndata: ok\n\n"), uint16(20), uint16(30), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, i, j uint16, small uint8) {
		limit := DefaultMaxEventSize
		if small > 0 {
			limit = int(small) // exercise dropping
		}
		want := reference(stream, limit)
		a, b := int(i)%(len(stream)+1), int(j)%(len(stream)+1)
		if a > b {
			a, b = b, a
		}
		for _, chunks := range [][][]byte{
			{stream},
			{stream[:a], stream[a:b], stream[b:]},
		} {
			d := Decoder{MaxEventSize: limit}
			got := collect(&d, chunks...)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("split %d,%d: got %q, want %q", a, b, got, want)
			}
			if len(d.line) > limit {
				t.Fatalf("carried line of %d bytes beyond limit %d", len(d.line), limit)
			}
		}
		// Byte by byte.
		d := Decoder{MaxEventSize: limit}
		var got []event
		for k := range stream {
			got = append(got, collect(&d, stream[k:k+1])...)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("byte by byte: got %q, want %q", got, want)
		}
	})
}
