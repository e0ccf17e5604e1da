package extproc

// Envoy's header maps and mutations, read and written by the ext_proc
// adapter (envoy.go), and the answers it shares.

import (
	"slices"
	"strings"
	"sync"

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

// An answer is where a stream's answers to its request's headers and body
// are built, kept from one message to the next and from one stream to the
// next (Process): Send encodes an answer before it returns, and nothing
// reads it after.
type answer struct {
	resp     extprocv3.ProcessingResponse
	headers  extprocv3.ProcessingResponse_RequestHeaders
	body     extprocv3.ProcessingResponse_RequestBody
	headersR extprocv3.HeadersResponse
	bodyR    extprocv3.BodyResponse
	common   extprocv3.CommonResponse
	mutation extprocv3.HeaderMutation
	edit     extprocv3.BodyMutation
	editBody extprocv3.BodyMutation_Body
	set      []*corev3.HeaderValueOption
	options  []corev3.HeaderValueOption
	values   []corev3.HeaderValue
	raw      []byte
}

var answers = sync.Pool{New: func() any { return new(answer) }}

// requestHeaders answers the request's headers going on as o says.
func (a *answer) requestHeaders(o *onward) *extprocv3.ProcessingResponse {
	a.resp.Reset()
	a.headersR.Reset()
	a.headersR.Response = a.commonOf(o)
	a.headers.RequestHeaders = &a.headersR
	a.resp.Response = &a.headers
	a.resp.ModeOverride = modes[o.sees]
	return &a.resp
}

// requestBody answers the request's body going on as o says.
func (a *answer) requestBody(o *onward) *extprocv3.ProcessingResponse {
	a.resp.Reset()
	a.bodyR.Reset()
	a.bodyR.Response = a.commonOf(o)
	a.body.RequestBody = &a.bodyR
	a.resp.Response = &a.body
	return &a.resp
}

// commonOf is o as Envoy's mutations of a request, built in a.
func (a *answer) commonOf(o *onward) *extprocv3.CommonResponse {
	r := &a.common
	r.Reset()
	r.ClearRouteCache = o.reroute
	if len(o.set) > 0 || len(o.remove) > 0 {
		a.mutation.Reset()
		a.mutation.RemoveHeaders = o.remove
		n := len(o.set)
		a.set, a.options, a.values = slices.Grow(a.set[:0], n), slices.Grow(a.options[:0], n)[:n], slices.Grow(a.values[:0], n)[:n]
		a.raw = a.raw[:0]
		for i, kv := range o.set {
			// A value appended past a.raw's room moves it: the values
			// before keep the array they were sliced from.
			at := len(a.raw)
			a.raw = append(a.raw, kv[1]...)
			v, opt := &a.values[i], &a.options[i]
			v.Reset()
			v.Key, v.RawValue = kv[0], a.raw[at:len(a.raw):len(a.raw)]
			opt.Reset()
			opt.Header, opt.AppendAction = v, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
			a.set = append(a.set, opt)
		}
		a.mutation.SetHeaders = a.set
		r.HeaderMutation = &a.mutation
	}
	if o.edited {
		a.edit.Reset()
		a.editBody.Body = o.body
		a.edit.Mutation = &a.editBody
		r.BodyMutation = &a.edit
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
