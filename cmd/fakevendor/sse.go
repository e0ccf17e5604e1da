package main

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// bufPool recycles the buffers replies are built in: under load every
// request would otherwise allocate a few of them.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 1<<20 {
		return // let an unusually large one go
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

// sseStream writes one server-sent event stream, the way both vendors
// stream: every event flushed at once. Before each event it writes the
// comment ": sent_unix_nano=N", which SSE clients ignore and the benchmark
// reads to measure how long the gateway held the event.
//
// A write error (the client went away) is kept and turns later events into
// no-ops, so that callers check err once at the end.
type sseStream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	ctx   context.Context
	bufp  *[]byte
	buf   []byte
	delay time.Duration
	first time.Duration // before the first event
	abort int           // reset the connection after this many events; 0: never
	sent  int
	err   error
}

// startSSE sends the response headers of an event stream.
func startSSE(w http.ResponseWriter, r *http.Request, ctl *Controls) *sseStream {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	bp := getBuf()
	s := &sseStream{
		w:     w,
		rc:    http.NewResponseController(w),
		ctx:   r.Context(),
		bufp:  bp,
		buf:   (*bp)[:0],
		delay: time.Duration(ctl.EventDelayMS) * time.Millisecond,
		first: time.Duration(ctl.FirstEventDelayMS) * time.Millisecond,
		abort: ctl.AbortAfterEvents,
	}
	// Send the headers now, as the vendors do, so that the client sees
	// the stream start even if the first event is delayed.
	if err := s.rc.Flush(); err != nil {
		s.err = err
	}
	if ctl.AbortAtStart && s.err == nil {
		s.release()
		panic(http.ErrAbortHandler)
	}
	return s
}

// begin starts an event: it waits the event delay (the first event delay
// before the first event), then writes the timestamp comment, the event line when event is
// not empty, and "data: ". The caller appends the data to s.buf and calls
// end.
func (s *sseStream) begin(event string) {
	s.buf = s.buf[:0]
	if s.err != nil {
		return
	}
	delay := s.delay
	if s.sent == 0 {
		delay = s.first
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.ctx.Done():
			t.Stop()
			s.err = s.ctx.Err()
			return
		}
	}
	s.buf = append(s.buf, ": sent_unix_nano="...)
	s.buf = strconv.AppendInt(s.buf, time.Now().UnixNano(), 10)
	s.buf = append(s.buf, '\n')
	if event != "" {
		s.buf = append(s.buf, "event: "...)
		s.buf = append(s.buf, event...)
		s.buf = append(s.buf, '\n')
	}
	s.buf = append(s.buf, "data: "...)
}

// end finishes the event begun last, writes and flushes it. After the
// abort_after_events-th event it resets the connection: panicking with
// http.ErrAbortHandler makes net/http close it without ending the chunked
// body, which clients see as a truncated stream.
func (s *sseStream) end() {
	if s.err != nil {
		return
	}
	s.buf = append(s.buf, '\n', '\n')
	if _, err := s.w.Write(s.buf); err != nil {
		s.err = err
		return
	}
	if err := s.rc.Flush(); err != nil {
		s.err = err
		return
	}
	s.sent++
	if s.abort > 0 && s.sent >= s.abort {
		s.release()
		panic(http.ErrAbortHandler)
	}
}

// event writes one event whose data is already encoded.
func (s *sseStream) event(event string, data []byte) {
	s.begin(event)
	if s.err == nil {
		s.buf = append(s.buf, data...)
	}
	s.end()
}

// release returns the buffer to the pool; the stream is unusable after.
func (s *sseStream) release() {
	if s.bufp != nil {
		*s.bufp = s.buf
		putBuf(s.bufp)
		s.bufp, s.buf = nil, nil
	}
}
