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

// errorTypes is the vendor's error type and code for each kind. The
// vendor's SDKs pick their exception class from the HTTP status; type and
// code follow what the vendor itself sends where it has an equivalent, and
// a null code (empty here) where it sends null. The vendor reports an unknown
// model with 404; the gateway keeps the 400 of format.ModelNotFound and sets
// the vendor's code. A daily spend limit is a quota that resets, so it takes
// the quota type with its own code rather than rate_limit_exceeded, which
// clients retry within seconds.
var errorTypes = [format.NumErrorKinds]struct{ typ, code string }{
	format.InvalidRequest:   {"invalid_request_error", ""},
	format.ModelNotFound:    {"invalid_request_error", "model_not_found"},
	format.Unauthenticated:  {"invalid_request_error", "invalid_api_key"},
	format.BillingExhausted: {"insufficient_quota", "insufficient_quota"},
	format.PermissionDenied: {"request_forbidden", "permission_denied"},
	format.NotFound:         {"invalid_request_error", ""},
	format.TooLarge:         {"invalid_request_error", "request_too_large"},
	format.RateLimited:      {"requests", "rate_limit_exceeded"},
	format.DailyLimit:       {"insufficient_quota", "daily_limit_exceeded"},
	format.Unavailable:      {"server_error", ""},
}

// ErrorBody renders {"error":{"message":M,"type":T,"param":P,"code":C}},
// the shape the vendor's SDKs parse, with T and C from errorTypes.
func (Format) ErrorBody(e *format.Error) []byte {
	t := errorTypes[e.Kind]
	b := make([]byte, 0, len(e.Message)+len(e.Param)+96)
	b = append(b, `{"error":{"message":`...)
	b = jsonscan.AppendQuote(b, e.Message)
	b = append(b, `,"type":`...)
	b = jsonscan.AppendQuote(b, t.typ)
	b = append(b, `,"param":`...)
	b = appendStringOrNull(b, e.Param)
	b = append(b, `,"code":`...)
	b = appendStringOrNull(b, t.code)
	return append(b, "}}"...)
}

// appendStringOrNull appends s as a JSON string, or null when it is empty.
func appendStringOrNull(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return jsonscan.AppendQuote(b, s)
}
