package chatcompletions

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/formattest"
)

func TestParseRequestAccepts(t *testing.T) {
	realistic := formattest.Read(t, "request.json")
	m := func(r format.Request) format.Request {
		if r.Model == "" {
			r.Model = "m"
		}
		return r
	}
	tests := []struct {
		Name, Body string
		Want       format.Request
	}{
		{"realistic", string(realistic), format.Request{Model: "gpt-4o-mini", MaxTokens: 2048, HasMaxTokens: true, Stream: true, HasTools: true, Session: "user-1234"}},
		{"minimal", `{"model":"m","messages":[]}`, m(format.Request{})},
		{"max_tokens", `{"model":"m","max_tokens":64}`, m(format.Request{MaxTokens: 64, HasMaxTokens: true})},
		{"max_completion_tokens", `{"model":"m","max_completion_tokens":64}`, m(format.Request{MaxTokens: 64, HasMaxTokens: true})},
		{"both, completion larger", `{"model":"m","max_tokens":10,"max_completion_tokens":64}`, m(format.Request{MaxTokens: 64, HasMaxTokens: true})},
		{"both, max_tokens larger", `{"model":"m","max_completion_tokens":10,"max_tokens":64}`, m(format.Request{MaxTokens: 64, HasMaxTokens: true})},
		{"null limits", `{"model":"m","max_tokens":null,"max_completion_tokens":null}`, m(format.Request{})},
		{"one null limit", `{"model":"m","max_tokens":null,"max_completion_tokens":7}`, m(format.Request{MaxTokens: 7, HasMaxTokens: true})},
		{"integral exponent", `{"model":"m","max_tokens":2.5e2}`, m(format.Request{MaxTokens: 250, HasMaxTokens: true})},
		{"largest", `{"model":"m","max_completion_tokens":2147483647}`, m(format.Request{MaxTokens: 1<<31 - 1, HasMaxTokens: true})},
		{"stream with usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, m(format.Request{Stream: true, IncludeUsage: true})},
		{"usage off", `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, m(format.Request{Stream: true})},
		{"stream options null", `{"model":"m","stream":true,"stream_options":null}`, m(format.Request{Stream: true})},
		{"include_usage null", `{"model":"m","stream":true,"stream_options":{"include_usage":null}}`, m(format.Request{Stream: true})},
		{"other stream options", `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false}}`, m(format.Request{Stream: true})},
		{"stream null", `{"model":"m","stream":null}`, m(format.Request{})},
		{"n", `{"model":"m","n":8}`, m(format.Request{Choices: 8})},
		{"n null", `{"model":"m","n":null}`, m(format.Request{})},
		{"tools", `{"model":"m","tools":[ {"type":"function","function":{"name":"f"}}]}`, m(format.Request{HasTools: true})},
		{"no tools", `{"model":"m","tools":[ ]}`, m(format.Request{})},
		{"functions", `{"model":"m","functions":[{"name":"f"}]}`, m(format.Request{HasTools: true})},
		{"unicode model", `{"model":"\u6a21\u578b-\ud83d\ude00"}`, format.Request{Model: "模型-😀"}},
		{"duplicates elsewhere", `{"model":"m","metadata":{"model":"a","model":"b"},"messages":[{"role":"user","role":"user"}]}`, m(format.Request{})},
	}
	formattest.CheckAccepts(t, func(body []byte, ct string) (format.Request, error) {
		req, err := Format{}.ParseRequest(body, ct)
		req.Edit = format.Edit{} // see TestUsageEdit
		return req, err
	}, tests)
}

// A valid body costs one small allocation, whatever its size: the scan's
// callback and what it records.
func TestParseRequestAllocations(t *testing.T) {
	formattest.CheckParseAllocs(t, Format{}.ParseRequest, bigRequest(10<<10), 1)
}

func TestUsageEdit(t *testing.T) {
	const opts = `"stream_options":{"include_usage":true}`
	tests := []struct{ name, body, want string }{
		{"no stream_options", `{"model":"m","stream":true}`, `{"model":"m","stream":true,` + opts + `}`},
		{"no stream_options, spaced", "{\n  \"model\": \"m\",\n  \"stream\": true\n}\n", "{\n  \"model\": \"m\",\n  \"stream\": true," + opts + "\n}\n"},
		{"stream_options null", `{"model":"m","stream":true,"stream_options":null}`, `{"model":"m","stream":true,` + opts + `}`},
		{"stream_options empty", `{"model":"m","stream":true,"stream_options":{}}`, `{"model":"m","stream":true,` + opts + `}`},
		{"stream_options empty, spaced", `{"model":"m","stream":true,"stream_options":{ }}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true }}`},
		{"other stream options", `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}}`},
		{"include_usage false", `{"model":"m","stream":true,"stream_options":{"include_usage":false}}`, `{"model":"m","stream":true,` + opts + `}`},
		{"include_usage null, spaced", `{"model":"m","stream":true,"stream_options" : { "include_usage" : null } }`, `{"model":"m","stream":true,"stream_options" : { "include_usage" : true } }`},
		{"escaped keys", `{"model":"m","stream":true,"stream\u005foptions":{"include\u005fusage":false}}`, `{"model":"m","stream":true,"stream\u005foptions":{"include\u005fusage":true}}`},
		{"stream_options first", `{"stream_options":{"include_usage":false},"model":"m","stream":true}`, `{` + opts + `,"model":"m","stream":true}`},
		{"asked already", `{"model":"m","stream":true,` + opts + `}`, `{"model":"m","stream":true,` + opts + `}`},
		{"not a stream", `{"model":"m","stream_options":{"include_usage":false}}`, `{"model":"m","stream_options":{"include_usage":false}}`},
		{"stream false", `{"model":"m","stream":false}`, `{"model":"m","stream":false}`},
	}
	realistic := formattest.Read(t, "request.json")
	end := bytes.LastIndexByte(realistic, '}')
	last := len(bytes.TrimRight(realistic[:end], " \t\r\n"))
	tests = append(tests, struct{ name, body, want string }{"realistic", string(realistic),
		string(realistic[:last]) + "," + opts + string(realistic[last:])})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := Format{}.ParseRequest([]byte(tt.body), "application/json")
			if err != nil {
				t.Fatal(err)
			}
			up := req.Edit.Apply([]byte(tt.body))
			if string(up) != tt.want {
				t.Fatalf("upstream body\n%s\nwant\n%s", up, tt.want)
			}
			if req.Edit.IsZero() != (tt.body == tt.want) {
				t.Fatalf("edit %+v for an unchanged body", req.Edit)
			}
			again, err := Format{}.ParseRequest(up, "application/json")
			if err != nil {
				t.Fatalf("upstream body rejected: %v", err)
			}
			if !again.Edit.IsZero() || again.IncludeUsage != req.Stream || again.Model != req.Model || again.Stream != req.Stream {
				t.Fatalf("upstream body reads %+v, client's %+v", again, req)
			}
		})
	}
}

func TestParseRequestRejects(t *testing.T) {
	tests := []struct{ Name, Body, Param, Msg string }{
		{"empty", ``, "", "not valid JSON"},
		{"truncated", `{"model":"m"`, "", "not valid JSON"},
		{"single quotes", `{'model':'m'}`, "", "not valid JSON"},
		{"comment", `{"model":"m" /* c */}`, "", "not valid JSON"},
		{"nan", `{"model":"m","temperature":NaN}`, "", "not valid JSON"},
		{"invalid utf8", "{\"model\":\"m\xc3\"}", "", "UTF-8"},
		{"invalid utf8 in key", "{\"k\xff\":1,\"model\":\"m\"}", "", "UTF-8"},
		{"lone low surrogate", `{"model":"m","x":"\udc00"}`, "", "surrogate"},
		{"too deep", `{"model":"m","x":` + strings.Repeat(`{"a":`, 128) + `1` + strings.Repeat("}", 128) + `}`, "", "nesting"},
		{"array", `[]`, "", "must be a JSON object"},
		{"true", `true`, "", "must be a JSON object"},
		{"no model", `{"messages":[]}`, "model", "model: field required"},
		{"model empty", `{"model":""}`, "model", "non-empty string"},
		{"model array", `{"model":["m"]}`, "model", "non-empty string"},
		{"max_tokens zero", `{"model":"m","max_tokens":0}`, "max_tokens", "max_tokens: must be a positive integer"},
		{"n zero", `{"model":"m","n":0}`, "n", "n: must be an integer from 1 to 128"},
		{"n too large", `{"model":"m","n":129}`, "n", "from 1 to 128"},
		{"max_tokens negative", `{"model":"m","max_tokens":-1}`, "max_tokens", "positive integer"},
		{"max_tokens fraction", `{"model":"m","max_tokens":10.5}`, "max_tokens", "positive integer"},
		{"max_tokens string", `{"model":"m","max_tokens":"10"}`, "max_tokens", "positive integer"},
		{"max_tokens too large", `{"model":"m","max_tokens":4294967296}`, "max_tokens", "positive integer"},
		{"max_completion_tokens fraction", `{"model":"m","max_completion_tokens":2e-1}`, "max_completion_tokens", "max_completion_tokens: must be a positive integer"},
		{"max_completion_tokens bool", `{"model":"m","max_completion_tokens":false}`, "max_completion_tokens", "positive integer"},
		{"stream string", `{"model":"m","stream":"yes"}`, "stream", "stream: must be a boolean"},
		{"stream_options string", `{"model":"m","stream":true,"stream_options":"include_usage"}`, "stream_options", "stream_options: must be an object"},
		{"include_usage number", `{"model":"m","stream":true,"stream_options":{"include_usage":1}}`, "stream_options.include_usage", "must be a boolean"},
		{"duplicate model", `{"model":"a","model":"b"}`, "model", "more than once"},
		{"duplicate max_tokens", `{"model":"a","max_tokens":1,"max_tokens":100000}`, "max_tokens", "more than once"},
		{"duplicate max_completion_tokens", `{"model":"a","max_completion_tokens":1,"max_completion_tokens":2}`, "max_completion_tokens", "more than once"},
		{"duplicate stream", `{"model":"a","stream":false,"stream":true}`, "stream", "more than once"},
		{"duplicate stream_options", `{"model":"a","stream_options":{},"stream_options":{"include_usage":true}}`, "stream_options", "more than once"},
		{"duplicate include_usage", `{"model":"a","stream_options":{"include_usage":true,"include_usage":false}}`, "stream_options.include_usage", "more than once"},
	}
	formattest.CheckRejects(t, Format{}.ParseRequest, tests)
}

// bigRequest builds a realistic request body of about size bytes.
func bigRequest(size int) []byte {
	return formattest.BigRequest(`{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":4096,"messages":[{"role":"system","content":"You are terse."}`, size)
}

func BenchmarkParseRequest(b *testing.B) {
	formattest.BenchmarkParse(b, Format{}.ParseRequest, bigRequest(10<<10))
}

func FuzzParseRequest(f *testing.F) {
	seeds := []string{
		`{"model":"m"}`,
		`{"model":"m","max_tokens":8,"max_completion_tokens":1e2,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","stream_options":{"include_usage":true,"include_usage":true}}`,
		`{"model":"m","max_tokens":null}`,
		`{"model":"m","stream":true,"stream_options":{ }}`,
		`{"stream":true,"stream_options":null,"model":"m"}`,
		`{"model":"m","stream":true,"stream_options":{"x":1,"include_usage":false} }`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]},{"role":"assistant","audio":{"id":"audio_1"}}]}`,
	}
	formattest.FuzzParse(f, Format{}.ParseRequest, seeds, func(t *testing.T, body []byte, req format.Request, doc map[string]any) {
		if s, _ := doc["model"].(string); s != req.Model || s == "" {
			t.Fatalf("model %q, encoding/json read %v", req.Model, doc["model"])
		}
		mt, _ := doc["max_tokens"].(float64)
		mct, _ := doc["max_completion_tokens"].(float64)
		if want := max(mt, mct); float64(req.MaxTokens) != want || req.HasMaxTokens != (want > 0) || req.MaxTokens > format.MaxTokensLimit {
			t.Fatalf("max tokens %d (%v), encoding/json read %v and %v", req.MaxTokens, req.HasMaxTokens, doc["max_tokens"], doc["max_completion_tokens"])
		}
		if s, _ := doc["stream"].(bool); s != req.Stream {
			t.Fatalf("stream %v, encoding/json read %v", req.Stream, doc["stream"])
		}
		opts, _ := doc["stream_options"].(map[string]any)
		if u, _ := opts["include_usage"].(bool); u != req.IncludeUsage {
			t.Fatalf("include_usage %v, encoding/json read %v", req.IncludeUsage, opts["include_usage"])
		}
		// Nothing accepted names a file or an audio reply by id.
		msgs, _ := doc["messages"].([]any)
		for _, m := range msgs {
			m, _ := m.(map[string]any)
			if a, _ := m["audio"].(map[string]any); a["id"] != nil {
				t.Fatalf("accepted audio id %v", a["id"])
			}
			parts, _ := m["content"].([]any)
			for _, p := range parts {
				p, _ := p.(map[string]any)
				if f, _ := p["file"].(map[string]any); f["file_id"] != nil {
					t.Fatalf("accepted file id %v", f["file_id"])
				}
			}
		}
		// A stream without usage is sent upstream with usage asked for and
		// nothing else changed.
		if req.Edit.IsZero() != (!req.Stream || req.IncludeUsage) {
			t.Fatalf("edit %+v for %+v", req.Edit, req)
		}
		if req.Edit.IsZero() {
			return
		}
		up := req.Edit.Apply(body)
		again, err := Format{}.ParseRequest(up, "application/json")
		if err != nil || !again.IncludeUsage || !again.Edit.IsZero() {
			t.Fatalf("upstream body %q reads %+v, %v", up, again, err)
		}
		var upDoc map[string]any
		if err := json.Unmarshal(up, &upDoc); err != nil {
			t.Fatalf("upstream body %q: %v", up, err)
		}
		if opts == nil {
			opts = map[string]any{}
			doc["stream_options"] = opts
		}
		opts["include_usage"] = true
		if !reflect.DeepEqual(doc, upDoc) {
			t.Fatalf("upstream body %q differs beyond include_usage from %q", up, body)
		}
	})
}

func TestFoldedKeysRefused(t *testing.T) {
	formattest.CheckFoldedKeys(t, Format{}.ParseRequest, "application/json", requestQuery.Paths())
}
