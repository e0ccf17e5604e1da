package formattest

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/jsonscan"
)

// A Parse is a format's ParseRequest.
type Parse func(body []byte, contentType string) (format.Request, error)

// CheckAccepts fails t unless parse accepts each body and reads what is
// wanted. The table's type is unnamed so that callers write it with
// positional fields.
func CheckAccepts(t *testing.T, parse Parse, tests []struct {
	Name, Body string
	Want       format.Request
}) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			got, err := parse([]byte(tt.Body), "application/json")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.Want) {
				t.Fatalf("got %+v, want %+v", got, tt.Want)
			}
		})
	}
}

// CheckRejects fails t unless parse rejects each body with a *format.Error
// whose Param is the wanted one and whose message contains Msg.
func CheckRejects(t *testing.T, parse Parse, tests []struct{ Name, Body, Param, Msg string }) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.Name, func(t *testing.T) {
			_, err := parse([]byte(tt.Body), "application/json")
			var re *format.Error
			if !errors.As(err, &re) {
				t.Fatalf("got %v, want a *format.Error", err)
			}
			if re.Param != tt.Param || !strings.Contains(re.Message, tt.Msg) {
				t.Fatalf("got param %q message %q, want param %q message containing %q", re.Param, re.Message, tt.Param, tt.Msg)
			}
		})
	}
}

// BenchmarkParse measures parse on body, which it must accept.
func BenchmarkParse(b *testing.B, parse Parse, body []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := parse(body, "application/json"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzParse fuzzes parse from testdata/request.json and seeds. A body
// parse rejects must yield a *format.Error with a message; one it accepts
// must be valid JSON to a full decoder too, and check compares what parse
// read with doc, encoding/json's reading of the body into maps, whose keys
// are exact (struct fields are not).
func FuzzParse(f *testing.F, parse Parse, seeds []string, check func(t *testing.T, body []byte, req format.Request, doc map[string]any)) {
	f.Add(Read(f, "request.json"))
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := parse(body, "application/json")
		if err != nil {
			var re *format.Error
			if !errors.As(err, &re) || re.Message == "" {
				t.Fatalf("got %T %v, want a *format.Error with a message", err, err)
			}
			return
		}
		if jsonscan.Valid(body) != nil || !json.Valid(body) {
			t.Fatal("accepted invalid JSON")
		}
		var doc map[string]any
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatalf("accepted a body encoding/json cannot decode: %v", err)
		}
		check(t, body, req, doc)
	})
}

// BigRequest builds a realistic request body of about size bytes: head,
// which opens the messages array, then user messages until the body is
// large enough, then the close.
func BigRequest(head string, size int) []byte {
	var b strings.Builder
	b.WriteString(head)
	for b.Len() < size-200 {
		if !strings.HasSuffix(b.String(), "[") {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":[{"type":"text","text":"Please summarise the following paragraph about \"streaming\" metering, café and naïve résumé — it matters.\n"}]}`)
	}
	b.WriteString(`],"temperature":0.2}`)
	return []byte(b.String())
}

// CheckParseAllocs fails t if parse, which must accept body, allocates more
// than most times per call.
func CheckParseAllocs(t *testing.T, parse Parse, body []byte, most float64) {
	t.Helper()
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := parse(body, "application/json"); err != nil {
			t.Fatal(err)
		}
	}); allocs > most {
		t.Fatalf("%v allocations per parse, want at most %v", allocs, most)
	}
}
