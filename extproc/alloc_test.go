package extproc

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"

	"github.com/modelgateway/gateway/extproc/wire"

	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/leases"
	"github.com/modelgateway/gateway/internal/redistest"
)

// The bookkeeping's allocation per request on the messages and chat paths,
// non-streaming, with leases on (the default): admitted from a lease, so
// that the in-process miniredis allocates next to nothing per request, and
// settled in batches. On the redis-server test/integration provides when
// there is one ($GATEWAY_TEST_REDIS), else on miniredis.

var (
	messagesJSONBody  = []byte(`{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"Hello there"}]}`)
	messagesJSONReply = []byte(`{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hello there, how can I help you today?"}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":11}}`)
	chatJSONBody      = []byte(`{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"user","content":"Hello there"}]}`)
	chatJSONReply     = []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, how can I help you today?"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":11,"total_tokens":23}}`)
)

// leased puts the rig's processor behind leases, renewed in the
// background until the test ends.
func (r *rig) leased(tb testing.TB) {
	m := leases.New(r.st, r.st, leases.Options{Logger: slog.New(slog.DiscardHandler)})
	r.srv.admitter = m
	ctx, cancel := context.WithCancel(context.Background())
	go m.Run(ctx)
	tb.Cleanup(cancel)
}

// jsonRequest runs one non-streaming request through the exchange, phase
// by phase, as Envoy would send it, and fails on any immediate response.
func (r *rig) jsonRequest(tb testing.TB, reqHeaders *extprocv3.HttpHeaders, body, reply []byte) {
	r.jsonMessages(tb, jsonMessages(reqHeaders, body, reply))
}

// jsonMessages are the four messages of a non-streaming request.
func jsonMessages(reqHeaders *extprocv3.HttpHeaders, body, reply []byte) []*extprocv3.ProcessingRequest {
	return []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: reqHeaders}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: headers(":status", "200", "content-type", "application/json",
			"content-length", strconv.Itoa(len(reply)), "x-gateway-endpoint", "primary")}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: reply, EndOfStream: true}}},
	}
}

// jsonMessages runs the messages of one request through an exchange.
func (r *rig) jsonMessages(tb testing.TB, msgs []*extprocv3.ProcessingRequest) {
	ctx := context.Background()
	x := &exchange{s: r.srv, ans: answers.Get().(*answer)} // as Process makes it
	defer answers.Put(x.ans)
	for _, m := range msgs {
		if ir := x.step(ctx, m).GetImmediateResponse(); ir != nil {
			tb.Fatalf("rejected: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	x.finish()
	if !x.settled {
		tb.Fatal("request not settled")
	}
}

// benchRig is a rig set up as the sidecar is, leases on.
func benchRig(b *testing.B, upstream string) *rig {
	var r *rig
	if addr := os.Getenv(redistest.AddrEnv); addr != "" {
		r = newRigOn(b, addr, upstream, rigAccount{}) // no server's allocations in the figure
	} else {
		r = newRigWith(b, upstream, rigAccount{})
	}
	// The sidecar's own handler, as cmd/gateway makes it: the request's
	// log line is part of the figure.
	r.srv.settler.lines = slog.New(slog.NewJSONHandler(io.Discard, nil))
	// Holds renewed, as in the sidecar.
	r.srv.holds = holds.NewRenewer(r.st, slog.New(slog.DiscardHandler))
	r.leased(b)
	return r
}

func benchmarkJSON(b *testing.B, upstream string, reqHeaders func(key string) *extprocv3.HttpHeaders, body, reply []byte) {
	r := benchRig(b, upstream)
	h := reqHeaders(r.key)
	// Envoy's messages are made once: what gRPC allocates to receive them
	// is not the processor's (the bench's figure has it).
	msgs := jsonMessages(h, body, reply)
	for range 100 {
		r.jsonRequest(b, h, body, reply) // the key cached, a lease granted
	}
	// Deadline-bound: leases are granted in the background.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		before := r.trips.n.Load()
		r.jsonRequest(b, h, body, reply)
		if r.trips.n.Load() == before {
			break
		}
	}
	r.srv.Flush(context.Background())
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r.jsonMessages(b, msgs)
	}
	b.StopTimer()
	r.srv.Flush(context.Background())
}

// BenchmarkMessagesJSON is a non-streaming messages request.
func BenchmarkMessagesJSON(b *testing.B) {
	benchmarkJSON(b, "alpha", func(key string) *extprocv3.HttpHeaders {
		return headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(messagesJSONBody)), "anthropic-version", "2023-06-01")
	}, messagesJSONBody, messagesJSONReply)
}

// BenchmarkChatJSON is a non-streaming chat completions request.
func BenchmarkChatJSON(b *testing.B) {
	benchmarkJSON(b, "beta", func(key string) *extprocv3.HttpHeaders {
		return headers(":method", "POST", ":path", "/beta/v1/chat/completions", "authorization", "Bearer "+key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(chatJSONBody)))
	}, chatJSONBody, chatJSONReply)
}

// BenchmarkMessagesJSONOverGRPC is BenchmarkMessagesJSON over a gRPC
// stream on loopback, served with the sidecar's codec and stream workers:
// the figure adds what serving a stream allocates outside the exchange,
// and the client's side of the stream, which no processor changes.
// Compare it across commits, not with the bench's figure.
func BenchmarkMessagesJSONOverGRPC(b *testing.B) {
	r := benchRig(b, "alpha")
	c := serveGRPC(b, r.srv, grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))), grpc.ForceServerCodecV2(wire.NewCodec()))
	msgs := jsonMessages(headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
		"content-type", "application/json", "anthropic-version", "2023-06-01"), messagesJSONBody, messagesJSONReply)
	ctx := context.Background()
	for range 300 { // the key cached, a lease granted, the workers started
		if err := sendAll(ctx, c, msgs); err != nil {
			b.Fatal(err)
		}
	}
	r.srv.Flush(ctx)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := sendAll(ctx, c, msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	r.srv.Flush(ctx)
}

// BenchmarkNullOverGRPC serves BenchmarkMessagesJSONOverGRPC's stream with
// processors that answer every message and do nothing else, as the bench's
// null processor does: with protobuf's codec, as the bench's floor serves,
// and with the sidecar's (each message received into a reused
// wire.Message, answered with the shared answers). The two differ only in
// how Envoy's messages are decoded; what the second allocates (the client's
// side of the stream included, as in BenchmarkMessagesJSONOverGRPC) is
// gRPC's own per stream, which no processor served by gRPC-Go goes under.
func BenchmarkNullOverGRPC(b *testing.B) {
	msgs := jsonMessages(headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", "cr_x",
		"content-type", "application/json", "anthropic-version", "2023-06-01"), messagesJSONBody, messagesJSONReply)
	for _, codec := range []string{"protobuf", "wire"} {
		b.Run(codec, func(b *testing.B) {
			c := serveNull(b, codec == "wire", grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))))
			ctx := context.Background()
			for range 300 {
				if err := sendAll(ctx, c, msgs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := sendAll(ctx, c, msgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// nullProcessor answers every message with its continuation.
type nullProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
	wire bool // receive into a reused wire.Message
}

var (
	nullRequestHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{}}, ModeOverride: MeteredMode}
	nullRequestBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{}}}
)

func (p nullProcessor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	in := wire.NewMessage()
	defer in.Release()
	for {
		var req *extprocv3.ProcessingRequest
		var err error
		if p.wire {
			req, err = in.Recv(stream)
		} else {
			req, err = stream.Recv()
		}
		if err != nil {
			return nil
		}
		var resp *extprocv3.ProcessingResponse
		switch req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = nullRequestHeaders
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = nullRequestBody
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = continueResponseHeaders
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = continueResponseBody
		default:
			continue
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// serveNull serves a null processor on loopback (with the sidecar's codec
// when reuse) and returns its client.
func serveNull(tb testing.TB, reuse bool, opts ...grpc.ServerOption) extprocv3.ExternalProcessorClient {
	if reuse {
		opts = append(opts, grpc.ForceServerCodecV2(wire.NewCodec()))
	}
	return serveProcessor(tb, nullProcessor{wire: reuse}, opts...)
}
