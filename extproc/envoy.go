package extproc

// The ext_proc adapter: Envoy's processing messages of one HTTP request
// as the exchange's inputs (the headers it reads, the body, the reply's
// chunks), and its answers (Refusals, how a request goes on and what the
// gateway sees of it, a reply chunk's replacement) as Envoy's messages.

import (
	"context"
	"errors"
	"io"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelgateway/gateway/extproc/wire"
	"github.com/modelgateway/gateway/internal/keypool"
)

// Process handles one HTTP request's stream of processing messages.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) (err error) {
	x, in := exchanges.Get().(*exchange), wire.NewMessage() // both kept for the next stream
	*x = exchange{s: s, extend: messageTimeout(stream.Send), ans: answers.Get().(*answer)}
	s.active.Add(1)
	defer s.active.Done()
	s.metrics.inflight.Inc()
	defer s.metrics.inflight.Dec()
	// A bug in one exchange must not take the sidecar, and every other
	// request with it, down: end this stream (Envoy fails it closed) and log
	// where, never what (the panic value could hold request data).
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("processor panic; stream ended", "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "internal error")
			return // not reused: its state is whatever the panic left
		}
		ans := x.ans
		releaseExchange(x)
		releaseMessage(in) // after the exchange: its request's body is in it
		answers.Put(ans)
	}()
	// Whatever ends the stream, an admitted request is settled exactly once
	// with what was observed.
	defer x.finish()
	ctx := s.traceContext(stream.Context())
	for {
		req, err := in.Recv(stream)
		if err != nil {
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		resp := x.handle(ctx, req)
		if resp == nil {
			continue
		}
		err = stream.Send(resp)
		// Even if the answer could not be sent: the reply was complete.
		x.afterSend(ctx)
		if err != nil {
			return err
		}
	}
}

// messageTimeout extends Envoy's message timeout by a message sent with
// send.
func messageTimeout(send func(*extprocv3.ProcessingResponse) error) func(time.Duration) error {
	return func(d time.Duration) error {
		return send(&extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(d)})
	}
}

func (x *exchange) handle(ctx context.Context, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.envoyRequestHeaders(ctx, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.envoyRequestBody(ctx, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return x.responseHeaders(r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return x.responseBody(ctx, req, r.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return continueRequestTrailers
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return continueResponseTrailers
	}
	return nil
}

// envoyRequestHeaders answers the request's headers: a refusal as an
// immediate response, or the mutation and the processing mode of what the
// gateway sees of the request from here.
func (x *exchange) envoyRequestHeaders(ctx context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	hv := readHeaders(h.GetHeaders())
	hv.bodyless = h.GetEndOfStream()
	o, r := x.requestHeaders(ctx, &hv)
	if r != nil {
		return r.immediate()
	}
	return x.answer().requestHeaders(o)
}

// envoyRequestBody answers the request's body, buffered whole. Its frame
// is kept small (the answer built by bodyAnswer): the admission's round
// trip below it is the deepest point of the stream's goroutine.
func (x *exchange) envoyRequestBody(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	return x.bodyAnswer(x.requestBody(ctx, b.GetBody()))
}

// answer is where the exchange's answers are built: the stream's (Process
// gives one from the pool), else one of the exchange's own.
func (x *exchange) answer() *answer {
	if x.ans == nil {
		x.ans = new(answer)
	}
	return x.ans
}

// bodyAnswer answers a request's body: a refusal as an immediate
// response, or the body going on as o says.
func (x *exchange) bodyAnswer(o *onward, r *Refusal) *extprocv3.ProcessingResponse {
	if r != nil {
		return r.immediate()
	}
	return x.answer().requestBody(o)
}

// modes are the processing modes of what the gateway sees of a request.
// No response headers message: the status and the serving endpoint arrive
// as attributes with the first body chunk (response_attributes in the
// bootstrap). Envoy's default skips the reply (so that its own replies to
// malformed requests are never held); a metered request needs it.
var modes = [...]*filterv3.ProcessingMode{
	seesNothing: mode(filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_NONE),
	seesMetered: MeteredMode,
	seesBody:    mode(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_NONE),
	seesReply:   mode(filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_STREAMED),
}

// MeteredMode is the processing mode of a metered request: the body
// buffered for admission, the reply's body streamed to the meter.
var MeteredMode = mode(filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED)

// mode is the processing mode that sends the request's body and the
// reply's as body and reply say, and no other message past the request's
// headers.
func mode(body, reply filterv3.ProcessingMode_BodySendMode) *filterv3.ProcessingMode {
	return &filterv3.ProcessingMode{
		RequestHeaderMode: filterv3.ProcessingMode_SEND, RequestBodyMode: body, RequestTrailerMode: filterv3.ProcessingMode_SKIP,
		ResponseHeaderMode: filterv3.ProcessingMode_SKIP, ResponseBodyMode: reply, ResponseTrailerMode: filterv3.ProcessingMode_SKIP,
	}
}

// responseHeaders answers the reply's headers. The reply's phases are
// functions of their own so that the request's phases, which share
// handle's frame, keep a small stack.
func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	hv := readHeaders(h.GetHeaders())
	code, _ := strconv.Atoi(hv.status)
	if !x.replyHeaders(code, hv.endpoint, hv.contentType, h.GetEndOfStream()) {
		return ignoreReply
	}
	return continueResponseHeaders
}

// responseBody answers a chunk of the reply.
func (x *exchange) responseBody(ctx context.Context, req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	out, changed, refused := x.replyChunk(ctx, replyHeadOf(req.GetAttributes(), req.GetMetadataContext()), b.GetBody(), b.GetEndOfStream())
	if refused != nil {
		return refused.immediate()
	}
	if !changed {
		return continueResponseBody
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: bodyMutation(out)}},
	}}
}

// attributesKey is where Envoy puts the ext_proc filter's attributes.
const attributesKey = "envoy.filters.http.ext_proc"

// statusOf reads the reply's status from the attributes Envoy sends with
// the first body chunk; 0 when absent.
func statusOf(attrs map[string]*structpb.Struct) int {
	return int(attrs[attributesKey].GetFields()["response.code"].GetNumberValue())
}

// replyHeadOf reads how the reply began from the attributes and metadata
// Envoy sends with its first body chunk; nil with any other chunk (no
// attributes).
func replyHeadOf(attrs map[string]*structpb.Struct, md *corev3.Metadata) *replyHead {
	if attrs == nil {
		return nil
	}
	f := attrs[attributesKey].GetFields()
	h := &replyHead{status: statusOf(attrs), address: f["upstream.address"].GetStringValue()}
	// The host metadata arrives as protobuf text; only the endpoint's and
	// the key's names are read from it.
	if m := f["xds.upstream_host_metadata"].GetStringValue(); m != "" {
		switch ep := metadataString(m, "endpoint"); ep {
		case "reserve", "primary":
			h.endpoint = ep
		}
		h.key = metadataString(m, "key")
	}
	if v, ok := md.GetFilterMetadata()[keypool.HeadroomNamespace].GetFields()[keypool.HeadroomField]; ok {
		h.headroom, h.hasHeadroom = v.GetNumberValue(), true
	}
	return h
}

// immediate is r as Envoy's immediate response; nil when r is.
func (r *Refusal) immediate() *extprocv3.ProcessingResponse {
	if r == nil {
		return nil
	}
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a stable order for the same refusal
	hm := &extprocv3.HeaderMutation{SetHeaders: make([]*corev3.HeaderValueOption, 0, len(keys))}
	for _, k := range keys {
		hm.SetHeaders = append(hm.SetHeaders, setHeader(strings.ToLower(k), r.Header.Get(k)))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)},
			Headers: hm,
			Body:    r.Body,
			Details: "gateway_" + strconv.Itoa(r.Status),
		},
	}}
}
