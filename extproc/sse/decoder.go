// Package sse decodes Server-Sent Events from a response body that arrives in
// chunks of any size.
//
// The decoder follows the WHATWG "event stream interpretation" rules: lines
// end in LF, CRLF or CR (a CRLF may straddle two chunks), a blank line
// dispatches the event being built, lines starting with ':' are comments,
// "data" lines are joined with "\n", and a single space after the colon is
// dropped. Only the "event" and "data" fields matter to a meter, so "id",
// "retry" and unknown fields are ignored.
//
// Memory is bounded: an event whose lines outgrow the limit is dropped
// rather than buffered, so a misbehaving upstream cannot make the
// sidecar hold an unbounded body. Buffers are reused from event to event, so
// decoding allocates nothing once they have grown to the size of the events.
package sse

// DefaultMaxEventSize is the event size limit used when
// Decoder.MaxEventSize is zero.
const DefaultMaxEventSize = 1 << 20

// retainLimit is the buffer capacity kept between events. A rare large event
// may grow the buffers up to the event limit; they are released afterwards
// so that an idle stream holds little memory.
const retainLimit = 64 << 10

// An Event is one dispatched event. Its slices alias the decoder's buffers and
// are valid only until the callback returns.
type Event struct {
	// Name is the value of the last "event" field, empty when the event had
	// none (the specification's default type, "message").
	Name []byte
	// Data is the event's "data" lines joined with "\n".
	Data []byte
}

// A Decoder splits a stream into events. The zero value is ready to use.
type Decoder struct {
	// MaxEventSize bounds the bytes held for one event: its data, its name
	// and the line being read. Larger events are dropped. Zero means
	// DefaultMaxEventSize.
	MaxEventSize int

	line     []byte // an incomplete line carried over from the last chunk
	name     []byte
	data     []byte // data lines, each followed by '\n'
	hasData  bool   // a data field was seen (its value may be empty)
	dropping bool   // the current event outgrew the limit
	lineDrop bool   // the incomplete line outgrew the limit
	skipLF   bool   // the last chunk ended in CR: a leading LF belongs to it
	started  bool   // past the optional byte order mark
	bom      int    // bytes of a byte order mark matched so far
}

// byteOrderMark may start a stream and is not part of the first line.
const byteOrderMark = "\xEF\xBB\xBF"

// Feed decodes the next chunk of the stream, calling emit for each event it
// completes. Feed does not retain p.
func (d *Decoder) Feed(p []byte, emit func(Event)) {
	if !d.started {
		p = d.skipBOM(p, emit)
	}
	d.lines(p, emit)
}

func (d *Decoder) limit() int {
	if d.MaxEventSize > 0 {
		return d.MaxEventSize
	}
	return DefaultMaxEventSize
}

// skipBOM consumes a byte order mark at the start of the stream, which may
// itself arrive split across chunks.
func (d *Decoder) skipBOM(p []byte, emit func(Event)) []byte {
	for len(p) > 0 && d.bom < len(byteOrderMark) {
		if p[0] != byteOrderMark[d.bom] {
			// Not a mark after all: what matched so far is content.
			d.started = true
			d.lines([]byte(byteOrderMark[:d.bom]), emit)
			return p
		}
		d.bom++
		p = p[1:]
	}
	if d.bom == len(byteOrderMark) {
		d.started = true
	}
	return p
}

func (d *Decoder) lines(p []byte, emit func(Event)) {
	for len(p) > 0 {
		if d.skipLF {
			d.skipLF = false
			if p[0] == '\n' {
				p = p[1:]
				continue
			}
		}
		i := indexEOL(p)
		if i < 0 {
			d.carry(p)
			return
		}
		line := p[:i]
		if p[i] == '\r' {
			if i+1 < len(p) {
				if p[i+1] == '\n' {
					i++
				}
			} else {
				d.skipLF = true
			}
		}
		p = p[i+1:]
		switch {
		case d.lineDrop:
			d.lineDrop = false
			continue // the tail of a line already dropped
		case len(d.line) > 0:
			d.line = append(d.line, line...)
			line = d.line
		}
		d.field(line, emit)
		d.line = d.line[:0]
	}
}

// carry keeps an incomplete line for the next chunk, within the limit.
func (d *Decoder) carry(p []byte) {
	if d.lineDrop {
		return
	}
	if len(d.name)+len(d.data)+len(d.line)+len(p) > d.limit() {
		d.dropping = true
		d.lineDrop = true
		d.line = d.line[:0]
		return
	}
	d.line = append(d.line, p...)
}

// field interprets one complete line.
func (d *Decoder) field(line []byte, emit func(Event)) {
	if len(line) == 0 {
		d.dispatch(emit)
		return
	}
	if d.dropping {
		return
	}
	if len(d.name)+len(d.data)+len(line) > d.limit() {
		d.dropping = true
		return
	}
	if line[0] == ':' {
		return // comment
	}
	name, value := line, line[len(line):]
	for i, c := range line {
		if c == ':' {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
			break
		}
	}
	switch string(name) {
	case "event":
		d.name = append(d.name[:0], value...)
	case "data":
		d.data = append(d.data, value...)
		d.data = append(d.data, '\n')
		d.hasData = true
	}
}

func (d *Decoder) dispatch(emit func(Event)) {
	if d.hasData && !d.dropping {
		emit(Event{Name: d.name, Data: d.data[:len(d.data)-1]})
	}
	d.dropping = false
	d.hasData = false
	d.name = d.name[:0]
	d.data = d.data[:0]
	if cap(d.data) > retainLimit {
		d.data = nil
	}
	if cap(d.line) > retainLimit {
		d.line = nil
	}
}

// indexEOL returns the index of the first CR or LF in p, or -1.
func indexEOL(p []byte) int {
	for i, c := range p {
		if c == '\n' || c == '\r' {
			return i
		}
	}
	return -1
}
