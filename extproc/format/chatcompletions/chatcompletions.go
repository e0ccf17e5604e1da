// Package chatcompletions implements the "chat_completions" wire format (the OpenAI Chat
// Completions API, served on /beta/v1/chat/completions).
package chatcompletions

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
)

// Format is the "chat_completions" format. The zero value is ready to use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "chat_completions".
func (Format) Name() string { return "chat_completions" }

// ErrorBody renders {"error":{"message":M,"type":T,"param":P,"code":C},
// the shape the vendor's SDKs parse. The vendor's SDKs pick their exception
// class from the HTTP status; type and code follow what the vendor itself
// sends where it has an equivalent, and a null code where it sends null:
//
//	kind              status  type                   code
//	InvalidRequest    400     invalid_request_error  null
//	ModelNotFound     400     invalid_request_error  model_not_found
//	Unauthenticated   401     invalid_request_error  invalid_api_key
//	BillingExhausted  402     insufficient_quota     insufficient_quota
//	PermissionDenied  403     request_forbidden      permission_denied
//	NotFound          404     invalid_request_error  null
//	MethodNotAllowed  405     invalid_request_error  null
//	TooLarge          413     invalid_request_error  request_too_large
//	RateLimited       429     requests               rate_limit_exceeded
//	DailyLimit        429     insufficient_quota     daily_limit_exceeded
//	Internal          500     server_error           null
//	Unavailable       503     server_error           null
//	Timeout           504     server_error           timeout
//
// The vendor reports an unknown model with 404; the gateway keeps the status
// of format.ModelNotFound and sets the vendor's code. A daily spend limit is
// a quota that resets, so it takes the quota type with its own code rather
// than rate_limit_exceeded, which clients retry within seconds.
func (Format) ErrorBody(e *format.Error) []byte {
	typ, code := errorTypeCode(e.Kind)
	b := make([]byte, 0, len(e.Message)+len(e.Param)+96)
	b = append(b, `{"error":{"message":`...)
	b = jsonscan.AppendQuote(b, e.Message)
	b = append(b, `,"type":`...)
	b = jsonscan.AppendQuote(b, typ)
	b = append(b, `,"param":`...)
	if e.Param == "" {
		b = append(b, "null"...)
	} else {
		b = jsonscan.AppendQuote(b, e.Param)
	}
	b = append(b, `,"code":`...)
	if code == "" {
		b = append(b, "null"...)
	} else {
		b = jsonscan.AppendQuote(b, code)
	}
	return append(b, "}}"...)
}

func errorTypeCode(kind format.ErrorKind) (typ, code string) {
	switch kind {
	case format.InvalidRequest, format.NotFound, format.MethodNotAllowed:
		return "invalid_request_error", ""
	case format.ModelNotFound:
		return "invalid_request_error", "model_not_found"
	case format.Unauthenticated:
		return "invalid_request_error", "invalid_api_key"
	case format.BillingExhausted:
		return "insufficient_quota", "insufficient_quota"
	case format.PermissionDenied:
		return "request_forbidden", "permission_denied"
	case format.TooLarge:
		return "invalid_request_error", "request_too_large"
	case format.RateLimited:
		return "requests", "rate_limit_exceeded"
	case format.DailyLimit:
		return "insufficient_quota", "daily_limit_exceeded"
	case format.Timeout:
		return "server_error", "timeout"
	default: // Internal, Unavailable
		return "server_error", ""
	}
}
