package extproc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/modelgateway/gateway/extproc/wire"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/leases"
	"github.com/modelgateway/gateway/internal/redistest"
)

// stackChildEnv marks the child process of TestStreamStackStaysSmall.
const stackChildEnv = "EXTPROC_STACK_CHILD"

// A stream's goroutine keeps the stack its deepest point needed for as long
// as the stream is open (a stack grows by doubling, and shrinks only when a
// collection finds it mostly unused, which an open stream's is not): past
// 8 KB, 5,000 open streams cost 40 MB more. A child process runs the
// request paths over real gRPC and a real redis-server (test/integration's) with the runtime's
// stack limit at 8 KB, after a warm-up that takes every path's one-off
// initialisations (protobuf's message tables, the scripts' loading): a
// path that needs more crashes it, with that path's stack in its output.
func TestStreamStackStaysSmall(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's frames are not the product's")
	}
	if os.Getenv(stackChildEnv) != "" {
		stackChild(t)
		return
	}
	// The unit tier needs Go alone: the redis-server is the one
	// test/integration starts and hands over (the child inherits it).
	redistest.Provided(t)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestStreamStackStaysSmall$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), stackChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("a request path needs more than 8 KB of stack (%v):\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("every path ran under the limit")) {
		t.Fatalf("the child ran no path:\n%s", out)
	}
}

// stackChild runs every path once to warm up, then again under the limit.
func stackChild(t *testing.T) {
	addr := redistest.Provided(t)
	alpha := newRigOn(t, addr, "alpha", rigAccount{})
	ren := holds.NewRenewer(alpha.st, slog.New(slog.DiscardHandler))
	alpha.srv.holds = ren
	// Leases are off by default; a request they do not cover goes through
	// them to the store, one frame deeper than without them.
	alpha.srv.admitter = leases.New(alpha.st, alpha.st, leases.Options{})
	beta := newRigOn(t, addr, "beta", rigAccount{})
	beta.srv.owners = beta.st
	ac, bc := serveGRPC(t, alpha.srv), serveGRPC(t, beta.srv)

	stored, err := os.ReadFile("format/responses/testdata/stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	responsesEvents := bytes.SplitAfter(stored, []byte("\n\n"))
	responsesBody := []byte(`{"model":"gpt-4o-mini","max_output_tokens":256,"stream":true,"input":"Fix the failing test."}`)

	paths := []struct {
		name string
		run  func(context.Context) error
	}{
		{"messages stream with checkpoints", func(ctx context.Context) error {
			return exchangeOver(ctx, ac, alpha.messages(reqBody), events, func() { ren.RenewOnce(ctx) })
		}},
		{"messages refused (unknown model)", func(ctx context.Context) error {
			return exchangeOver(ctx, ac, alpha.messages([]byte(`{"model":"nope","max_tokens":5,"messages":[]}`)), nil, nil)
		}},
		{"responses stream, bound with its items", func(ctx context.Context) error {
			return exchangeOver(ctx, bc, beta.responses(responsesBody), responsesEvents, nil)
		}},
	}
	ctx := t.Context()
	for _, p := range paths {
		if err := p.run(ctx); err != nil {
			t.Fatalf("warm-up, %s: %v", p.name, err)
		}
	}
	alpha.srv.Flush(ctx)
	beta.srv.Flush(ctx)
	// Each stream runs on a fresh goroutine. The long-lived ones (the
	// settler's, the connections') keep the stacks the warm-up grew, which
	// no collection may shrink while the limit holds: their depth is not
	// per stream.
	debug.SetGCPercent(-1)
	debug.SetMaxStack(8 << 10)
	for _, p := range paths {
		for range 3 {
			if err := p.run(ctx); err != nil {
				t.Fatalf("%s: %v", p.name, err)
			}
		}
	}
	alpha.srv.Flush(ctx)
	beta.srv.Flush(ctx)
	debug.SetMaxStack(1 << 30)
	debug.SetGCPercent(100)
	t.Log("every path ran under the limit")
}

// serveGRPC serves srv on a loopback port with the server options opts;
// with none, with no stream workers: each stream gets a fresh goroutine,
// whose stack starts small.
func serveGRPC(tb testing.TB, srv *Server, opts ...grpc.ServerOption) extprocv3.ExternalProcessorClient {
	// The sidecar's codec, as it serves (cmd/gateway): opts may replace it.
	return serveProcessor(tb, srv, append([]grpc.ServerOption{grpc.ForceServerCodecV2(wire.NewCodec())}, opts...)...)
}

// serveProcessor serves p on loopback and returns its client.
func serveProcessor(tb testing.TB, p extprocv3.ExternalProcessorServer, opts ...grpc.ServerOption) extprocv3.ExternalProcessorClient {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	g := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(g, p)
	go g.Serve(l)
	tb.Cleanup(g.Stop)
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// messages is the request phases of a messages request with body.
func (r *rig) messages(body []byte) []*extprocv3.ProcessingRequest {
	return []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages",
			"x-api-key", r.key, "content-type", "application/json", "content-length", strconv.Itoa(len(body)), "anthropic-version", "2023-06-01")}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
	}
}

// responses is the request phases of a Responses request with body.
func (r *rig) responses(body []byte) []*extprocv3.ProcessingRequest {
	return []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(":method", "POST", ":path", "/beta/v1/responses",
			"authorization", "Bearer "+r.key, "content-type", "application/json", "content-length", strconv.Itoa(len(body)))}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
	}
}

// exchangeOver runs one request over a gRPC stream as Envoy would: the
// request phases, then (unless the processor answered at once) a 200 event
// stream of evs, calling between before the second event.
func exchangeOver(ctx context.Context, c extprocv3.ExternalProcessorClient, reqs []*extprocv3.ProcessingRequest, evs [][]byte, between func()) error {
	s, err := c.Process(ctx)
	if err != nil {
		return err
	}
	step := func(m *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		if err := s.Send(m); err != nil {
			return nil, err
		}
		return s.Recv()
	}
	for _, m := range reqs {
		resp, err := step(m)
		if err != nil {
			return err
		}
		if resp.GetImmediateResponse() != nil {
			return closeStream(s)
		}
	}
	if _, err := step(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream", "x-gateway-endpoint", "primary"),
	}}); err != nil {
		return err
	}
	for i, ev := range evs {
		if i == 1 && between != nil {
			between()
		}
		if _, err := step(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: ev, EndOfStream: i == len(evs)-1},
		}}); err != nil {
			return err
		}
	}
	return closeStream(s)
}

// closeStream ends a stream from the client's side and reads it to its end.
func closeStream(s extprocv3.ExternalProcessor_ProcessClient) error {
	if err := s.CloseSend(); err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
