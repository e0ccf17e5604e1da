// Package formattest holds what the wire formats' tests share: reading
// recorded replies, feeding them to a meter cut every way a response body
// can arrive, and the drivers of the request, meter, fuzz, memory and
// allocation checks that each format fills with its own cases.
package formattest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/usage"
)

// Read returns testdata/name of the calling package.
func Read(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// LineEndings returns a recording with LF, CRLF and CR line endings: SSE
// allows all three.
func LineEndings(rec []byte) map[string][]byte {
	return map[string][]byte{
		"LF":   rec,
		"CRLF": bytes.ReplaceAll(rec, []byte("\n"), []byte("\r\n")),
		"CR":   bytes.ReplaceAll(rec, []byte("\n"), []byte("\r")),
	}
}

// ForEachSplit feeds a recorded stream, in each line-ending variant, to
// fresh meters from newMeter: whole, cut in two at every byte offset, and one
// byte at a time. check sees each meter after the last chunk.
func ForEachSplit(rec []byte, newMeter func(chunks ...[]byte) format.Meter, check func(how string, m format.Meter)) {
	for name, stream := range LineEndings(rec) {
		check(name+" whole", newMeter(stream))
		for i := range len(stream) + 1 {
			check(fmt.Sprintf("%s split at %d", name, i), newMeter(stream[:i], stream[i:]))
		}
		bytewise := make([][]byte, len(stream))
		for i := range stream {
			bytewise[i] = stream[i : i+1]
		}
		check(name+" byte by byte", newMeter(bytewise...))
	}
}

// Feed writes chunks to m, each as a copy it then scribbles over: a meter
// must not keep what it is given. It returns m.
func Feed(m format.Meter, chunks ...[]byte) format.Meter {
	for _, c := range chunks {
		p := append([]byte(nil), c...)
		m.Write(p)
		for i := range p {
			p[i] = 'X'
		}
	}
	return m
}

// CheckStream fails t unless every meter ForEachSplit feeds rec to reports
// want, whether or not the body then reached the client: a stream the
// vendor finished is billed as reported.
func CheckStream(t *testing.T, rec []byte, newMeter func(chunks ...[]byte) format.Meter, want usage.Report) {
	t.Helper()
	ForEachSplit(rec, newMeter, func(how string, m format.Meter) {
		for _, complete := range []bool{true, false} {
			if got := m.Usage(complete); got != want {
				t.Fatalf("%s: Usage(%v) = %+v, want %+v", how, complete, got, want)
			}
		}
	})
}

// CheckJSON fails t unless a meter fed the JSON reply rec, whole or cut in
// two at any offset, reports want.
func CheckJSON(t *testing.T, rec []byte, newMeter func(chunks ...[]byte) format.Meter, want usage.Report) {
	t.Helper()
	for i := range len(rec) + 1 {
		if got := newMeter(rec[:i], rec[i:]).Usage(true); got != want {
			t.Fatalf("split at %d: got %+v, want %+v", i, got, want)
		}
	}
}

// CheckSplitsAgree is a fuzz check: a meter fed data whole and one fed it
// cut at the given offsets (modulo len(data)+1) must report the same usage,
// never negative, for each value of complete.
func CheckSplitsAgree(t *testing.T, data []byte, cuts []uint16, newMeter func(chunks ...[]byte) format.Meter, completes ...bool) {
	t.Helper()
	at := make([]int, len(cuts))
	for k, c := range cuts {
		at[k] = int(c) % (len(data) + 1)
	}
	slices.Sort(at)
	chunks := make([][]byte, 0, len(at)+1)
	prev := 0
	for _, a := range at {
		chunks = append(chunks, data[prev:a])
		prev = a
	}
	chunks = append(chunks, data[prev:])
	whole, split := newMeter(data), newMeter(chunks...)
	for _, complete := range completes {
		u, v := whole.Usage(complete), split.Usage(complete)
		if u != v {
			t.Fatalf("Usage(%v): whole %+v, split at %v %+v", complete, u, at, v)
		}
		if !u.Usage.Valid() {
			t.Fatalf("negative usage %+v", u)
		}
	}
}

// CheckStreamMemory fails t if an open stream keeps more than limit bytes of
// heap once newMeter's meters have been fed stream in network-sized chunks.
func CheckStreamMemory(t *testing.T, stream []byte, limit int64, newMeter func() format.Meter) {
	t.Helper()
	const n = 200
	meters := make([]format.Meter, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range meters {
		meters[i] = newMeter()
		for b := stream; len(b) > 0; b = b[min(len(b), 1400):] {
			meters[i].Write(b[:min(len(b), 1400)])
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perStream := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d bytes per open stream (heap %d -> %d)", perStream, before.HeapAlloc, after.HeapAlloc)
	if perStream > limit {
		t.Errorf("%d bytes per open stream, want under %d", perStream, limit)
	}
	runtime.KeepAlive(meters)
	runtime.KeepAlive(stream)
}

// BenchmarkWrite measures m.Write(ev) per operation in the steady state,
// after warm writes of ev have grown its buffers and filled its samples.
func BenchmarkWrite(b *testing.B, m format.Meter, ev []byte, warm int) {
	for range warm {
		m.Write(ev)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(ev)))
	for b.Loop() {
		m.Write(ev)
	}
}

// CheckWriteDoesNotAllocate fails t if m, after warm writes of ev, allocates
// while ev is written again, cut in two at cut.
func CheckWriteDoesNotAllocate(t *testing.T, m format.Meter, ev []byte, warm, cut int) {
	t.Helper()
	for range warm {
		m.Write(ev)
	}
	if allocs := testing.AllocsPerRun(200, func() { m.Write(ev[:cut]); m.Write(ev[cut:]) }); allocs != 0 {
		t.Fatalf("%v allocations per event", allocs)
	}
}
