package jsonscan

import (
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// Kind is the type of a JSON value.
type Kind uint8

const (
	Invalid Kind = iota
	Null
	False
	True
	Number
	String
	Object
	Array
)

var kindNames = [...]string{"invalid", "null", "false", "true", "number", "string", "object", "array"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// A Value is one scanned value. Raw is its exact JSON text (a string keeps its
// quotes; an object or array spans its brackets) and aliases the scanned
// input. Raw has been validated, so the methods below trust it.
type Value struct {
	Kind    Kind
	Raw     []byte
	escaped bool // a string holding backslash escapes
}

// Bool returns the value of true or false; ok is false for any other kind.
func (v Value) Bool() (b, ok bool) {
	switch v.Kind {
	case True:
		return true, true
	case False:
		return false, true
	}
	return false, false
}

// splitNumber splits the digits of a valid JSON number without its sign
// into integer digits, fraction digits and the exponent.
func splitNumber(b []byte) (intPart, frac []byte, exp int) {
	i := 0
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	intPart, b = b[:i], b[i:]
	if len(b) > 0 && b[0] == '.' {
		i = 1
		for i < len(b) && isDigit(b[i]) {
			i++
		}
		frac, b = b[1:i], b[i:]
	}
	if len(b) > 0 { // 'e' or 'E'
		b = b[1:]
		expNeg := b[0] == '-'
		if b[0] == '+' || b[0] == '-' {
			b = b[1:]
		}
		for _, c := range b {
			if exp < 1<<20 { // saturate: far beyond any int64
				exp = exp*10 + int(c-'0')
			}
		}
		if expNeg {
			exp = -exp
		}
	}
	return intPart, frac, exp
}

// Int returns a number whose value is an integer that fits in an int64. Like
// the vendors' own parsers, it accepts integral values written with a
// fraction or an exponent ("100.0", "1e3"); ok is false for other numbers
// ("1.5", "1e-1", "1e30") and other kinds.
func (v Value) Int() (n int64, ok bool) {
	if v.Kind != Number {
		return 0, false
	}
	b := v.Raw
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	intPart, frac, exp := splitNumber(b)
	// The value is digits × 10^exp, digits being intPart and frac run
	// together without leading zeros.
	exp -= len(frac)
	var digits [2][]byte
	digits[0], digits[1] = intPart, frac
	for len(digits[0]) > 0 && digits[0][0] == '0' {
		digits[0] = digits[0][1:]
	}
	if len(digits[0]) == 0 {
		for len(digits[1]) > 0 && digits[1][0] == '0' {
			digits[1] = digits[1][1:]
		}
	}
	// Trailing zeros move into the exponent.
	for {
		last := &digits[1]
		if len(*last) == 0 {
			last = &digits[0]
		}
		if len(*last) == 0 || (*last)[len(*last)-1] != '0' {
			break
		}
		*last = (*last)[:len(*last)-1]
		exp++
	}
	nd := len(digits[0]) + len(digits[1])
	if nd == 0 {
		return 0, true // zero, whatever the exponent
	}
	if exp < 0 {
		return 0, false // a fraction remains
	}
	if nd+exp > 19 {
		return 0, false
	}
	var u uint64
	for _, part := range digits {
		for _, c := range part {
			u = u*10 + uint64(c-'0')
		}
	}
	for range exp {
		u *= 10
	}
	switch {
	case !neg && u <= math.MaxInt64:
		return int64(u), true
	case neg && u <= 1<<63:
		return int64(-u), true
	}
	return 0, false
}

// Equal reports whether v is a string whose decoded content is s.
func (v Value) Equal(s string) bool {
	if v.Kind != String {
		return false
	}
	raw := v.Raw[1 : len(v.Raw)-1]
	if !v.escaped {
		return string(raw) == s
	}
	// An escape never decodes to more bytes than it takes, so a shorter raw
	// form cannot match; compare piece by piece without allocating.
	if len(raw) < len(s) {
		return false
	}
	var buf [utf8.UTFMax]byte
	for len(raw) > 0 {
		var piece []byte
		if raw[0] == '\\' {
			var n int
			piece, n = unescapeOne(buf[:0], raw)
			raw = raw[n:]
		} else {
			i := 0
			for i < len(raw) && raw[i] != '\\' {
				i++
			}
			piece, raw = raw[:i], raw[i:]
		}
		if len(piece) > len(s) || string(piece) != s[:len(piece)] {
			return false
		}
		s = s[len(piece):]
	}
	return s == ""
}

// AppendText appends the decoded content of a string to dst. Other kinds
// append nothing.
func (v Value) AppendText(dst []byte) []byte {
	if v.Kind != String {
		return dst
	}
	raw := v.Raw[1 : len(v.Raw)-1]
	if !v.escaped {
		return append(dst, raw...)
	}
	return appendUnescaped(dst, raw)
}

// Text returns the decoded content of a string, or "" for other kinds.
func (v Value) Text() string {
	if v.Kind != String {
		return ""
	}
	if !v.escaped {
		return string(v.Raw[1 : len(v.Raw)-1])
	}
	return string(v.AppendText(make([]byte, 0, len(v.Raw))))
}

// appendUnescaped decodes the content of a valid JSON string.
func appendUnescaped(dst, raw []byte) []byte {
	for len(raw) > 0 {
		i := 0
		for i < len(raw) && raw[i] != '\\' {
			i++
		}
		dst = append(dst, raw[:i]...)
		raw = raw[i:]
		if len(raw) > 0 {
			var n int
			dst, n = unescapeOne(dst, raw)
			raw = raw[n:]
		}
	}
	return dst
}

// unescapeOne decodes the valid escape sequence at the start of raw,
// appending it to dst, and returns how many bytes it took.
func unescapeOne(dst, raw []byte) ([]byte, int) {
	switch c := raw[1]; c {
	case 'b':
		return append(dst, '\b'), 2
	case 'f':
		return append(dst, '\f'), 2
	case 'n':
		return append(dst, '\n'), 2
	case 'r':
		return append(dst, '\r'), 2
	case 't':
		return append(dst, '\t'), 2
	case 'u':
		r, _ := hex4(raw[2:])
		if utf16.IsSurrogate(r) {
			lo, _ := hex4(raw[8:])
			return utf8.AppendRune(dst, utf16.DecodeRune(r, lo)), 12
		}
		return utf8.AppendRune(dst, r), 6
	default: // '"', '\\', '/'
		return append(dst, c), 2
	}
}
