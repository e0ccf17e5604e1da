// Package embeddings implements the "embeddings" wire format: the OpenAI
// Embeddings API (POST /v1/embeddings), served on /beta/v1/embeddings. Its
// usage is input only: usage.prompt_tokens, priced as input.
package embeddings

import (
	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

// Format is the "embeddings" format. The zero value is ready to use.
type Format struct{}

var _ format.Format = Format{}

// Name returns "embeddings".
func (Format) Name() string { return "embeddings" }

// ErrorBody renders an error as the vendor does on every path of its API.
func (Format) ErrorBody(e *format.Error) []byte { return chatcompletions.Format{}.ErrorBody(e) }

var requestQuery = jsonscan.NewQuery("model", "input", "user")

// ParseRequest reads model (required) and checks that input is present,
// validating the whole body as strict JSON. Embeddings are never streamed.
func (Format) ParseRequest(body []byte, _ string) (format.Request, error) {
	var req format.Request
	var haveModel, haveInput bool
	var check format.RequestCheck
	err := requestQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch path {
		case 0:
			req.Model, haveModel = check.Model(v)
		case 1:
			haveInput = v.Kind == jsonscan.String || v.Kind == jsonscan.Array
		case 2:
			req.Session = format.SessionText(v)
		}
		return nil
	})
	switch err := check.Err(body, err); {
	case err != nil:
		return format.Request{}, err
	case !haveModel:
		return format.Request{}, format.Missing("model")
	case !haveInput:
		return format.Request{}, format.Invalid("input", "input: must be a string or an array")
	}
	// No output: the hold is the input alone.
	req.MaxTokens, req.HasMaxTokens = 0, true
	return req, nil
}

// NewMeter returns a meter that reads the JSON reply at the end.
func (Format) NewMeter(req format.Request, body []byte, contentType string) format.Meter {
	return &meter{body: body}
}

type meter struct {
	format.JSONBuffer
	body []byte
}

var replyQuery = jsonscan.NewQuery("model", "usage.prompt_tokens")

// Usage reads the model and usage.prompt_tokens. A reply cut short,
// oversized or without usage is estimated from the request's input text.
func (m *meter) Usage(complete bool) usage.Report {
	var r usage.Report
	var have bool
	err := replyQuery.Scan(m.Bytes(), func(path int, v jsonscan.Value) error {
		switch path {
		case 0:
			if v.Kind == jsonscan.String {
				r.Model = usage.ReportedModel(v.Text())
			}
		case 1:
			if n, ok := v.Int(); ok && n >= 0 {
				r.Input, have = n, true
			}
		}
		return nil
	})
	whole := err == nil && !m.Overflowed() && have
	var none tokens.Tally
	return format.EstimateGaps(r, whole, have, &none, func() int64 { return estimateInput(m.body) })
}

// inputTextLimit bounds the request text tokenized for an estimate.
const inputTextLimit = 64 << 10

var inputQuery = jsonscan.NewQuery("input", "input[]")

// estimateInput counts the input strings' tokens; an input given as token
// ids counts one token per id.
func estimateInput(body []byte) int64 {
	t := tokens.Tally{Limit: inputTextLimit}
	var ids int64
	_ = inputQuery.Scan(body, func(path int, v jsonscan.Value) error {
		switch v.Kind {
		case jsonscan.String:
			t.Write(v.AppendText(nil))
		case jsonscan.Number:
			ids++
		case jsonscan.Array:
			if path == 1 { // an array of token ids
				ids += int64(countCommas(v.Raw)) + 1
			}
		}
		return nil
	})
	return t.Tokens() + ids
}

func countCommas(b []byte) int {
	n := 0
	for _, c := range b {
		if c == ',' {
			n++
		}
	}
	return n
}
