package responses

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/pricing"
)

// Operation is the Responses API (OpenAI's), with its stored responses:
// read back, cancelled and deleted only by the account that created them.
var Operation = operation.Operation{
	Name: "responses", API: "chat_completions", Format: Format{}, Modes: []string{"chat", "responses"},
	Paths: []operation.Path{
		{Method: "POST", Path: "/v1/responses"},
		{Method: "POST", Path: "/v1/responses/compact"},
		{Method: "POST", Path: "/v1/responses/input_tokens", Kind: operation.Counted},
		{Method: "GET", Path: "/v1/responses/{id}", Kind: operation.Owned, Query: []string{"include", "include[]", "stream", "starting_after", "include_obfuscation"}},
		{Method: "DELETE", Path: "/v1/responses/{id}", Kind: operation.Owned},
		{Method: "POST", Path: "/v1/responses/{id}/cancel", Kind: operation.Owned},
		{Method: "GET", Path: "/v1/responses/{id}/input_items", Kind: operation.Owned, Query: []string{"after", "before", "limit", "order", "include", "include[]"}},
	},
	GenAI:      operation.GenAI{Operation: "chat", Provider: "openai"},
	Bounds:     Bounds,
	Poll:       "/v1/responses/{id}",
	ValidID:    ValidID,
	References: References,
	Socket:     &Socket,
}

// defaultHoldInput is the context a request continuing a stored response
// (previous_response_id) is held for when the catalogue gives no input
// window for its model.
const defaultHoldInput = 1_000_000

// defaultHoldCalls is the number of built-in tool calls a request offering
// paid tools without max_tool_calls is held for. A reply making more is
// still charged in full: the hold bounds the balance check, not the charge.
const defaultHoldCalls = 10

// Bounds is the responses operation's hold rule: operation.TextBounds, and
// two more. A request continuing a stored response (previous_response_id)
// carries context the body does not show: its input is held for the
// model's whole input window (defaultHoldInput when the catalogue gives
// none), not the stored response's recorded size, which later turns and
// truncation change. Built-in tools with a per-call fee, when offered, are
// held for max_tool_calls calls (defaultHoldCalls without it).
func Bounds(price *pricing.Model, req format.Request, body []byte) operation.Bounds {
	b := operation.TextBounds(price, req, body)
	own, _ := req.Own.(Fields)
	if own.PreviousResponseID != "" {
		window := price.MaxInput
		if window == 0 {
			window = defaultHoldInput
		}
		b.Input += window
	}
	if own.PaidTools {
		b.Calls = defaultHoldCalls
		if own.HasMaxToolCalls {
			b.Calls = own.MaxToolCalls
		}
	}
	return b
}
