package logbuf

import (
	"bytes"
	"strings"
	"testing"
)

// countingWriter counts the writes it is given.
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// Lines wait for Flush and go out in one write, in order; a buffer past
// most writes out what it held before taking more.
func TestBufferWritesOnFlush(t *testing.T) {
	var out countingWriter
	b := New(&out)
	for _, l := range []string{"one\n", "two\n", "three\n"} {
		if _, err := b.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	if out.writes != 0 {
		t.Fatalf("%d writes before Flush", out.writes)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if out.writes != 1 || out.String() != "one\ntwo\nthree\n" {
		t.Fatalf("%d writes of %q; want one of the three lines in order", out.writes, out.String())
	}
	if err := b.Flush(); err != nil || out.writes != 1 {
		t.Fatalf("an empty Flush wrote (%d writes, %v)", out.writes, err)
	}

	out = countingWriter{}
	line := strings.Repeat("x", 1000) + "\n"
	n := most/len(line) + 1 // the line that does not fit
	for range n {
		b.Write([]byte(line))
	}
	if out.writes != 1 || out.Len() != (n-1)*len(line) {
		t.Fatalf("past most: %d writes of %d bytes; want one of the %d lines that fit", out.writes, out.Len(), n-1)
	}
	b.Flush()
	if out.Len() != n*len(line) {
		t.Fatalf("%d bytes after Flush, want %d", out.Len(), n*len(line))
	}
}
