package format_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/format/chatcompletions"
	"github.com/modelgateway/gateway/extproc/format/embeddings"
	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/extproc/format/images"
	"github.com/modelgateway/gateway/extproc/format/messages"
	"github.com/modelgateway/gateway/extproc/format/responses"
)

// priced is what a vendor or relay decoding a body with encoding/json into
// structs reads of the fields the gateway prices: it matches keys to fields
// by case folding, and the last of repeated keys wins.
type priced struct {
	Model               any `json:"model"`
	MaxTokens           any `json:"max_tokens"`
	MaxCompletionTokens any `json:"max_completion_tokens"`
	MaxOutputTokens     any `json:"max_output_tokens"`
	Stream              any `json:"stream"`
	Background          any `json:"background"`
	N                   any `json:"n"`
	Size                any `json:"size"`
	PartialImages       any `json:"partial_images"`
	StreamOptions       *struct {
		IncludeUsage any `json:"include_usage"`
	} `json:"stream_options"`
}

// limit is a token limit as the folding decoder read it, 0 when absent.
func limit(v any) int64 {
	n, ok := v.(json.Number)
	if !ok {
		return 0
	}
	f, err := n.Float64()
	if err != nil {
		return -1
	}
	return int64(f)
}

func truth(v any) bool { b, _ := v.(bool); return b }

// pricedFormats are the JSON formats, each with what its parser must agree
// on with the folding decoder.
var pricedFormats = []struct {
	name  string
	parse formattest.Parse
	agree func(req format.Request, p priced) bool
	// ownModel: agree checks the model itself (the format has a default
	// model for a body that names none).
	ownModel bool
}{
	{"chatcompletions", chatcompletions.Format{}.ParseRequest, func(req format.Request, p priced) bool {
		n := limit(p.N)
		if n == 0 {
			n = req.Choices // absent: the parser leaves it unset
		}
		include := p.StreamOptions != nil && truth(p.StreamOptions.IncludeUsage)
		return req.MaxTokens == max(limit(p.MaxTokens), limit(p.MaxCompletionTokens)) &&
			req.Stream == truth(p.Stream) && req.Choices == n && req.IncludeUsage == include
	}, false},
	{"messages", messages.Format{}.ParseRequest, func(req format.Request, p priced) bool {
		return req.MaxTokens == limit(p.MaxTokens) && req.Stream == truth(p.Stream)
	}, false},
	{"responses", responses.Format{}.ParseRequest, func(req format.Request, p priced) bool {
		return req.MaxTokens == limit(p.MaxOutputTokens) && req.Stream == truth(p.Stream) && req.Background == truth(p.Background)
	}, false},
	{"embeddings", embeddings.Format{}.ParseRequest, func(format.Request, priced) bool { return true }, false},
	{"images", images.Format{}.ParseRequest, func(req format.Request, p priced) bool {
		// What the parser reads of the body the folding decoder saw,
		// written in the exact spellings: the same fields, or it read a
		// key the decoder did not.
		canon := map[string]any{"prompt": "x", "model": p.Model, "n": p.N, "size": p.Size, "stream": p.Stream, "partial_images": p.PartialImages}
		for k, v := range canon {
			if v == nil {
				delete(canon, k)
			}
		}
		b, _ := json.Marshal(canon)
		want, err := images.Format{}.ParseRequest(b, "application/json")
		return err == nil && req.Model == want.Model && req.Stream == want.Stream && *req.Own.(*images.Fields) == *want.Own.(*images.Fields)
	}, true},
}

// checkPriced fails t if a format accepts body but reads a priced field
// other than the folding decoder reads it.
func checkPriced(t *testing.T, body []byte) {
	var p priced
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if d.Decode(&p) != nil {
		return // the decoder refuses it: nothing to agree on
	}
	for _, f := range pricedFormats {
		req, err := f.parse(body, "application/json")
		if err != nil {
			continue
		}
		if m, _ := p.Model.(string); m != req.Model && !f.ownModel || !f.agree(req, p) {
			t.Fatalf("%s read %+v from %s; encoding/json reads %+v", f.name, req, body, p)
		}
	}
}

// A generated body is a sequence of members, each chosen by three bytes:
// the field, its spelling, its value.
var (
	genFields = []string{"model", "max_tokens", "max_completion_tokens", "max_output_tokens", "stream",
		"background", "n", "stream_options", "input", "messages", "prompt", "size", "partial_images"}
	genValues = []string{`"gpt-4o-mini"`, `"o1-pro"`, `1`, `4000`, `1e3`, `true`, `false`, `null`,
		`{"include_usage":true}`, `{"INCLUDE_USAGE":false}`, `{"include_u\u017fage":true}`, `"x"`, `[]`, `2`,
		`"1024x1024"`, `"1536x1024"`, `3`}
)

// generate builds an object from prog: the gateway's fields in exact and
// folded spellings (formattest.FoldedKeys), repeated or not, with values
// of every kind they take.
func generate(prog []byte) []byte {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i+2 < len(prog) && i < 3*16; i += 3 {
		field := genFields[int(prog[i])%len(genFields)]
		spellings := append([]string{field}, formattest.FoldedKeys(field)...)
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"` + spellings[int(prog[i+1])%len(spellings)] + `":` + genValues[int(prog[i+2])%len(genValues)])
	}
	b.WriteByte('}')
	return []byte(b.String())
}

// FuzzFoldingAgrees checks that whenever a format and encoding/json both
// accept a body, they read the same priced fields: the fuzzed bytes as a
// body, and as the program of a generated one.
func FuzzFoldingAgrees(f *testing.F) {
	for _, s := range []string{
		`{"model":"gpt-4o-mini","MODEL":"o1-pro"}`,
		`{"model":"m","max_tokens":1,"MAX_TOKENS":4000}`,
		`{"model":"m","max_tokens":1,"Stream":true}`,
		`{"model":"m","max_to\u212aens":9,"max_tokens":1}`,
		`{"model":"m","\u017ftream":true,"max_output_tokens":5}`,
		`{"model":"m","stream":true,"stream_options":{"Include_Usage":false}}`,
		`{"model":"m","max_tokens":3,"stream":true,"n":2,"input":"x"}`,
		`{"model":"gpt-image-1","prompt":"p","n":1,"N":10,"size":"1024x1024","SIZE":"4096x4096"}`,
		`{"model":"gpt-image-1","prompt":"p","stream":true,"partial_images":0,"Partial_Images":3}`,
		"\x00\x00\x00\x01\x00\x02\x01\x01\x03\x04\x02\x05",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		checkPriced(t, prog)
		checkPriced(t, generate(prog))
	})
}
