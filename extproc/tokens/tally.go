package tokens

// DefaultLimit is the text a Tally holds when Limit is zero.
const DefaultLimit = 4 << 10

// A Tally counts the tokens of text that arrives in pieces, such as the deltas
// of a streamed reply, while holding at most Limit bytes of it.
//
// In its default, lazy mode a Tally keeps the first Limit bytes and only
// measures the rest; Tokens counts the kept text and extrapolates its token
// density to the rest. Writing then costs a copy and never tokenizes, which
// suits a meter that needs the figure only if the vendor's own usage never
// arrives. In eager mode the tally tokenizes and releases its text each time
// it fills, so the total stays a true count at the cost of tokenizing while
// the text streams in.
//
// The zero value is a lazy tally with the default limit.
type Tally struct {
	Limit int  // bytes of text held at once; zero means DefaultLimit
	Eager bool // count as text arrives instead of extrapolating
	// Ratio, when set, counts tokens as bytes divided by a vendor's measured
	// bytes per token instead of with the tokenizer; nothing is held.
	Ratio Ratio

	buf     []byte
	counted int64 // eager: tokens in text already released
	extra   int64 // lazy: bytes seen beyond buf
	total   int64 // bytes written
}

func (t *Tally) limit() int {
	if t.Limit > 0 {
		return max(t.Limit, 16)
	}
	return DefaultLimit
}

// Write adds text. It does not retain p.
func (t *Tally) Write(p []byte) {
	t.total += int64(len(p))
	if t.Ratio.valid() {
		return
	}
	limit := t.limit()
	for len(p) > 0 {
		room := limit - len(t.buf)
		if room <= 0 {
			if !t.Eager {
				t.extra += int64(len(p))
				return
			}
			t.release(limit)
			continue
		}
		n := min(room, len(p))
		t.grow(n, limit)
		t.buf = append(t.buf, p[:n]...)
		p = p[n:]
	}
}

// grow makes room for n more bytes, never beyond limit.
func (t *Tally) grow(n, limit int) {
	need := len(t.buf) + n
	if need <= cap(t.buf) {
		return
	}
	c := min(limit, max(need, 2*cap(t.buf), 256))
	b := make([]byte, len(t.buf), c)
	copy(b, t.buf)
	t.buf = b
}

// release counts the held text up to a word boundary and keeps the rest.
func (t *Tally) release(limit int) {
	k := cut(t.buf, limit-1)
	t.counted += Count(t.buf[:k])
	t.buf = t.buf[:copy(t.buf, t.buf[k:])]
}

// Len returns the number of bytes written.
func (t *Tally) Len() int64 { return t.total }

// Tokens returns the tokens counted, plus the extrapolated tokens of text not
// held in lazy mode. It tokenizes the held text on each call.
func (t *Tally) Tokens() int64 {
	if t.Ratio.valid() {
		return t.Ratio.Count(t.total)
	}
	held := Count(t.buf)
	if t.extra > 0 && len(t.buf) > 0 {
		// Round up: the estimate leans towards billing what was sent.
		held += (held*t.extra + int64(len(t.buf)) - 1) / int64(len(t.buf))
	}
	return t.counted + held
}
