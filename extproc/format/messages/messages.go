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

// Name returns "messages".
func (Format) Name() string { return "messages" }

// ErrorBody renders {"type":"error","error":{"type":T,"message":M}}, the
// shape the vendor's SDKs parse. T follows the vendor's documented error
// types:
//
//	InvalidRequest    400  invalid_request_error
//	ModelNotFound     400  invalid_request_error (the vendor's own 404
//	                       not_found_error would contradict the 400 status)
//	Unauthenticated   401  authentication_error
//	BillingExhausted  402  billing_error
//	PermissionDenied  403  permission_error
//	NotFound          404  not_found_error
//	MethodNotAllowed  405  invalid_request_error (the vendor uses it for
//	                       4xx statuses it has no type for)
//	TooLarge          413  request_too_large
//	RateLimited       429  rate_limit_error
//	DailyLimit        429  rate_limit_error
//	Internal          500  api_error
//	Unavailable       503  overloaded_error (the vendor sends it with 529)
//	Timeout           504  timeout_error
func (Format) ErrorBody(e *format.Error) []byte {
	b := make([]byte, 0, len(e.Message)+64)
	b = append(b, `{"type":"error","error":{"type":`...)
	b = jsonscan.AppendQuote(b, errorType(e.Kind))
	b = append(b, `,"message":`...)
	b = jsonscan.AppendQuote(b, e.Message)
	return append(b, "}}"...)
}

func errorType(kind format.ErrorKind) string {
	switch kind {
	case format.InvalidRequest, format.ModelNotFound, format.MethodNotAllowed:
		return "invalid_request_error"
	case format.Unauthenticated:
		return "authentication_error"
	case format.BillingExhausted:
		return "billing_error"
	case format.PermissionDenied:
		return "permission_error"
	case format.NotFound:
		return "not_found_error"
	case format.TooLarge:
		return "request_too_large"
	case format.RateLimited, format.DailyLimit:
		return "rate_limit_error"
	case format.Unavailable:
		return "overloaded_error"
	case format.Timeout:
		return "timeout_error"
	default:
		return "api_error"
	}
}
