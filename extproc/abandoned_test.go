package extproc

import (
	"context"
	"io"
	"log/slog"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/modelgateway/gateway/internal/account"
)

// logStream is an access log stream of fixed messages.
type logStream struct {
	grpc.ServerStream
	msgs []*accesslogv3.StreamAccessLogsMessage
}

func (s *logStream) Recv() (*accesslogv3.StreamAccessLogsMessage, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *logStream) SendAndClose(*accesslogv3.StreamAccessLogsResponse) error { return nil }

func (s *logStream) Context() context.Context { return context.Background() }

func logMessage(name string, entries ...*accesslogdatav3.HTTPAccessLogEntry) *accesslogv3.StreamAccessLogsMessage {
	m := &accesslogv3.StreamAccessLogsMessage{LogEntries: &accesslogv3.StreamAccessLogsMessage_HttpLogs{
		HttpLogs: &accesslogv3.StreamAccessLogsMessage_HTTPAccessLogEntries{LogEntry: entries}}}
	if name != "" {
		m.Identifier = &accesslogv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: "envoy"}, LogName: name}
	}
	return m
}

func attempt(route, key, requestID string, status uint32, flags *accesslogdatav3.ResponseFlags) *accesslogdatav3.HTTPAccessLogEntry {
	return &accesslogdatav3.HTTPAccessLogEntry{
		CommonProperties: &accesslogdatav3.AccessLogCommon{
			RouteName: route, ResponseFlags: flags, StartTime: timestamppb.Now(),
			CustomTags: map[string]string{KeyLogTag: key, EndpointLogTag: "primary"},
		},
		Request:  &accesslogdatav3.HTTPRequestProperties{RequestId: requestID},
		Response: &accesslogdatav3.HTTPResponseProperties{ResponseCode: wrapperspb.UInt32(status)},
	}
}

// The abandoned attempts' log, named in its stream's first message, hands
// each attempt to OnAbandoned with its reason and the request's model; the
// pool's log is not read as abandoned attempts.
func TestAbandonedAttemptsLog(t *testing.T) {
	var got []account.AbandonedAttempt
	s := NewServer(Options{Metrics: NewMetrics(nil, "alpha"), Logger: slog.New(slog.DiscardHandler),
		OnAbandoned: func(a account.AbandonedAttempt) { got = append(got, a) }})
	s.attemptModels.put("req-1", "claude-x")
	l := s.NewKeyLog()
	err := l.StreamAccessLogs(&logStream{msgs: []*accesslogv3.StreamAccessLogsMessage{
		logMessage(AbandonedLogName, attempt("alpha", "k1", "req-1", 0, &accesslogdatav3.ResponseFlags{UpstreamRequestTimeout: true})),
		// Later messages of the stream carry no identifier.
		logMessage("", attempt("alpha", "", "req-2", 503, nil), attempt("alpha", "k2", "req-1", 0, &accesslogdatav3.ResponseFlags{UpstreamRemoteReset: true})),
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ key, reason, model string }{{"k1", "first_byte_timeout", "claude-x"}, {"default", "status_5xx", ""}, {"k2", "reset", "claude-x"}}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i, w := range want {
		if g := got[i]; g.VendorKey != w.key || g.Reason != w.reason || g.Model != w.model || g.Upstream != "alpha" || g.Endpoint != "primary" || g.At.IsZero() {
			t.Errorf("attempt %d: %+v, want %+v", i, g, w)
		}
	}
	got = nil
	if err := l.StreamAccessLogs(&logStream{msgs: []*accesslogv3.StreamAccessLogsMessage{
		logMessage("vendor_keys", attempt("alpha", "k1", "req-1", 0, &accesslogdatav3.ResponseFlags{UpstreamRequestTimeout: true})),
	}}); err != nil || len(got) != 0 {
		t.Errorf("the pool's log read as abandoned attempts: %+v (%v)", got, err)
	}
}
