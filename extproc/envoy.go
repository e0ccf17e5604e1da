package extproc

// The ext_proc adapter: Envoy's processing messages of one HTTP request
// as the exchange's inputs, and its answers (Refusals, a reply chunk's
// replacement, how a request goes on) as Envoy's messages. The request's
// phases (headers.go, admission.go) still read Envoy's messages and pick
// the processing mode themselves.

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

	"github.com/modelgateway/gateway/internal/keypool"
)

// Process handles one HTTP request's stream of processing messages.
func (s *Server) Process(stream extprocv3.ExternalProcessor_ProcessServer) (err error) {
	x := &exchange{s: s, extend: messageTimeout(stream.Send)}
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
		}
	}()
	// Whatever ends the stream, an admitted request is settled exactly once
	// with what was observed.
	defer x.finish()
	ctx := s.traceContext(stream.Context())
	for {
		req, err := stream.Recv()
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
		return x.requestHeaders(ctx, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(ctx, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return x.responseHeaders(r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return x.responseBody(ctx, req, r.ResponseBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return nil
}

// responseHeaders answers the reply's headers. The reply's phases are
// functions of their own so that the request's phases, which share
// handle's frame, keep a small stack.
func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	hv := readHeaders(h.GetHeaders())
	code, _ := strconv.Atoi(hv.status)
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}},
	}}
	if !x.replyHeaders(code, hv.endpoint, hv.contentType, h.GetEndOfStream()) {
		resp.ModeOverride = &filterv3.ProcessingMode{ResponseBodyMode: filterv3.ProcessingMode_NONE}
	}
	return resp
}

// responseBody answers a chunk of the reply.
func (x *exchange) responseBody(ctx context.Context, req *extprocv3.ProcessingRequest, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	out, changed, refused := x.replyChunk(ctx, replyHeadOf(req.GetAttributes(), req.GetMetadataContext()), b.GetBody(), b.GetEndOfStream())
	if refused != nil {
		return refused.immediate()
	}
	common := &extprocv3.CommonResponse{}
	if changed {
		common.BodyMutation = bodyMutation(out)
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: common},
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

// common is o as Envoy's mutations of a request.
func (o *onward) common() *extprocv3.CommonResponse {
	r := &extprocv3.CommonResponse{ClearRouteCache: o.reroute}
	if len(o.set) > 0 || len(o.remove) > 0 {
		r.HeaderMutation = &extprocv3.HeaderMutation{RemoveHeaders: o.remove}
		for _, kv := range o.set {
			r.HeaderMutation.SetHeaders = append(r.HeaderMutation.SetHeaders, setHeader(kv[0], kv[1]))
		}
	}
	if o.edited {
		r.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: o.body}}
	}
	return r
}

// bodyAnswer lets a request's body go on as o says.
func bodyAnswer(o *onward) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: o.common()},
	}}
}

// bodyMutation replaces a chunk with out; an empty out clears it.
func bodyMutation(out []byte) *extprocv3.BodyMutation {
	if len(out) == 0 {
		return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
	}
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
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

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
