package chatcompletions

import (
	"bytes"

	"github.com/modelgateway/gateway/extproc/jsonscan"
	"github.com/modelgateway/gateway/extproc/sse"
)

// maxHeld bounds the bytes of one event a usageFilter holds back. A usage
// chunk is a few hundred bytes; an event larger than this passes through
// as it arrives, unchanged, and the meter's decoder drops it at the same
// size.
const maxHeld = sse.DefaultMaxEventSize

// retainHeld is the buffer capacity a usageFilter keeps between events.
const retainHeld = 64 << 10

// usageFilter meters a stream for which the gateway asked the vendor for
// usage and the client did not, and gives the client the stream it would
// have had without include_usage:
//
//   - the usage chunk ("choices":[] and usage set) is withheld;
//   - the "usage":null member the vendor adds to every other chunk is taken
//     out, so that a client sees no usage field at all, as without
//     include_usage (an SDK that keeps the fields it was sent, such as the
//     Python SDK's to_dict or JavaScript's plain objects, would otherwise
//     show a field the client never saw before);
//   - everything else (comments, other events, [DONE], line endings) passes
//     byte for byte.
//
// Events are framed on the raw bytes as the SSE decoder frames them (lines
// end in LF, CR or CRLF; a blank line ends an event), so a chunk may end
// anywhere. The unfinished event at the end of a chunk is held back until
// its blank line arrives, which a client's own parser waits for anyway, and
// each finished event is judged once, by the meter's own reading of it.
type usageFilter struct {
	streamMeter

	pend    []byte // the start of the event being read, held back
	out     []byte // the rewritten chunk
	changed bool   // out, not the chunk itself, is what the client gets

	inLine  bool // the current line has bytes
	lastCR  bool // the last byte was a CR: an LF right after belongs to it
	crEnd   bool // the last chunk ended with the CR that ended an event
	dropped bool // the last event was withheld
	passing bool // the current event outgrew maxHeld and passes as it comes

	// The judgement of the event being fed to the decoder.
	raw            []byte // its raw bytes
	verdict        verdict
	cutFrom, cutTo int // for cut: the span of raw taken out
}

type verdict uint8

const (
	keep verdict = iota
	drop
	cut
)

func (f *usageFilter) Write(p []byte) { f.Rewrite(p, false) }

// Rewrite implements format.Rewriter.
func (f *usageFilter) Rewrite(p []byte, end bool) ([]byte, bool) {
	if cap(f.out) > retainHeld {
		f.out = nil // the last chunk's, which the caller is done with
	}
	f.out, f.changed = f.out[:0], false
	start := 0 // where the current event begins in p
	if f.crEnd && len(p) > 0 {
		// An empty chunk leaves the CR's LF still to come.
		f.crEnd = false
		if p[0] == '\n' {
			// The LF of a CRLF that ended the last event shares its fate.
			f.dec.Feed(p[:1], f.event)
			if f.dropped {
				f.dirty(p, 0)
			}
			start = 1
		}
		f.lastCR = false
	}
	for i := start; i < len(p); i++ {
		c := p[i]
		if c == '\n' && f.lastCR {
			f.lastCR = false
			continue
		}
		f.lastCR = c == '\r'
		if c != '\r' && c != '\n' {
			f.inLine = true
			continue
		}
		if f.inLine {
			f.inLine = false
			continue
		}
		// A blank line: the event ends with its line ending.
		e := i + 1
		if c == '\r' {
			switch {
			case e == len(p):
				f.crEnd = true
			case p[e] == '\n':
				e++
				i++
				f.lastCR = false
			}
		}
		f.judge(p, start, e)
		start = e
	}

	tail := p[start:]
	if len(tail) > 0 {
		f.dec.Feed(tail, f.event) // no blank line in it: no event ends
	}
	switch {
	case len(tail) == 0 && (!end || len(f.pend) == 0):
	case end || f.passing || len(f.pend)+len(tail) > maxHeld:
		// Let the unfinished event through: the body ends (a client
		// drops an event left unfinished) or it is too large to hold.
		f.passing = !end
		if len(f.pend) > 0 {
			f.dirty(p, start)
			f.out = append(f.out, f.pend...)
			f.pend = f.pend[:0]
		}
		if f.changed {
			f.out = append(f.out, tail...)
		}
	default:
		f.dirty(p, start)
		f.pend = append(f.pend, tail...)
	}
	if !f.changed {
		return p, false
	}
	return f.out, true
}

// dirty starts the rewritten chunk with what p had before upto, unchanged,
// the first time the chunk differs from p.
func (f *usageFilter) dirty(p []byte, upto int) {
	if !f.changed {
		f.out = append(f.out[:0], p[:upto]...)
		f.changed = true
	}
}

// judge feeds the event ending at p[end-1], which began at p[start] or in
// the held bytes, to the meter, and writes what the client gets of it.
func (f *usageFilter) judge(p []byte, start, end int) {
	seg := p[start:end]
	f.raw, f.verdict = seg, keep
	if len(f.pend) > 0 {
		f.dirty(p, start)
		f.pend = append(f.pend, seg...)
		f.raw = f.pend
	}
	if f.passing {
		f.dec.Feed(seg, f.event) // its start has gone out: keep it whole
	} else {
		f.dec.Feed(seg, f.filterEvent)
	}
	switch f.verdict {
	case keep:
		if f.changed {
			f.out = append(f.out, f.raw...)
		}
	case drop:
		f.dirty(p, start)
	case cut:
		f.dirty(p, start)
		f.out = append(f.out, f.raw[:f.cutFrom]...)
		f.out = append(f.out, f.raw[f.cutTo:]...)
	}
	f.dropped = f.verdict == drop
	f.raw, f.passing = nil, false
	f.pend = f.pend[:0]
	if cap(f.pend) > retainHeld {
		f.pend = nil
	}
}

// filterEvent meters one event and decides what the client gets of it.
func (f *usageFilter) filterEvent(ev sse.Event) {
	usage, choices := f.read(ev)
	switch {
	case usage.Kind == jsonscan.Invalid:
		return // no usage member: nothing to take out
	case usage.Kind != jsonscan.Null && choices.Kind == jsonscan.Array && emptyArray(choices.Raw):
		f.verdict = drop
		return
	}
	from, to, ok := memberSpan(ev.Data, usage)
	if !ok {
		return
	}
	// Map the span onto the raw event, whose last line must be the data
	// line: anything else (data over several lines, fields after it) is
	// left as it is, since the client reads it the same either way.
	body := bytes.TrimRight(f.raw, "\r\n")
	if !bytes.HasSuffix(body, ev.Data) {
		return
	}
	base := len(body) - len(ev.Data)
	field := bytes.TrimSuffix(body[:base], []byte(" "))
	if !bytes.HasSuffix(field, []byte("data:")) {
		if field = body[:base]; !bytes.HasSuffix(field, []byte("data:")) {
			return
		}
	}
	if n := len(field) - len("data:"); n > 0 && field[n-1] != '\n' && field[n-1] != '\r' {
		return
	}
	f.verdict, f.cutFrom, f.cutTo = cut, base+from, base+to
}

// memberSpan returns the bytes to take out of the JSON object data to remove
// its top-level member "usage", whose value is v: the key, the value and one
// comma, so that what is left is valid JSON. ok is false when the key is
// written with escapes; the member is then left in.
func memberSpan(data []byte, v jsonscan.Value) (from, to int, ok bool) {
	vs := offsetOf(data, v)
	to = vs + len(v.Raw)
	k := len(bytes.TrimRight(data[:vs], jsonSpace))
	if k == 0 || data[k-1] != ':' {
		return 0, 0, false
	}
	k = len(bytes.TrimRight(data[:k-1], jsonSpace))
	const key = `"usage"`
	if !bytes.HasSuffix(data[:k], []byte(key)) {
		return 0, 0, false
	}
	from = k - len(key)
	if b := len(bytes.TrimRight(data[:from], jsonSpace)); b > 0 && data[b-1] == ',' {
		// A member before it: take the comma after that member's value.
		return len(bytes.TrimRight(data[:b-1], jsonSpace)), to, true
	}
	// The first member: take the comma after it, if any.
	after := len(data) - len(bytes.TrimLeft(data[to:], jsonSpace))
	if after < len(data) && data[after] == ',' {
		to = len(data) - len(bytes.TrimLeft(data[after+1:], jsonSpace))
	}
	return from, to, true
}

// emptyArray reports whether raw, a JSON array, has no elements.
func emptyArray(raw []byte) bool {
	return len(bytes.TrimLeft(raw[1:], jsonSpace)) == 1
}
