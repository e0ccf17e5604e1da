package messages

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/tokens"
)

const (
	reqModel = iota
	reqMaxTokens
	reqStream
	reqTools
	reqUserID
)

var requestQuery = jsonscan.NewQuery("model", "max_tokens", "stream", "tools", "metadata.user_id")

// ParseRequest reads model, max_tokens and stream, validating the whole body
// as strict JSON. max_tokens is required, as the vendor requires it, and
// must be an integer from 1 to 2^31-1; an integral value written as 1e3 or
// 100.0 is accepted, as the vendor's parser accepts it. A null stream means
// false. Repeated model, max_tokens or stream keys are rejected.
func (Format) ParseRequest(body []byte, _ string) (format.Request, error) {
	var req format.Request
	var haveModel bool
	var check format.RequestCheck
	err := requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
		if check.Failed() {
			return nil
		}
		switch path {
		case reqModel:
			req.Model, haveModel = check.Model(v)
		case reqMaxTokens:
			req.MaxTokens, req.HasMaxTokens = check.TokenLimit("max_tokens", v)
		case reqStream:
			req.Stream = check.Bool("stream", v)
		case reqTools:
			req.HasTools = v.Kind == jsonscan.Array && format.NonEmptyArray(v.Raw)
		case reqUserID:
			req.Session = format.SessionText(v)
		}
		return nil
	})
	switch err := check.Err(body, err); {
	case err != nil:
		return format.Request{}, err
	case !haveModel:
		return format.Request{}, format.Missing("model")
	case !req.HasMaxTokens:
		return format.Request{}, format.Missing("max_tokens")
	}
	return req, nil
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
