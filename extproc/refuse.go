package extproc

// Answers the processor gives itself: refusals in the upstream's vendor
// format, built once as a Refusal whatever the transport (the ext_proc
// adapter sends it as Envoy's immediate response, a line as its error
// event).

import (
	"net/http"
	"strconv"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
)

// A Refusal is the gateway's own answer to a request in place of the
// vendor's: an HTTP reply's status, headers and body, in the operation's
// format (a refusal, or the few answers the gateway gives itself, such as
// the model list).
type Refusal struct {
	Status int
	Header http.Header
	Body   []byte
}

// newRefusal is the gateway's answer of status with body, retryAfter > 0 said
// in retry-after (whole seconds).
func newRefusal(status int, contentType string, body []byte, retryAfter time.Duration) *Refusal {
	h := http.Header{"Content-Type": {contentType}}
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retrySeconds(retryAfter)))
	}
	return &Refusal{Status: status, Header: h, Body: body}
}

// Write answers an HTTP request (a transport's handshake) with r.
func (r *Refusal) Write(w http.ResponseWriter) {
	for k, vs := range r.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(r.Status)
	w.Write(r.Body)
}

// reject answers the client directly, in the upstream's vendor error format.
func (x *exchange) reject(kind format.ErrorKind, msg string, retryAfter time.Duration) *Refusal {
	return x.refuse(&format.Error{Kind: kind, Message: msg}, retryAfter)
}

func (x *exchange) refuse(e *format.Error, retryAfter time.Duration) *Refusal {
	x.s.metrics.rejections.WithLabelValues(x.upstream.Name, e.Kind.Reason()).Inc()
	return newRefusal(e.Status(), "application/json", x.upstream.Format.ErrorBody(e), retryAfter)
}

// refuseFinal refuses a request that waiting will not cure: no
// retry-after, and x-should-retry: false, which both vendors' SDKs obey
// instead of retrying. A limit that resets (a daily or monthly budget;
// resetIn > 0) says when in x-gateway-limit-reset, as RFC 3339 UTC.
func (x *exchange) refuseFinal(kind format.ErrorKind, msg string, resetIn time.Duration) *Refusal {
	r := x.reject(kind, msg, 0)
	r.Header.Set("x-should-retry", "false")
	if resetIn > 0 {
		at := x.s.now().Add(resetIn).UTC().Truncate(time.Second)
		r.Header.Set("x-gateway-limit-reset", at.Format(time.RFC3339))
	}
	return r
}

// retrySeconds rounds a retry delay up to whole seconds, at least one.
func retrySeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
