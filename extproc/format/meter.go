package format

import (
	"github.com/modelgateway/gateway/extproc/jsonscan"
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

// Final says what a meter read of a reply's final figures, for Settle.
type Final struct {
	// Ended: the reply was read to its end, or to the event that carries
	// its final figures, and did not fail.
	Ended bool
	// Input and Output: a valid final input and output figure was read (a
	// non-negative integer where the format puts the final count; a
	// string, a negative number or a count from an earlier event is not).
	Input, Output bool
}

// Settle is EstimateGaps for every format: a reply stands as reported only
// when it ended with valid final input and output figures. A stream that
// ends without them (a messages-format message_start without usage, string
// or negative figures, no usage chunk) is estimated and flagged, never
// free.
func Settle(r usage.Report, f Final, text *tokens.Tally, estimateInput func() int64) usage.Report {
	return EstimateGaps(r, f.Ended && f.Input && f.Output, f.Input, text, estimateInput)
}

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

// ReplyText counts the text of a streamed reply for an output estimate. It
// decodes each JSON string into a buffer kept between calls, so counting
// allocates nothing in the steady state.
type ReplyText struct {
	tokens.Tally
	scratch []byte
}

// scratchLimit bounds the decoding buffer kept between events.
const scratchLimit = 64 << 10

// AddString counts v's text if v is a JSON string. It is small enough to
// be inlined: most values a stream meter offers it are absent.
func (t *ReplyText) AddString(v jsonscan.Value) {
	if v.Kind == jsonscan.String {
		t.add(v)
	}
}

func (t *ReplyText) add(v jsonscan.Value) {
	t.scratch = v.AppendText(t.scratch[:0])
	t.Write(t.scratch)
}

// Release drops the decoding buffer if one long string grew it past
// scratchLimit: an open stream keeps little between events.
func (t *ReplyText) Release() {
	if cap(t.scratch) > scratchLimit {
		t.scratch = nil
	}
}
