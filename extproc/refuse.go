package extproc

// Answers the processor gives itself: refusals in the upstream's vendor format.

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/modelgateway/gateway/extproc/format"
)

// reject answers the client directly, in the upstream's vendor error format.
func (x *exchange) reject(kind format.ErrorKind, msg string, retryAfter time.Duration) *extprocv3.ProcessingResponse {
	return x.refuse(&format.Error{Kind: kind, Message: msg}, retryAfter)
}

func (x *exchange) refuse(e *format.Error, retryAfter time.Duration) *extprocv3.ProcessingResponse {
	x.s.metrics.rejections.WithLabelValues(x.upstream.Name, e.Kind.Reason()).Inc()
	return immediate(e.Status(), "application/json", x.upstream.Format.ErrorBody(e), retryAfter)
}

// refuseFinal refuses a request that waiting will not cure: no
// retry-after, and x-should-retry: false, which both vendors' SDKs obey
// instead of retrying. A limit that resets (a daily or monthly budget;
// resetIn > 0) says when in x-gateway-limit-reset, as RFC 3339 UTC.
func (x *exchange) refuseFinal(kind format.ErrorKind, msg string, resetIn time.Duration) *extprocv3.ProcessingResponse {
	resp := x.reject(kind, msg, 0)
	hm := resp.GetImmediateResponse().Headers
	hm.SetHeaders = append(hm.SetHeaders, setHeader("x-should-retry", "false"))
	if resetIn > 0 {
		at := x.s.now().Add(resetIn).UTC().Truncate(time.Second)
		hm.SetHeaders = append(hm.SetHeaders, setHeader("x-gateway-limit-reset", at.Format(time.RFC3339)))
	}
	return resp
}

func immediate(code int, contentType string, body []byte, retryAfter time.Duration) *extprocv3.ProcessingResponse {
	hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", contentType)}}
	if retryAfter > 0 {
		hm.SetHeaders = append(hm.SetHeaders, setHeader("retry-after", strconv.Itoa(retrySeconds(retryAfter))))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: hm,
			Body:    body,
			Details: "gateway_" + strconv.Itoa(code),
		},
	}}
}

// retrySeconds rounds a retry delay up to whole seconds, at least one.
func retrySeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
