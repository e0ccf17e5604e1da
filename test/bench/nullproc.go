package main

import (
	"log"
	"net"
	"net/http"
	"runtime"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/modelgateway/gateway/extproc"
	"github.com/modelgateway/gateway/test/launch"
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

// serveNull runs the null processor on addr until the process is killed,
// and its Go runtime's metrics (Prometheus text, as the sidecar's) on
// metricsAddr. The gRPC server is set up as the sidecar's is (message
// size, keepalive policy, stream workers), so that the two differ only in
// what they do per message.
func serveNull(addr, metricsAddr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	if metricsAddr != "" {
		go func() { log.Fatal(http.ListenAndServe(metricsAddr, promhttp.Handler())) }()
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
// returns the address it listens on once it accepts connections and the
// URL of its metrics.
func startNull(tb *benchTB, env []string) (addr, metrics string, pid int) {
	addrs, err := launch.FreeAddrs(1)
	if err != nil {
		tb.Fatal(err)
	}
	p, addr := startChild(tb, "null-processor", env, "-null-metrics", addrs[0])
	return addr, "http://" + addrs[0] + "/metrics", p.Cmd.Process.Pid
}
