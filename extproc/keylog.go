package extproc

// Envoy's upstream access log of a pooled upstream's failed attempts: what
// each key got from the vendor, retried attempts included.

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
)

// KeyLogTag is the custom tag under which Envoy's upstream log names the
// serving host's key (its gateway metadata).
const KeyLogTag = "vendor_key"

// KeyLog receives Envoy's upstream access log (gRPC access log service) of
// the attempts on pooled upstreams that failed with a status the pool
// acts on, and hands each to the pool, which judges whose fault it is
// (keypool.Judge): a key's limit cools it down for the vendor's
// retry-after, its refusal takes it out; a request's fault counts against
// its account.
type KeyLog struct {
	accesslogv3.UnimplementedAccessLogServiceServer
	s   *Server
	now func() time.Time

	closing sync.Once
	closed  chan struct{} // closed by Close
}

// NewKeyLog returns the access log receiver of s's pools.
func (s *Server) NewKeyLog() *KeyLog {
	return &KeyLog{s: s, now: time.Now, closed: make(chan struct{})}
}

// Close ends every log stream, and any opened after: Envoy keeps its
// streams open for good, so a graceful stop of the gRPC server would wait
// for them until its deadline. The sidecar closes the log once every
// request has ended and Envoy has flushed their attempts' entries.
func (l *KeyLog) Close() { l.closing.Do(func() { close(l.closed) }) }

// StreamAccessLogs reads one Envoy's log stream until it ends, or until
// Close.
// A stream carries one log, named in its first message: the pool's
// refused attempts, or the abandoned attempts (abandoned.go).
func (l *KeyLog) StreamAccessLogs(stream accesslogv3.AccessLogService_StreamAccessLogsServer) error {
	msgs := make(chan *accesslogv3.StreamAccessLogsMessage)
	failed := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case msgs <- msg:
			case <-stream.Context().Done():
				return
			}
		}
	}()
	logName := ""
	for {
		var msg *accesslogv3.StreamAccessLogsMessage
		select {
		case <-l.closed:
			return nil
		case err := <-failed:
			if errors.Is(err, io.EOF) {
				return stream.SendAndClose(&accesslogv3.StreamAccessLogsResponse{})
			}
			return err
		case msg = <-msgs:
		}
		if id := msg.GetIdentifier(); id != nil {
			logName = id.GetLogName()
		}
		if logName == AbandonedLogName {
			for _, e := range msg.GetHttpLogs().GetLogEntry() {
				l.abandoned(e)
			}
			continue
		}
		for _, e := range msg.GetHttpLogs().GetLogEntry() {
			c := e.GetCommonProperties()
			key := c.GetCustomTags()[KeyLogTag]
			status := int(e.GetResponse().GetResponseCode().GetValue())
			if key == "" || status == 0 {
				continue
			}
			hs := e.GetResponse().GetResponseHeaders()
			var sent time.Time // the attempt's start, Envoy's clock (the sidecar's host)
			if ts := c.GetStartTime(); ts != nil {
				sent = ts.AsTime()
			}
			l.s.KeyAttempt(c.GetRouteName(), key, e.GetRequest().GetRequestId(), status, func(h string) string { return hs[h] }, sent)
		}
	}
}

// retryAfter reads a retry-after header: seconds or an HTTP date; 0 when
// absent or unreadable.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 && n < 1e6 {
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
