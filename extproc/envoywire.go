package extproc

// Envoy's header maps and mutations, read and written by the ext_proc
// adapter (envoy.go), and the answers it shares.

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/modelgateway/gateway/extproc/wire"
)

// releaseMessage gives a stream's Message back after its exchange (a test
// poisons it instead).
var releaseMessage = (*wire.Message).Release

// readHeaders picks the headers the processor reads. Only their values are
// converted to strings: a request carries many more headers than these.
func readHeaders(m *corev3.HeaderMap) headerValues {
	hv := headerValues{names: (*headerMap)(m)}
	for _, h := range m.GetHeaders() {
		var dst *string
		switch k := h.GetKey(); k {
		case ":method":
			dst = &hv.method
		case ":path":
			dst = &hv.path
		case ":status":
			dst = &hv.status
		case "x-api-key":
			hv.credentials.XAPIKey = append(hv.credentials.XAPIKey, headerValue(h))
			continue
		case "authorization":
			hv.credentials.Authorization = append(hv.credentials.Authorization, headerValue(h))
			continue
		case "content-type":
			dst = &hv.contentType
		case "content-length":
			dst = &hv.contentLength
		case "upgrade":
			dst = &hv.upgrade
		case sessionHeader:
			dst = &hv.session
		case "x-request-id":
			dst = &hv.requestID
		case "x-gateway-endpoint":
			dst = &hv.endpoint
			hv.internal = append(hv.internal, k)
		default:
			if strings.HasPrefix(k, internalHeaderPrefix) {
				hv.internal = append(hv.internal, k)
			}
			continue
		}
		*dst = headerValue(h)
	}
	return hv
}

// headerMap is Envoy's header map as the names of its headers.
type headerMap corev3.HeaderMap

func (m *headerMap) Len() int          { return len((*corev3.HeaderMap)(m).GetHeaders()) }
func (m *headerMap) Name(i int) string { return (*corev3.HeaderMap)(m).GetHeaders()[i].GetKey() }

func headerValue(h *corev3.HeaderValue) string {
	if raw := h.GetRawValue(); len(raw) > 0 {
		return string(raw)
	}
	return h.GetValue()
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
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

// bodyMutation replaces a chunk with out; an empty out clears it.
func bodyMutation(out []byte) *extprocv3.BodyMutation {
	if len(out) == 0 {
		return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
	}
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
}

// The answers that change nothing, shared by every stream: an answer is
// only read once it is returned (encoded by Send), never changed, and a
// stream's chunk answered with one allocates nothing for it.
var (
	continueRequestTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
		RequestTrailers: &extprocv3.TrailersResponse{}}}
	continueResponseTrailers = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extprocv3.TrailersResponse{}}}
	continueResponseHeaders = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}}
	// ignoreReply: the reply's body is not sent to the processor.
	ignoreReply = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}},
		ModeOverride: &filterv3.ProcessingMode{ResponseBodyMode: filterv3.ProcessingMode_NONE}}
	continueResponseBody = &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}}}
)
