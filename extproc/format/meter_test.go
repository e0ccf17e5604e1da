package format

import (
	"testing"

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
