package format

import (
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/usage"
)

// MaxJSONBody bounds the JSON reply a meter buffers.
const MaxJSONBody = 32 << 20

// JSONBuffer holds a non-streamed reply for a meter that reads it at the
// end. Past MaxJSONBody it stops buffering and records the overflow, and the
// meter estimates. The zero value is ready to use.
type JSONBuffer struct {
	buf      []byte
	overflow bool
}

// Write appends p, which it does not retain.
func (b *JSONBuffer) Write(p []byte) {
	if b.overflow {
		return
	}
	if len(b.buf)+len(p) > MaxJSONBody {
		b.overflow = true
		return
	}
	b.buf = append(b.buf, p...)
}

// Bytes returns the reply buffered so far.
func (b *JSONBuffer) Bytes() []byte { return b.buf }

// Overflowed reports whether the reply outgrew MaxJSONBody.
func (b *JSONBuffer) Overflowed() bool { return b.overflow }

// EstimateGaps returns the usage a meter reports from the figures r it read.
// A reply read whole, to its end and with its input and output figures,
// stands as reported. Otherwise r is marked estimated, its output is raised
// to the tokens counted in the reply's text, and, if the reply reported no
// input, the input is estimateInput's count of the request. Neither text
// nor estimateInput is consulted for a whole reply: counting costs time.
func EstimateGaps(r usage.Report, whole, haveInput bool, text *tokens.Tally, estimateInput func() int64) usage.Report {
	if whole {
		return r
	}
	r.Estimated = true
	r.Output = max(r.Output, text.Tokens())
	if !haveInput {
		r.Input = estimateInput()
	}
	return r
}
