package messages

import (
	"errors"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/tokens"
)

// maxTokensLimit is the largest max_tokens accepted: the vendor's field is a
// 32-bit integer, and admission multiplies it by prices.
const maxTokensLimit = 1<<31 - 1

const (
	reqModel = iota
	reqMaxTokens
	reqStream
	reqTools
)

var requestQuery = jsonscan.NewQuery("model", "max_tokens", "stream", "tools")

// ParseRequest reads model, max_tokens and stream, validating the whole body
// as strict JSON. max_tokens is required, as the vendor requires it, and
// must be an integer from 1 to 2^31-1; an integral value written as 1e3 or
// 100.0 is accepted, as the vendor's parser accepts it. A null stream means
// false. Repeated model, max_tokens or stream keys are rejected.
func (Format) ParseRequest(body []byte) (format.Request, error) {
	var req format.Request
	var haveModel bool
	var fieldErr error // reported only if the body is otherwise valid JSON
	err := requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
		if fieldErr != nil {
			return nil
		}
		switch path {
		case reqModel:
			if v.Kind != jsonscan.String || len(v.Raw) == 2 {
				fieldErr = paramError("model", "must be a non-empty string")
				return nil
			}
			req.Model, haveModel = v.Text(), true
		case reqMaxTokens:
			n, ok := v.Int()
			if !ok || n <= 0 || n > maxTokensLimit {
				fieldErr = paramError("max_tokens", "must be a positive integer no greater than 2147483647")
				return nil
			}
			req.MaxTokens, req.HasMaxTokens = n, true
		case reqStream:
			b, ok := v.Bool()
			if !ok && v.Kind != jsonscan.Null {
				fieldErr = paramError("stream", "must be a boolean")
				return nil
			}
			req.Stream = b
		case reqTools:
			req.HasTools = v.Kind == jsonscan.Array && format.NonEmptyArray(v.Raw)
		}
		return nil
	})
	switch {
	case err != nil:
		return format.Request{}, scanError(err)
	case jsonscan.TopLevel(body) != jsonscan.Object:
		return format.Request{}, format.Invalid("", "request body must be a JSON object")
	case fieldErr != nil:
		return format.Request{}, fieldErr
	case !haveModel:
		return format.Request{}, paramError("model", "field required")
	case !req.HasMaxTokens:
		return format.Request{}, paramError("max_tokens", "field required")
	}
	return req, nil
}

func paramError(param, msg string) error {
	return format.Invalid(param, param+": "+msg)
}

// scanError turns a scanner error into a client error.
func scanError(err error) error {
	var dup *jsonscan.DuplicateKeyError
	if errors.As(err, &dup) {
		return format.Invalid(dup.Path, dup.Path+": key appears more than once in the request body")
	}
	return format.Invalid("", "request body is not valid JSON: "+err.Error())
}

// inputTextLimit bounds the request text tokenized for an input estimate;
// the rest is extrapolated. Tokenizing costs about a third of a microsecond
// per byte.
const inputTextLimit = 64 << 10

// requestTextQuery finds prompt text. Paths that may hold either a string or
// an array of blocks ("system", "content") are listed both ways; only
// strings are counted there. Tool inputs and definitions are JSON the model
// reads as is, so their raw text is counted.
var requestTextQuery = jsonscan.NewQuery(
	"system",
	"system[].text",
	"messages[].content",
	"messages[].content[].text",
	"messages[].content[].thinking",
	"messages[].content[].content",
	"messages[].content[].content[].text",
	"messages[].content[].input",
	"tools[]",
)

// Positions in requestTextQuery of the paths counted as raw JSON.
const (
	txtToolInput = 7
	txtTool      = 8
)

// estimateInput counts the tokens of the prompt text in a request body: the
// system prompt, message text, tool calls and results, and tool
// definitions. Images and documents are not counted. Used when the vendor
// reported no input usage.
func estimateInput(body []byte) int64 {
	t := tokens.Tally{Limit: inputTextLimit, Ratio: tokens.MessagesRatio}
	_ = requestTextQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch {
		case v.Kind == jsonscan.String:
			t.Write(v.AppendText(nil))
		case path == txtToolInput || path == txtTool:
			t.Write(v.Raw)
		default:
			return nil
		}
		t.Write(newline)
		return nil
	})
	return t.Tokens()
}

var newline = []byte{'\n'}
