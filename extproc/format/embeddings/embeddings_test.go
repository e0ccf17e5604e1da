package embeddings

import (
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/internal/usage"
)

func meterOf(body []byte) func(chunks ...[]byte) format.Meter {
	return func(chunks ...[]byte) format.Meter {
		return formattest.Feed(Format{}.NewMeter(format.Request{}, body, "application/json"), chunks...)
	}
}

// usage.prompt_tokens is billed as input; nothing else.
func TestMeter(t *testing.T) {
	formattest.CheckJSON(t, formattest.Read(t, "reply.json"), meterOf(nil), usage.Report{Usage: usage.Usage{Input: 8}, Model: "text-embedding-3-small"})
	// Without usage, the input strings are counted.
	m := meterOf(formattest.Read(t, "request.json"))([]byte(`{"object":"list","data":[]}`))
	if u := m.Usage(true); !u.Estimated || u.Input < 5 || u.Output != 0 {
		t.Errorf("estimate %+v", u)
	}
	ids := meterOf([]byte(`{"model":"m","input":[[1,2,3],[4,5]]}`))(nil)
	if u := ids.Usage(false); u.Input != 5 {
		t.Errorf("token ids counted %d, want 5", u.Input)
	}
}

func TestParseRequest(t *testing.T) {
	formattest.CheckAccepts(t, Format{}.ParseRequest, []struct {
		Name, Body string
		Want       format.Request
	}{
		{"strings", string(formattest.Read(t, "request.json")), format.Request{Model: "text-embedding-3-small", HasMaxTokens: true}},
		{"one string", `{"model":"m","input":"x"}`, format.Request{Model: "m", HasMaxTokens: true}},
	})
	formattest.CheckRejects(t, Format{}.ParseRequest, []struct{ Name, Body, Param, Msg string }{
		{"no model", `{"input":"x"}`, "model", "required"},
		{"no input", `{"model":"m"}`, "input", "string or an array"},
		{"bad input", `{"model":"m","input":5}`, "input", "string or an array"},
	})
}

func FuzzMeter(f *testing.F) {
	rec := formattest.Read(f, "reply.json")
	f.Add(rec, uint16(len(rec)/2))
	f.Fuzz(func(t *testing.T, reply []byte, i uint16) {
		formattest.CheckSplitsAgree(t, reply, []uint16{i}, meterOf([]byte(`{"model":"m","input":"hello"}`)), true, false)
	})
}

func FuzzParseRequest(f *testing.F) {
	formattest.FuzzParse(f, Format{}.ParseRequest, nil, func(t *testing.T, body []byte, req format.Request, doc map[string]any) {
		if doc["model"] != req.Model || doc["input"] == nil {
			t.Fatalf("model %q input %v, document %v", req.Model, doc["input"], doc)
		}
	})
}

func TestFoldedKeysRefused(t *testing.T) {
	formattest.CheckFoldedKeys(t, Format{}.ParseRequest, "application/json", requestQuery.Paths())
}
