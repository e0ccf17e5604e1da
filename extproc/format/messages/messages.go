// Package messages implements the "messages" wire format (the Anthropic Messages
// API, served on /alpha/v1/messages).
package messages

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
)

// Format is the "messages" format. The zero value is ready to use.
type Format struct{}

var _ format.Format = Format{}

// errorTypes is the vendor's documented error type for each kind. Where
// the vendor has no type for a status the gateway uses, it sends
// invalid_request_error, as it does itself for such 4xx statuses.
var errorTypes = [format.NumErrorKinds]string{
	format.InvalidRequest:   "invalid_request_error",
	format.ModelNotFound:    "invalid_request_error", // the vendor's not_found_error would contradict the 400
	format.Unauthenticated:  "authentication_error",
	format.BillingExhausted: "billing_error",
	format.PermissionDenied: "permission_error",
	format.NotFound:         "not_found_error",
	format.TooLarge:         "request_too_large",
	format.RateLimited:      "rate_limit_error",
	format.DailyLimit:       "rate_limit_error",
	format.Unavailable:      "overloaded_error", // the vendor sends it with 529
}

// ErrorBody renders {"type":"error","error":{"type":T,"message":M}}, the
// shape the vendor's SDKs parse, with T from errorTypes.
func (Format) ErrorBody(e *format.Error) []byte {
	b := make([]byte, 0, len(e.Message)+64)
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonscan.AppendQuote(b, errorTypes[e.Kind])
	b = append(b, `,"message":`...)
	b = jsonscan.AppendQuote(b, e.Message)
	return append(b, "}}"...)
}
