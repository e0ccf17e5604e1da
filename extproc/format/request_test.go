package format

import (
	"errors"
	"testing"

	"github.com/modelgateway/gateway/extproc/jsonscan"
)

// scan runs a RequestCheck over body's top-level model, max_tokens and flag.
func scan(body string) (model string, limit int64, flag bool, err error) {
	var c RequestCheck
	q := jsonscan.NewQuery("model", "max_tokens", "flag")
	scanErr := q.Scan([]byte(body), func(path int, v jsonscan.Value) error {
		switch path {
		case 0:
			model, _ = c.Model(v)
		case 1:
			limit, _ = c.TokenLimit("max_tokens", v)
		case 2:
			flag = c.Bool("flag", v)
		}
		return nil
	})
	return model, limit, flag, c.Err([]byte(body), scanErr)
}

func TestRequestCheck(t *testing.T) {
	tests := []struct {
		body       string
		param, msg string // want an *Error with these, or none when msg is empty
		model      string
		limit      int64
		flag       bool
	}{
		{body: `{"model":"m","max_tokens":1e3,"flag":true}`, model: "m", limit: 1000, flag: true},
		{body: `{"model":"m","max_tokens":2147483647,"flag":null}`, model: "m", limit: MaxTokensLimit},
		{body: `{"model":"","max_tokens":8}`, param: "model", msg: "model: must be a non-empty string"},
		{body: `{"model":7}`, param: "model", msg: "model: must be a non-empty string"},
		{body: `{"max_tokens":2147483648}`, param: "max_tokens", msg: "max_tokens: must be a positive integer no greater than 2147483647"},
		{body: `{"max_tokens":null}`, param: "max_tokens", msg: "max_tokens: must be a positive integer"},
		{body: `{"flag":1}`, param: "flag", msg: "flag: must be a boolean"},
		// The first field error is the one reported.
		{body: `{"flag":1,"model":7}`, param: "flag", msg: "flag: must be a boolean"},
		// Malformed JSON wins over a field error, a repeated key too.
		{body: `{"model":7,}`, param: "", msg: "request body is not valid JSON: "},
		{body: `{"model":7,"flag":true,"flag":false}`, param: "flag", msg: "flag: key appears more than once in the request body"},
		// So does a body that is not an object.
		{body: `[{"model":7}]`, param: "", msg: "request body must be a JSON object"},
		{body: `"model"`, param: "", msg: "request body must be a JSON object"},
	}
	for _, tt := range tests {
		model, limit, flag, err := scan(tt.body)
		if tt.msg == "" {
			if err != nil || model != tt.model || limit != tt.limit || flag != tt.flag {
				t.Errorf("%s: got %q %d %v %v", tt.body, model, limit, flag, err)
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) || e.Kind != InvalidRequest || e.Param != tt.param || len(e.Message) < len(tt.msg) || e.Message[:len(tt.msg)] != tt.msg {
			t.Errorf("%s: got %#v, want param %q and a message starting %q", tt.body, err, tt.param, tt.msg)
		}
	}
	if e := Missing("model"); e.Param != "model" || e.Message != "model: field required" || e.Status() != 400 {
		t.Errorf("Missing: %+v", e)
	}
}
