// Package formattest holds what the wire formats' tests share: reading
// recorded replies and feeding them to a meter cut every way a response body
// can arrive.
package formattest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
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
