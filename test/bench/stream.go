package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/modelgateway/gateway/test/launch"
)

// sentStamp starts the SSE comment the fake vendor writes before every
// event: ": sent_unix_nano=<ns>". Client and fake share the machine's clock,
// so now minus the stamp is how long the event took to get through the
// proxy (plus the loopback sockets, the same for both targets).
var sentStamp = []byte(": sent_unix_nano=")

// streams is what a streaming slice measured, in microseconds.
type streams struct {
	mu         sync.Mutex
	headers    *hdrhistogram.Histogram // send → response headers
	firstEvent *hdrhistogram.Histogram // send → first event
	delivery   *hdrhistogram.Histogram // every event: arrival − sent stamp
	ok         int64
	failed     int64
	dropped    int64
	events     int64
	errs       map[string]int64
}

func newStreams() *streams {
	return &streams{headers: newHist(), firstEvent: newHist(), delivery: newHist(), errs: map[string]int64{}}
}

func (s *streams) merge(o *streams) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headers.Merge(o.headers)
	s.firstEvent.Merge(o.firstEvent)
	s.delivery.Merge(o.delivery)
	s.ok += o.ok
	s.failed += o.failed
	s.dropped += o.dropped
	s.events += o.events
	for k, v := range o.errs {
		s.errs[k] += v
	}
}

func (s *streams) errors() int64 { return s.failed + s.dropped }

// streamTrace is one stream's timings.
type streamTrace struct {
	headers, firstEvent time.Duration
	delays              []time.Duration
}

func (s *streams) record(tr streamTrace, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed++
		s.errs[errKind(err)]++
		return
	}
	s.ok++
	s.headers.RecordValue(max(tr.headers.Microseconds(), 1))
	s.firstEvent.RecordValue(max(tr.firstEvent.Microseconds(), 1))
	for _, d := range tr.delays {
		// Microsecond resolution loses the sub-microsecond part of very
		// fast deliveries; the histogram's floor is 1 µs.
		s.delivery.RecordValue(max(d.Microseconds(), 1))
		s.events++
	}
}

// streamLoad opens streams to t at rate for d and reads each to its end.
func streamLoad(t *target, req request, rate float64, d time.Duration) *streams {
	s := newStreams()
	s.dropped = dispatch(rate, d, inflightLimit, func(_, sent time.Time) {
		tr, err := t.stream(req, sent)
		s.record(tr, err)
	})
	return s
}

// stream sends one streaming request and reads its events as they arrive.
func (t *target) stream(req request, sent time.Time) (streamTrace, error) {
	var tr streamTrace
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	resp, err := t.post(ctx, req.path, req.body)
	if err != nil {
		return tr, err
	}
	defer resp.Body.Close()
	tr.headers = time.Since(sent)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return tr, &statusError{code: resp.StatusCode, body: string(b)}
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		now := time.Now()
		if tr.firstEvent == 0 && len(line) > 0 {
			tr.firstEvent = now.Sub(sent)
		}
		if rest, ok := bytes.CutPrefix(line, sentStamp); ok {
			ns, perr := strconv.ParseInt(string(bytes.TrimSpace(rest)), 10, 64)
			if perr == nil {
				tr.delays = append(tr.delays, max(time.Duration(now.UnixNano()-ns), 0))
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			if len(tr.delays) == 0 {
				return tr, errors.New("stream without events")
			}
			return tr, nil
		default:
			return tr, err
		}
	}
}

// held is a set of streams kept open for the memory measurement.
type held struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	open   int
	failed int
	errs   map[string]int
}

// holdStreams opens n streams to t, rate per second, each held open once its
// first event has arrived; the fake must be pacing events far apart so that
// none ends on its own. It returns when every stream is open or failed, or
// timeout passes; release closes them all.
func holdStreams(t *target, req request, n int, rate float64, timeout time.Duration) *held {
	ctx, cancel := context.WithCancel(context.Background())
	h := &held{cancel: cancel, errs: map[string]int{}}
	settled := make(chan struct{}, n)
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range n {
		if w := time.Until(start.Add(time.Duration(i) * interval)); w > 0 {
			time.Sleep(w)
		}
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			err := holdOne(ctx, t, req, func() {
				h.mu.Lock()
				h.open++
				h.mu.Unlock()
				settled <- struct{}{}
			})
			if err != nil && ctx.Err() == nil {
				h.mu.Lock()
				h.failed++
				h.errs[errKind(err)]++
				h.mu.Unlock()
				settled <- struct{}{}
			}
		}()
	}
	deadline := time.After(timeout)
	for range n {
		select {
		case <-settled:
		case <-deadline:
			return h
		}
	}
	return h
}

// holdOne opens one stream, calls opened after its first event and keeps
// the connection until ctx ends.
func holdOne(ctx context.Context, t *target, req request, opened func()) error {
	resp, err := t.post(ctx, req.path, req.body)
	if err != nil {
		return err
	}
	return launch.HoldStream(ctx, resp, opened)
}

// counts returns how many streams are open and how many failed.
func (h *held) counts() (open, failed int, errs map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open, h.failed, h.errs
}

// release closes every stream and waits for their goroutines.
func (h *held) release() {
	h.cancel()
	h.wg.Wait()
}
