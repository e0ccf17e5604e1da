package main

import (
	"log"
	"net"
	"runtime"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/modelgateway/gateway/extproc"
)

// nullProcessor is the floor of the ext_proc design: it answers every
// message with CONTINUE and does nothing else. Envoy runs it under the
// gateway's own bootstrap and processing modes, so whatever the gateway adds
// on top of it is the gateway's own work (credentials, Redis, metering).
type nullProcessor struct {
	extprocv3.UnimplementedExternalProcessorServer
}

var (
	// The gateway turns response processing on per metered request (the
	// bootstrap's default is off); the floor does the same, with the same
	// modes.
	continueRequestHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{}}, ModeOverride: extproc.MeteredMode}
	continueRequestBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{}}}
	continueResponseHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{}}}
	continueResponseBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{}}}
	continueRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	continueResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
)

func (nullProcessor) Process(stream extprocv3.ExternalProcessor_ProcessServer) error {
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // end of the HTTP request, or Envoy reset it
		}
		var resp *extprocv3.ProcessingResponse
		switch req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			resp = continueRequestHeaders
		case *extprocv3.ProcessingRequest_RequestBody:
			resp = continueRequestBody
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			resp = continueResponseHeaders
		case *extprocv3.ProcessingRequest_ResponseBody:
			resp = continueResponseBody
		case *extprocv3.ProcessingRequest_RequestTrailers:
			resp = continueRequestTrailers
		case *extprocv3.ProcessingRequest_ResponseTrailers:
			resp = continueResponseTrailers
		default:
			continue
		}
		if err := stream.Send(resp); err != nil {
			return err
		}
	}
}

// serveNull runs the null processor on addr until the process is killed.
// The gRPC server is set up as the sidecar's is (message size, keepalive
// policy, stream workers), so that the two differ only in what they do per
// message.
func serveNull(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.MaxRecvMsgSize(33<<20),
		grpc.MaxSendMsgSize(33<<20),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
	)
	extprocv3.RegisterExternalProcessorServer(srv, nullProcessor{})
	log.Fatal(srv.Serve(l))
}

// startNull runs the null processor as a child process (this same binary),
// so that its CPU time is measured apart from the load generator's, and
// returns the address it listens on once it accepts connections.
func startNull(tb *benchTB) (addr string, pid int) {
	p, addr := startChild(tb, "null-processor")
	return addr, p.Cmd.Process.Pid
}
