package format

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

func TestJSONBufferStopsAtTheBound(t *testing.T) {
	var b JSONBuffer
	p := []byte(`{"a":1}`)
	b.Write(p)
	p[1] = 'X' // the buffer must not have kept p
	if string(b.Bytes()) != `{"a":1}` || b.Overflowed() {
		t.Fatalf("buffered %q, overflow %v", b.Bytes(), b.Overflowed())
	}
	b.Write(make([]byte, MaxJSONBody-len(`{"a":1}`))) // exactly at the bound
	if b.Overflowed() || len(b.Bytes()) != MaxJSONBody {
		t.Fatalf("at the bound: %d bytes, overflow %v", len(b.Bytes()), b.Overflowed())
	}
	b.Write([]byte{' '})
	b.Write(nil)
	if !b.Overflowed() || len(b.Bytes()) != MaxJSONBody {
		t.Fatalf("past the bound: %d bytes, overflow %v", len(b.Bytes()), b.Overflowed())
	}
}

func TestEstimateGaps(t *testing.T) {
	text := []byte("a reply long enough to count several tokens")
	counted := tokens.Count(text)
	reported := usage.Report{Usage: usage.Usage{Input: 7, Output: 2, CacheRead: 5}, Model: "m"}
	tests := []struct {
		name             string
		whole, haveInput bool
		want             usage.Report
	}{
		{"whole", true, true, reported},
		{"cut", false, true, usage.Report{Usage: usage.Usage{Input: 7, Output: counted, CacheRead: 5}, Model: "m", Estimated: true}},
		{"cut before input", false, false, usage.Report{Usage: usage.Usage{Input: 1000, Output: counted, CacheRead: 5}, Model: "m", Estimated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tally := tokens.Tally{Limit: 1 << 10}
			tally.Write(text)
			estimated := false
			got := EstimateGaps(reported, tt.whole, tt.haveInput, &tally, func() int64 { estimated = true; return 1000 })
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			if want := !tt.whole && !tt.haveInput; estimated != want {
				t.Fatalf("input estimated: %v", estimated)
			}
		})
	}
	// A reported output larger than the counted text stands.
	tally := tokens.Tally{Limit: 1 << 10}
	tally.Write(text)
	big := reported
	big.Output = 10 * counted
	if got := EstimateGaps(big, false, true, &tally, nil); got.Output != big.Output || !got.Estimated {
		t.Fatalf("got %+v", got)
	}
}

func TestReplyText(t *testing.T) {
	var vals []jsonscan.Value
	doc := []byte(`{"a":"caf\u00e9 \"ok\"","b":7,"c":["x"],"d":"` + strings.Repeat("long ", scratchLimit/4) + `"}`)
	err := jsonscan.NewQuery("a", "b", "c", "d").Scan(doc, func(_ int, v jsonscan.Value) error {
		vals = append(vals, v)
		return nil
	})
	if err != nil || len(vals) != 4 {
		t.Fatalf("scan: %d values, %v", len(vals), err)
	}
	rt := ReplyText{Tally: tokens.Tally{Limit: 1 << 20}}
	want := tokens.Tally{Limit: 1 << 20}
	for _, v := range vals[:3] {
		rt.AddString(v) // the number and the array are not text
	}
	want.Write([]byte(`café "ok"`))
	rt.Release()
	if rt.Tokens() != want.Tokens() || rt.scratch == nil {
		t.Fatalf("counted %d tokens, want %d; short buffer released: %v", rt.Tokens(), want.Tokens(), rt.scratch == nil)
	}
	rt.AddString(vals[3])
	rt.Release()
	if rt.scratch != nil {
		t.Fatalf("kept a %d-byte buffer", cap(rt.scratch))
	}
}
