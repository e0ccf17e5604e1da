// Package responses implements the "responses" wire format: the OpenAI
// Responses API (POST /v1/responses and /v1/responses/compact), served on
// /beta/v1/responses beside chat completions.
//
// Unlike chat completions, the vendor keeps what this API produces: a
// response is stored (unless the request says "store": false) and can be
// read back, continued (previous_response_id), cancelled or deleted by its
// id. The gateway binds every id to the account that created it (see
// internal/owners); this package reads the ids and the request fields that
// refer to them.
package responses

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
)

// Format is the "responses" format. The zero value is ready to use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "responses".
func (Format) Name() string { return "responses" }

// ErrorBody renders an error as the vendor does on every path of its API:
// the same shape, types and codes as chat completions.
func (Format) ErrorBody(e *format.Error) []byte { return chatcompletions.Format{}.ErrorBody(e) }
