package extproc

// A vendor's 401 or 403 is about the operator's credential (the vendor
// never sees the client's): its body may name the key, or its last
// characters, and never reaches the client. The gateway's own error in the
// vendor's format replaces it, with the vendor's status kept: the SDKs do
// not retry a 401 or 403, and no retry could cure what only the operator
// can, while a 502 would be retried twice by each SDK against the same
// refusing key. The message says that the client's key was accepted.

import (
	"net/http"

	"github.com/modelgateway/gateway/extproc/format"
)

// vendorRefusal reports whether a vendor status is a refusal of the
// operator's credential, whose body is replaced.
func vendorRefusal(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// vendorRefusalBody is the gateway's body in place of the vendor's
// refusal of status, in f's format.
func vendorRefusalBody(f format.Format, status int) []byte {
	if status == http.StatusForbidden {
		return f.ErrorBody(&format.Error{Kind: format.PermissionDenied,
			Message: "the vendor refused this request for the gateway's own vendor account (403); your key was accepted; the gateway's operator can tell why"})
	}
	return f.ErrorBody(&format.Error{Kind: format.Unauthenticated,
		Message: "the vendor refused the gateway's own vendor credential (401); your key was accepted; the gateway's operator must replace the vendor credential"})
}

// scrubRefusal is what replaces a chunk of the reply to a metered request
// that the vendor refused (vendorRefusal): the first chunk becomes the
// gateway's error, every later one is cleared (nil). Envoy drops the
// vendor's content-length on a streamed body that the processor may
// change.
func (x *exchange) scrubRefusal(first bool) []byte {
	if !first {
		return nil
	}
	x.s.metrics.vendorRefusals.WithLabelValues(x.upstream.Name).Inc()
	x.s.log.Warn("the vendor refused the gateway's credential", "upstream", x.upstream.Name, "status", x.status, "vendor_key", x.vendorKey)
	f := x.upstream.Format
	if x.op != nil {
		f = x.op.Format
	}
	return vendorRefusalBody(f, x.status)
}
