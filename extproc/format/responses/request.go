package responses

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/tokens"
)

const (
	reqModel = iota
	reqMaxOutput
	reqStream
	reqBackground
	reqPrevious
	reqStore
	reqTools
	reqToolType
	reqMaxToolCalls
	reqConversation
	reqInputType
)

var requestQuery = jsonscan.NewQuery(
	"model",
	"max_output_tokens",
	"stream",
	"background",
	"previous_response_id",
	"store",
	"tools",
	"tools[].type",
	"max_tool_calls",
	"conversation",
	"input[].type",
)

// MaxIDBytes bounds a response id a request may name. The vendor's ids are
// "resp_" and some 50 characters; the id becomes part of a Redis key.
const MaxIDBytes = 128

// ValidID reports whether id can be a response id: 1 to MaxIDBytes
// characters of letters, digits, '_' and '-'.
func ValidID(id string) bool {
	if id == "" || len(id) > MaxIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ParseRequest reads the fields of a create (or compact) request that
// admission needs, validating the whole body as strict JSON: model
// (required), max_output_tokens (an integer from 1 to 2^31-1), stream,
// background, store (booleans; null means absent), previous_response_id (a
// response id), max_tool_calls (a non-negative integer) and the types of the
// tools offered. A request naming a stored conversation, or referring to
// stored items by id (item_reference), is refused: the gateway binds only
// responses to accounts.
func (Format) ParseRequest(body []byte, _ string) (format.Request, error) {
	var req format.Request
	var own Fields
	var haveModel bool
	var check format.RequestCheck
	err := requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
		if check.Failed() {
			return nil
		}
		switch path {
		case reqModel:
			req.Model, haveModel = check.Model(v)
		case reqMaxOutput:
			if v.Kind != jsonscan.Null {
				req.MaxTokens, req.HasMaxTokens = check.TokenLimit("max_output_tokens", v)
			}
		case reqStream:
			req.Stream = check.Bool("stream", v)
		case reqBackground:
			req.Background = check.Bool("background", v)
		case reqStore:
			if v.Kind == jsonscan.False {
				req.NoStore = true
			} else if v.Kind != jsonscan.True && v.Kind != jsonscan.Null {
				check.Fail("store", "must be a boolean")
			}
		case reqPrevious:
			if v.Kind == jsonscan.Null {
				return nil
			}
			if v.Kind != jsonscan.String || !ValidID(v.Text()) {
				check.Fail("previous_response_id", "must be a response id")
				return nil
			}
			own.PreviousResponseID = v.Text()
		case reqTools:
			req.HasTools = v.Kind == jsonscan.Array && format.NonEmptyArray(v.Raw)
		case reqToolType:
			if paidTool(v) {
				own.PaidTools = true
			}
		case reqMaxToolCalls:
			if v.Kind == jsonscan.Null {
				return nil
			}
			n, ok := v.Int()
			if !ok || n < 0 || n > format.MaxTokensLimit {
				check.Fail("max_tool_calls", "must be a non-negative integer")
				return nil
			}
			own.MaxToolCalls, own.HasMaxToolCalls = n, true
		case reqConversation:
			if v.Kind != jsonscan.Null {
				check.Fail("conversation", "stored conversations are not available through this gateway; use previous_response_id")
			}
		case reqInputType:
			// A reference names a stored item by its id alone, which the
			// gateway cannot bind to an account.
			if v.Equal("item_reference") {
				check.Fail("input", "item references are not available through this gateway; send the items, or use previous_response_id")
			}
		}
		return nil
	})
	switch err := check.Err(body, err); {
	case err != nil:
		return format.Request{}, err
	case !haveModel:
		return format.Request{}, format.Missing("model")
	}
	if own.PreviousResponseID != "" {
		req.Refs = []string{own.PreviousResponseID}
	}
	if own != (Fields{}) {
		req.Own = own
	}
	return req, nil
}

// Fields are the responses format's own request fields (format.Request.Own),
// read by its hold rule.
type Fields struct {
	// PreviousResponseID names the stored response whose context the
	// request continues: context the body does not show.
	PreviousResponseID string
	// MaxToolCalls bounds the built-in tool calls of the response; zero
	// when HasMaxToolCalls is false.
	MaxToolCalls    int64
	HasMaxToolCalls bool
	// PaidTools reports built-in tools with a per-call fee among those
	// offered (web search, file search, code interpreter, image generation).
	PaidTools bool
}

// paidTool reports whether a tool type is a built-in tool the vendor bills
// per call or session.
func paidTool(v jsonscan.Value) bool {
	if v.Kind != jsonscan.String {
		return false
	}
	t := v.Text()
	switch {
	case t == "file_search", t == "code_interpreter", t == "image_generation":
		return true
	case len(t) >= len("web_search") && t[:len("web_search")] == "web_search":
		return true // web_search, web_search_preview and their dated names
	}
	return false
}

// PreviousID reads only previous_response_id from a body (input token
// counts take one too): "" when absent. A body that is not a JSON object, or
// whose previous_response_id is not a response id, is an error.
func PreviousID(body []byte) (string, error) {
	var id string
	var check format.RequestCheck
	err := previousQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch {
		case v.Kind == jsonscan.Null:
		case v.Kind != jsonscan.String || !ValidID(v.Text()):
			check.Fail("previous_response_id", "must be a response id")
		default:
			id = v.Text()
		}
		return nil
	})
	if err := check.Err(body, err); err != nil {
		return "", err
	}
	return id, nil
}

var previousQuery = jsonscan.NewQuery("previous_response_id")

// inputTextLimit bounds the request text tokenized for an input estimate;
// the rest is extrapolated.
const inputTextLimit = 64 << 10

var requestTextQuery = jsonscan.NewQuery(
	"instructions",
	"input",
	"input[].content",
	"input[].content[].text",
	"input[].arguments",
	"input[].output",
	"tools[]",
)

// estimateInput counts the prompt tokens of a request body: instructions,
// input text (a string, or messages with string or text-part content),
// earlier function calls and their outputs, and tool definitions. Used when
// the reply carries no usage.
func estimateInput(body []byte) int64 {
	t := tokens.Tally{Limit: inputTextLimit}
	var items int64
	_ = requestTextQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch {
		case v.Kind == jsonscan.String:
			t.Write(v.AppendText(nil))
			t.Write(newline)
			items++
		case v.Kind == jsonscan.Object:
			t.Write(v.Raw) // a tool definition
		}
		return nil
	})
	return t.Tokens() + 3*items + 3
}

var newline = []byte{'\n'}
