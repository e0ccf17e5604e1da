// Package logbuf gathers log lines written in bursts, such as the request
// lines of a settlement batch, into one write: a line each is a system
// call each, and for a log collector reading a pipe a wake-up each.
package logbuf

import (
	"io"
	"sync"
)

// most is how much a Buffer holds before it writes out without a Flush.
const most = 64 << 10

// Buffer holds what is written to it until Flush (or until it holds
// most), then writes it to its writer at once. Lines written whole stay
// whole. Safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// New returns a Buffer writing to w.
func New(w io.Writer) *Buffer { return &Buffer{w: w} }

// Write keeps p for the next Flush; it writes out first what the buffer
// holds when p would take it past most.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf) > 0 && len(b.buf)+len(p) > most {
		if err := b.flush(); err != nil {
			return 0, err
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Flush writes out what the buffer holds.
func (b *Buffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flush()
}

func (b *Buffer) flush() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.w.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}
