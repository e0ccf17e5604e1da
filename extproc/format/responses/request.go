package responses

import (
	"cmp"

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
	reqCacheKey
	reqUser
	reqRefs // refPaths follow
)

var requestQuery = jsonscan.NewQuery(append([]string{
	"model",
	"max_output_tokens",
	"stream",
	"background",
	"previous_response_id",
	"store",
	"tools",
	"tools[].type",
	"max_tool_calls",
	"prompt_cache_key",
	"user",
}, refPaths...)...)

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
// tools offered.
//
// Every stored object the body names is read too (see refs): stored
// responses and their items go to Request.Refs, for the processor to check
// against the account; an object the gateway never binds (a file, a vector
// store, a container, a skill, a stored prompt, a conversation) refuses the
// request with 404, as the vendor answers an id it does not know.
func (Format) ParseRequest(body []byte, _ string) (format.Request, error) {
	req, haveModel, unbound, err := parseRequest(body)
	switch {
	case err != nil:
		return format.Request{}, err
	case !haveModel:
		return format.Request{}, format.Missing("model")
	case unbound != nil:
		// After every 400: the vendor checks a request's shape before it
		// looks up what it names.
		return format.Request{}, unbound
	}
	return req, nil
}

// References reads the stored objects a token count names, as ParseRequest
// reads them (its model is optional).
func References(body []byte) ([]format.Ref, error) {
	req, _, unbound, err := parseRequest(body)
	switch {
	case err != nil:
		return nil, err
	case unbound != nil:
		return nil, unbound
	}
	return req.Refs, nil
}

// parseRequest reads a request as ParseRequest does, and reports whether
// it has a model and the refusal of an object it names that no account
// can own (the first of them), apart from the errors in its shape.
func parseRequest(body []byte) (req format.Request, haveModel bool, unbound, err error) {
	var own Fields
	var check format.RequestCheck
	var refs refReader
	var cacheKey, user string // session markers, the first preferred
	err = requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
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
			refs.add(format.Ref{Kind: format.StoredResponse, ID: own.PreviousResponseID}, &check)
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
		case reqCacheKey:
			cacheKey = format.SessionText(v)
		case reqUser:
			user = format.SessionText(v)
		default:
			refs.visit(path-reqRefs, v, &check)
		}
		return nil
	})
	if err := check.Err(body, err); err != nil {
		return format.Request{}, false, nil, err
	}
	if refs.unbound != nil {
		return format.Request{}, haveModel, refs.unbound, nil
	}
	req.Refs = refs.refs
	req.Session = cmp.Or(cacheKey, user)
	if own != (Fields{}) {
		req.Own = own
	}
	return req, haveModel, nil, nil
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
