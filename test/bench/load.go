package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/modelgateway/gateway/internal/config"
)

// target is one way to the shared fake vendor: through the gateway (Envoy
// with ext_proc, the sidecar and Redis), through Envoy with the null
// processor, or through bare Envoy. Each has its
// own keep-alive connection pool, so one never warms the other's.
type target struct {
	idx    int // the stack's index: gwI, nullI or bareI
	name   string
	base   string // http://127.0.0.1:PORT
	header http.Header
	client *http.Client
	// sessions gives each request a session marker of its own (the pool
	// comparison: spread over the keys).
	sessions bool
	// keyClusters, when set, names in turn the pool aggregate each request
	// goes to, as the processor would (the pool's anatomy, without one).
	keyClusters []string
}

func newTarget(name, base string, header map[string]string) *target {
	h := http.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        0, // no overall cap
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     5 * time.Minute,
		// Without this Go asks for gzip; the gateway strips accept-encoding
		// and bare Envoy would not, and the two must see the same request.
		DisableCompression: true,
	}
	return &target{name: name, base: base, header: h, client: &http.Client{Transport: tr}}
}

// post sends a POST with the target's headers. The caller closes the body.
func (t *target) post(ctx context.Context, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.base+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range t.header {
		req.Header[k] = v
	}
	if t.sessions {
		sessionHeader(req.Header)
	}
	if n := len(t.keyClusters); n > 0 {
		req.Header.Set(config.KeyClusterHeader, t.keyClusters[sessionSeq.Add(1)%int64(n)])
	}
	return t.client.Do(req)
}

// newHist records microseconds from 1 µs to 10 minutes, to three
// significant digits.
func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 600_000_000, 3) }

// latencies is what a load slice measured. Two histograms, because they
// answer different questions: service time starts when the request is
// actually sent, and is what the overhead figures compare; schedule time
// starts at the request's planned arrival, so any queueing (a saturated
// gateway, a generator starved of CPU) shows in it instead of silently
// lowering the offered rate — the coordinated-omission trap. The sustained
// rate is judged on schedule time.
type latencies struct {
	mu       sync.Mutex
	service  *hdrhistogram.Histogram
	schedule *hdrhistogram.Histogram
	ok       int64
	failed   int64
	dropped  int64 // never sent: too many requests already in flight
	errs     map[string]int64
	offered  time.Duration // planned duration of the slices
}

func newLatencies() *latencies {
	return &latencies{service: newHist(), schedule: newHist(), errs: map[string]int64{}}
}

func (l *latencies) record(due, sent time.Time, err error) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.failed++
		l.errs[errKind(err)]++
		return
	}
	l.ok++
	l.service.RecordValue(max(now.Sub(sent).Microseconds(), 1))
	l.schedule.RecordValue(max(now.Sub(due).Microseconds(), 1))
}

// merge adds o's figures to l.
func (l *latencies) merge(o *latencies) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.service.Merge(o.service)
	l.schedule.Merge(o.schedule)
	l.ok += o.ok
	l.failed += o.failed
	l.dropped += o.dropped
	l.offered += o.offered
	for k, v := range o.errs {
		l.errs[k] += v
	}
}

// errors counts every request that did not get a complete 200.
func (l *latencies) errors() int64 { return l.failed + l.dropped }

// achieved is the completed request rate over the planned duration.
func (l *latencies) achieved() float64 {
	if l.offered <= 0 {
		return 0
	}
	return float64(l.ok) / l.offered.Seconds()
}

// errKind shortens an error for the report: the status, or the last part of
// a transport error.
func errKind(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && !strings.HasPrefix(s, "status") {
		s = s[i+2:]
	}
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// statusError is a reply other than 200.
type statusError struct {
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("status %d", e.code) }

// dispatch calls fire at a fixed rate for d: an open model, where arrivals
// do not wait for earlier replies, as independent clients would not. Each
// call runs in its own goroutine, at most limit at once; an arrival that
// finds limit calls in flight is dropped and counted, which fails the
// slice rather than letting it quietly lower the offered rate.
//
// Arrivals are planned at start + i/rate. Sleeping to each one keeps the
// average rate exact even though the runtime's timers are coarser than
// the interval at high rates: a late wake-up sends the arrivals that fell
// due meanwhile at once.
func dispatch(rate float64, d time.Duration, limit int, fire func(due, sent time.Time)) (dropped int64) {
	n := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if w := time.Until(due); w > 0 {
			time.Sleep(w)
		}
		select {
		case sem <- struct{}{}:
		default:
			dropped++
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fire(due, time.Now())
		}()
	}
	wg.Wait()
	return dropped
}

// request is the non-streaming request every slice sends.
type request struct {
	path string
	body []byte
}

// inflightLimit bounds concurrent requests of one slice.
const inflightLimit = 2000

// requestTimeout bounds one request: long enough that only an overloaded
// stack hits it, short enough that a saturated slice drains quickly.
const requestTimeout = 10 * time.Second

// load sends req to t at rate for d and returns what it measured.
func load(t *target, req request, rate float64, d time.Duration) *latencies {
	l := newLatencies()
	l.offered = d
	l.dropped = dispatch(rate, d, inflightLimit, func(due, at time.Time) {
		l.record(due, at, t.call(req))
	})
	return l
}

// call sends one request and reads the whole reply.
func (t *target) call(req request) error {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	resp, err := t.post(ctx, req.path, req.body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{code: resp.StatusCode, body: string(b)}
	}
	return nil
}
