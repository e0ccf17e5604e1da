package chatcompletions

import (
	"errors"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/tokens"
)

// maxTokensLimit is the largest token limit accepted: the vendor's fields are
// 32-bit integers, and admission multiplies them by prices.
const maxTokensLimit = 1<<31 - 1

const (
	reqModel = iota
	reqMaxTokens
	reqMaxCompletionTokens
	reqStream
	reqStreamOptions
	reqIncludeUsage
	reqN
	reqTools
	reqFunctions
)

// maxChoices is the largest n the vendor accepts.
const maxChoices = 128

var requestQuery = jsonscan.NewQuery(
	"model",
	"max_tokens",
	"max_completion_tokens",
	"stream",
	"stream_options",
	"stream_options.include_usage",
	"n",
	"tools",
	"functions",
)

// ParseRequest reads model, max_tokens, max_completion_tokens, stream and
// stream_options.include_usage, validating the whole body as strict JSON.
//
// model is required. The token limits are optional integers from 1 to
// 2^31-1 (integral values written as 1e3 or 100.0 are accepted, as the
// vendor's parser accepts them). max_tokens is the older name of
// max_completion_tokens; when a body carries both, MaxTokens is the larger,
// so admission reserves for the worst case whichever one the vendor
// applies. Optional fields may be null, which means absent. Repeated keys on
// any of these paths are rejected.
func (Format) ParseRequest(body []byte) (format.Request, error) {
	var req format.Request
	var haveModel bool
	var fieldErr error // reported only if the body is otherwise valid JSON
	fail := func(param, msg string) {
		if fieldErr == nil {
			fieldErr = &format.RequestError{Param: param, Message: param + ": " + msg}
		}
	}
	err := requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch path {
		case reqModel:
			if v.Kind != jsonscan.String || len(v.Raw) == 2 {
				fail("model", "must be a non-empty string")
				return nil
			}
			req.Model, haveModel = v.Text(), true
		case reqMaxTokens, reqMaxCompletionTokens:
			name := "max_tokens"
			if path == reqMaxCompletionTokens {
				name = "max_completion_tokens"
			}
			if v.Kind == jsonscan.Null {
				return nil
			}
			n, ok := v.Int()
			if !ok || n <= 0 || n > maxTokensLimit {
				fail(name, "must be a positive integer no greater than 2147483647")
				return nil
			}
			req.MaxTokens, req.HasMaxTokens = max(req.MaxTokens, n), true
		case reqStream:
			b, ok := v.Bool()
			if !ok && v.Kind != jsonscan.Null {
				fail("stream", "must be a boolean")
			}
			req.Stream = b
		case reqStreamOptions:
			if v.Kind != jsonscan.Object && v.Kind != jsonscan.Null {
				fail("stream_options", "must be an object")
			}
		case reqIncludeUsage:
			b, ok := v.Bool()
			if !ok && v.Kind != jsonscan.Null {
				fail("stream_options.include_usage", "must be a boolean")
			}
			req.IncludeUsage = b
		case reqN:
			if v.Kind == jsonscan.Null {
				return nil
			}
			n, ok := v.Int()
			if !ok || n < 1 || n > maxChoices {
				fail("n", "must be an integer from 1 to 128")
				return nil
			}
			req.Choices = n
		case reqTools, reqFunctions:
			if v.Kind == jsonscan.Array && format.NonEmptyArray(v.Raw) {
				req.HasTools = true
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return format.Request{}, scanError(err)
	case jsonscan.TopLevel(body) != jsonscan.Object:
		return format.Request{}, &format.RequestError{Message: "request body must be a JSON object"}
	case fieldErr != nil:
		return format.Request{}, fieldErr
	case !haveModel:
		return format.Request{}, &format.RequestError{Param: "model", Message: "model: field required"}
	}
	return req, nil
}

// scanError turns a scanner error into a client error.
func scanError(err error) error {
	var dup *jsonscan.DuplicateKeyError
	if errors.As(err, &dup) {
		return &format.RequestError{Param: dup.Path, Message: dup.Path + ": key appears more than once in the request body"}
	}
	return &format.RequestError{Message: "request body is not valid JSON: " + err.Error()}
}

// inputTextLimit bounds the request text tokenized for an input estimate;
// the rest is extrapolated. Tokenizing costs about a third of a microsecond
// per byte.
const inputTextLimit = 64 << 10

// Per-message overhead of the vendor's chat template, from the vendor's
// published counting recipe: each message costs about three tokens beyond
// its content, and the reply is primed with three more.
const (
	tokensPerMessage = 3
	tokensPerReply   = 3
)

const (
	txtMessage = iota
	txtContent
	txtPartText
	txtToolName
	txtToolArgs
	txtTool
)

var requestTextQuery = jsonscan.NewQuery(
	"messages[]",
	"messages[].content",
	"messages[].content[].text",
	"messages[].tool_calls[].function.name",
	"messages[].tool_calls[].function.arguments",
	"tools[]",
)

// estimateInput counts the prompt tokens of a request body: message content
// strings and text parts, earlier tool calls, tool definitions, and the
// chat template's per-message overhead. Images and audio are not counted.
// Used when the reply carries no usage.
func estimateInput(body []byte) int64 {
	t := tokens.Tally{Limit: inputTextLimit}
	var messages int64
	_ = requestTextQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch {
		case path == txtMessage:
			messages++
		case path == txtTool:
			t.Write(v.Raw)
			t.Write(newline)
		case v.Kind == jsonscan.String:
			t.Write(v.AppendText(nil))
			t.Write(newline)
		}
		return nil
	})
	return t.Tokens() + tokensPerMessage*messages + tokensPerReply
}

var newline = []byte{'\n'}
