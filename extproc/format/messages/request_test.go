package messages

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
)

func TestParseRequestAccepts(t *testing.T) {
	realistic := formattest.Read(t, "request.json")
	tests := []struct {
		Name, Body string
		Want       format.Request
	}{
		{"realistic", string(realistic), format.Request{Model: "claude-sonnet-4-5-20250929", MaxTokens: 1024, HasMaxTokens: true, Stream: true, HasTools: true, Session: "user-1234"}},
		{"minimal", `{"model":"m","max_tokens":1}`, format.Request{Model: "m", MaxTokens: 1, HasMaxTokens: true}},
		{"stream false", `{"model":"m","max_tokens":5,"stream":false}`, format.Request{Model: "m", MaxTokens: 5, HasMaxTokens: true}},
		{"tools", `{"model":"m","max_tokens":5,"tools":[{"name":"f","input_schema":{}}]}`, format.Request{Model: "m", MaxTokens: 5, HasMaxTokens: true, HasTools: true}},
		{"empty tools", `{"model":"m","max_tokens":5,"tools":[]}`, format.Request{Model: "m", MaxTokens: 5, HasMaxTokens: true}},
		{"stream null", `{"model":"m","max_tokens":5,"stream":null}`, format.Request{Model: "m", MaxTokens: 5, HasMaxTokens: true}},
		{"integral float", `{"model":"m","max_tokens":100.0}`, format.Request{Model: "m", MaxTokens: 100, HasMaxTokens: true}},
		{"integral exponent", `{"model":"m","max_tokens":1e3}`, format.Request{Model: "m", MaxTokens: 1000, HasMaxTokens: true}},
		{"largest", `{"model":"m","max_tokens":2147483647}`, format.Request{Model: "m", MaxTokens: 1<<31 - 1, HasMaxTokens: true}},
		{"escaped model", `{"model":"claude-\u00e9\ud83d\ude00","max_tokens":8}`, format.Request{Model: "claude-é😀", MaxTokens: 8, HasMaxTokens: true}},
		{"escaped key", `{"mod\u0065l":"m","max_tokens":8}`, format.Request{Model: "m", MaxTokens: 8, HasMaxTokens: true}},
		{"nested duplicates elsewhere", `{"model":"m","max_tokens":8,"metadata":{"model":"x","model":"y"},"messages":[{"stream":1,"stream":2}]}`, format.Request{Model: "m", MaxTokens: 8, HasMaxTokens: true}},
		{"whitespace", " \n\t{ \"model\" : \"m\" , \"max_tokens\" : 8 }\r\n", format.Request{Model: "m", MaxTokens: 8, HasMaxTokens: true}},
		{"deep but allowed", `{"model":"m","max_tokens":8,"x":` + strings.Repeat("[", 127) + strings.Repeat("]", 127) + `}`, format.Request{Model: "m", MaxTokens: 8, HasMaxTokens: true}},
	}
	formattest.CheckAccepts(t, Format{}.ParseRequest, tests)
}

// A valid body costs one small allocation, whatever its size: the scan's
// callback and what it records.
func TestParseRequestAllocations(t *testing.T) {
	formattest.CheckParseAllocs(t, Format{}.ParseRequest, bigRequest(10<<10), 1)
}

func TestParseRequestRejects(t *testing.T) {
	tests := []struct{ Name, Body, Param, Msg string }{
		{"empty", ``, "", "not valid JSON"},
		{"not json", `model=m`, "", "not valid JSON"},
		{"truncated", `{"model":"m","max_tokens":8`, "", "not valid JSON"},
		{"trailing comma", `{"model":"m","max_tokens":8,}`, "", "not valid JSON"},
		{"trailing data", `{"model":"m","max_tokens":8} {}`, "", "not valid JSON"},
		{"invalid utf8", "{\"model\":\"m\",\"max_tokens\":8,\"x\":\"\xff\"}", "", "UTF-8"},
		{"lone surrogate", `{"model":"m","max_tokens":8,"x":"\ud800"}`, "", "surrogate"},
		{"too deep", `{"model":"m","max_tokens":8,"x":` + strings.Repeat("[", 128) + strings.Repeat("]", 128) + `}`, "", "nesting"},
		{"array", `[{"model":"m","max_tokens":8}]`, "", "must be a JSON object"},
		{"string", `"model"`, "", "must be a JSON object"},
		{"number", `42`, "", "must be a JSON object"},
		{"null", `null`, "", "must be a JSON object"},
		{"no model", `{"max_tokens":8}`, "model", "model: field required"},
		{"model number", `{"model":7,"max_tokens":8}`, "model", "model: must be a non-empty string"},
		{"model null", `{"model":null,"max_tokens":8}`, "model", "model: must be a non-empty string"},
		{"model empty", `{"model":"","max_tokens":8}`, "model", "model: must be a non-empty string"},
		{"model object", `{"model":{"id":"m"},"max_tokens":8}`, "model", "non-empty string"},
		{"no max_tokens", `{"model":"m"}`, "max_tokens", "max_tokens: field required"},
		{"max_tokens zero", `{"model":"m","max_tokens":0}`, "max_tokens", "max_tokens: must be a positive integer"},
		{"max_tokens negative", `{"model":"m","max_tokens":-5}`, "max_tokens", "positive integer"},
		{"max_tokens fraction", `{"model":"m","max_tokens":1.5}`, "max_tokens", "positive integer"},
		{"max_tokens fractional exponent", `{"model":"m","max_tokens":15e-1}`, "max_tokens", "positive integer"},
		{"max_tokens tiny exponent", `{"model":"m","max_tokens":1e-3}`, "max_tokens", "positive integer"},
		{"max_tokens too large", `{"model":"m","max_tokens":2147483648}`, "max_tokens", "positive integer"},
		{"max_tokens huge exponent", `{"model":"m","max_tokens":1e400}`, "max_tokens", "positive integer"},
		{"max_tokens string", `{"model":"m","max_tokens":"8"}`, "max_tokens", "positive integer"},
		{"max_tokens null", `{"model":"m","max_tokens":null}`, "max_tokens", "positive integer"},
		{"max_tokens bool", `{"model":"m","max_tokens":true}`, "max_tokens", "positive integer"},
		{"stream string", `{"model":"m","max_tokens":8,"stream":"true"}`, "stream", "stream: must be a boolean"},
		{"stream number", `{"model":"m","max_tokens":8,"stream":1}`, "stream", "must be a boolean"},
		{"duplicate model", `{"model":"a","max_tokens":8,"model":"b"}`, "model", "more than once"},
		{"duplicate escaped model", `{"model":"a","max_tokens":8,"m\u006fdel":"b"}`, "model", "more than once"},
		{"duplicate max_tokens", `{"model":"a","max_tokens":8,"max_tokens":9000}`, "max_tokens", "more than once"},
		{"duplicate stream", `{"model":"a","max_tokens":8,"stream":false,"stream":true}`, "stream", "more than once"},
		{"syntax error wins over field error", `{"model":1,"max_tokens":8,}`, "", "not valid JSON"},
	}
	formattest.CheckRejects(t, Format{}.ParseRequest, tests)
}

// bigRequest builds a realistic request body of about size bytes.
func bigRequest(size int) []byte {
	return formattest.BigRequest(`{"model":"claude-sonnet-4-5-20250929","max_tokens":4096,"stream":true,"system":"You are terse.","messages":[`, size)
}

func BenchmarkParseRequest(b *testing.B) {
	formattest.BenchmarkParse(b, Format{}.ParseRequest, bigRequest(10<<10))
}

func FuzzParseRequest(f *testing.F) {
	seeds := []string{
		`{"model":"m","max_tokens":8}`,
		`{"model":"m","max_tokens":1e3,"stream":true}`,
		`{"model":"m","max_tokens":8,"model":"n"}`,
		`{"model":"m","max_tokens":-1}`,
		`[]`,
	}
	// Whatever is accepted, a full decoder reads the same way.
	formattest.FuzzParse(f, Format{}.ParseRequest, seeds, func(t *testing.T, body []byte, req format.Request, doc map[string]any) {
		if m, _ := doc["model"].(string); m != req.Model || req.Model == "" {
			t.Fatalf("model %q, encoding/json read %v", req.Model, doc["model"])
		}
		if n, _ := doc["max_tokens"].(float64); !req.HasMaxTokens || req.MaxTokens <= 0 || req.MaxTokens > format.MaxTokensLimit || float64(req.MaxTokens) != n {
			t.Fatalf("max_tokens %d, encoding/json read %v", req.MaxTokens, doc["max_tokens"])
		}
		if s, _ := doc["stream"].(bool); s != req.Stream {
			t.Fatalf("stream %v, encoding/json read %v", req.Stream, doc["stream"])
		}
	})
}

func TestFoldedKeysRefused(t *testing.T) {
	formattest.CheckFoldedKeys(t, Format{}.ParseRequest, "application/json", requestQuery.Paths())
}
