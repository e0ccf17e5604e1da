package jsonscan

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// A SyntaxError describes why a document is not valid JSON.
type SyntaxError struct {
	Offset int // byte offset in the input where the problem was found
	msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.msg, e.Offset)
}

// A DuplicateKeyError reports a key that appears twice in one object on a
// path the query extracts. Parsers disagree on which copy wins, so the
// gateway and the vendor could read different values.
type DuplicateKeyError struct {
	Path   string // the dotted path of the repeated key
	Offset int
}

func (e *DuplicateKeyError) Error() string {
	return fmt.Sprintf("duplicate key %q at offset %d", e.Path, e.Offset)
}

// A FoldedKeyError reports a key that is not one the query reads but equals
// one under Unicode simple case folding ("MODEL", "Max_Tokens", "max_to\u212aens"
// with the Kelvin sign). encoding/json, and parsers like it, read such a key
// as the field; the gateway would not, so the two would read different
// values.
type FoldedKeyError struct {
	Path   string // the dotted path the key folds to
	Key    string // the key as sent, unescaped
	Offset int
}

func (e *FoldedKeyError) Error() string {
	return fmt.Sprintf("key %s at offset %d differs from %q only in case", strconv.QuoteToASCII(e.Key), e.Offset, e.Path)
}

// maxKeyLen bounds the length of a key in a path. Keys in paths are ASCII, so
// a key that folds to one has as many runes, each written in at most six
// bytes (a \u escape): keys of candidate length always decode into
// scanner.key.
const maxKeyLen = 80

// maxFoldLen is the most UTF-8 bytes a rune folding to an ASCII letter
// takes: the Kelvin sign (U+212A, for k) takes three, the long s (U+017F)
// two.
const maxFoldLen = 3

// Valid reports whether data is one strict JSON document, as Scan checks it.
func Valid(data []byte) error {
	return emptyQuery.Scan(data, nil)
}

var emptyQuery = NewQuery()

// Scan validates data as a single JSON document and calls visit for every
// value found at one of the query's paths, in document order, with the
// position of the path given to NewQuery. Values inside objects and arrays
// are visited before the container itself. The Value refers to data and is
// valid only as long as data is.
//
// Scan stops at the first error: a *SyntaxError, a *DuplicateKeyError, a
// *FoldedKeyError (a key that folds to one on a path the query extracts
// without being it), or an error returned by visit, which is returned unchanged. Values before the
// point of failure have already been visited, which lets callers salvage what
// a truncated document holds. visit may be nil to validate only.
func (q *Query) Scan(data []byte, visit func(path int, v Value) error) error {
	s := scanner{data: data, maxKey: q.maxKey, maxFold: maxFoldLen * q.maxKey}
	s.skipSpace()
	if err := s.value(&q.root, visit); err != nil {
		return err
	}
	s.skipSpace()
	if s.pos < len(s.data) {
		return s.syntax("unexpected data after top-level value")
	}
	return nil
}

// TopLevel returns the kind of the top-level value of a document, judged by
// its first byte only. It does not validate.
func TopLevel(data []byte) Kind {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return Object
		case '[':
			return Array
		case '"':
			return String
		case 't':
			return True
		case 'f':
			return False
		case 'n':
			return Null
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return Number
		}
		break
	}
	return Invalid
}

type scanner struct {
	data    []byte
	pos     int
	depth   int
	maxKey  int
	maxFold int                 // longest folded form of a key, in bytes
	key     [6 * maxKeyLen]byte // scratch for decoding escaped keys
}

func (s *scanner) syntax(msg string) error {
	return &SyntaxError{Offset: s.pos, msg: msg}
}

func (s *scanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value scans one value at s.pos. n is the query node for it, or nil when no
// path goes through it.
//
// visit is passed down rather than kept in the scanner: stored there, it
// would share the fate of the input slices handed to it and escape, costing
// the caller an allocation per Scan.
func (s *scanner) value(n *node, visit func(int, Value) error) error {
	if s.pos >= len(s.data) {
		return s.syntax("unexpected end of input")
	}
	start := s.pos
	var kind Kind
	var escaped bool
	var err error
	switch c := s.data[s.pos]; c {
	case '{':
		kind, err = Object, s.object(n, visit)
	case '[':
		kind, err = Array, s.array(n, visit)
	case '"':
		kind = String
		escaped, err = s.str()
	case 't':
		kind, err = True, s.literal("true")
	case 'f':
		kind, err = False, s.literal("false")
	case 'n':
		kind, err = Null, s.literal("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			kind, err = Number, s.number()
		} else {
			err = s.syntax(fmt.Sprintf("invalid character %q looking for beginning of value", c))
		}
	}
	if err != nil {
		return err
	}
	if n != nil && n.index >= 0 && visit != nil {
		return visit(n.index, Value{Kind: kind, Raw: s.data[start:s.pos], escaped: escaped})
	}
	return nil
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > MaxDepth {
		return s.syntax(fmt.Sprintf("nesting deeper than %d", MaxDepth))
	}
	return nil
}

func (s *scanner) object(n *node, visit func(int, Value) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // '{'
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		s.depth--
		return nil
	}
	var seen uint64 // which of n's keys this object has had
	for {
		if s.pos >= len(s.data) {
			return s.syntax("unexpected end of input in object")
		}
		if s.data[s.pos] != '"' {
			return s.syntax("expected string for object key")
		}
		keyStart := s.pos
		escaped, err := s.str()
		if err != nil {
			return err
		}
		var child *node
		if n != nil && len(n.keys) > 0 {
			i, err := s.match(n, keyStart, escaped)
			if err != nil {
				return err
			}
			if i >= 0 {
				if seen&(1<<i) != 0 {
					return &DuplicateKeyError{Path: n.children[i].path, Offset: keyStart}
				}
				seen |= 1 << i
				child = n.children[i]
			}
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.syntax("unexpected end of input in object")
		}
		if s.data[s.pos] != ':' {
			return s.syntax("expected ':' after object key")
		}
		s.pos++
		s.skipSpace()
		if err := s.value(child, visit); err != nil {
			return err
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.syntax("unexpected end of input in object")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
			s.skipSpace()
		case '}':
			s.pos++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or '}' after object value")
		}
	}
}

// match returns the position among n's keys of the object key whose opening
// quote is at keyStart (s.pos just past its closing quote), or -1. A key
// that only folds to one of n's keys is a *FoldedKeyError.
func (s *scanner) match(n *node, keyStart int, escaped bool) (int, error) {
	key := s.data[keyStart+1 : s.pos-1]
	if escaped {
		if len(key) > len(s.key) {
			return -1, nil // decodes to more bytes than any folded form of a key
		}
		key = appendUnescaped(s.key[:0], key)
	}
	if len(key) > s.maxFold {
		return -1, nil
	}
	if len(key) <= s.maxKey {
		if i := n.lookup(key); i >= 0 {
			return i, nil
		}
	}
	if i := n.lookupFold(key); i >= 0 {
		return -1, &FoldedKeyError{Path: n.children[i].path, Key: string(key), Offset: keyStart}
	}
	return -1, nil
}

func (s *scanner) array(n *node, visit func(int, Value) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // '['
	s.skipSpace()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		s.depth--
		return nil
	}
	var elem *node
	if n != nil {
		elem = n.elem
	}
	for {
		if err := s.value(elem, visit); err != nil {
			return err
		}
		s.skipSpace()
		if s.pos >= len(s.data) {
			return s.syntax("unexpected end of input in array")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
			s.skipSpace()
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or ']' after array element")
		}
	}
}

func (s *scanner) literal(lit string) error {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return s.syntax("invalid literal")
	}
	s.pos += len(lit)
	return nil
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() error {
	if s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos >= len(s.data):
		return s.syntax("unexpected end of input in number")
	case s.data[s.pos] == '0':
		s.pos++
	case isDigit(s.data[s.pos]):
		s.digits()
	default:
		return s.syntax("invalid number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if s.pos >= len(s.data) || !isDigit(s.data[s.pos]) {
			return s.syntax("expected digit after decimal point")
		}
		s.digits()
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.pos >= len(s.data) || !isDigit(s.data[s.pos]) {
			return s.syntax("expected digit in exponent")
		}
		s.digits()
	}
	return nil
}

func (s *scanner) digits() {
	for s.pos < len(s.data) && isDigit(s.data[s.pos]) {
		s.pos++
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// str scans a string and reports whether it holds escapes.
func (s *scanner) str() (escaped bool, err error) {
	s.pos++ // opening quote
	for {
		if s.pos >= len(s.data) {
			return escaped, s.syntax("unexpected end of input in string")
		}
		c := s.data[s.pos]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && size == 1 {
				return escaped, s.syntax("invalid UTF-8 in string")
			}
			s.pos += size
			continue
		}
		switch {
		case c == '"':
			s.pos++
			return escaped, nil
		case c == '\\':
			escaped = true
			if err := s.escape(); err != nil {
				return escaped, err
			}
		case c < 0x20:
			return escaped, s.syntax("invalid control character in string")
		default:
			s.pos++
		}
	}
}

// escape scans one escape sequence starting at the backslash.
func (s *scanner) escape() error {
	s.pos++
	if s.pos >= len(s.data) {
		return s.syntax("unexpected end of input in string escape")
	}
	switch s.data[s.pos] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.pos++
		return nil
	case 'u':
	default:
		return s.syntax("invalid escape in string")
	}
	r, ok := hex4(s.data[s.pos+1:])
	if !ok {
		return s.syntax("invalid \\u escape in string")
	}
	s.pos += 5
	switch {
	case r >= 0xDC00 && r <= 0xDFFF:
		return s.syntax("unpaired surrogate in string escape")
	case r >= 0xD800 && r <= 0xDBFF:
		rest := s.data[s.pos:]
		if len(rest) < 2 || rest[0] != '\\' || rest[1] != 'u' {
			return s.syntax("unpaired surrogate in string escape")
		}
		lo, ok := hex4(rest[2:])
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			return s.syntax("unpaired surrogate in string escape")
		}
		s.pos += 6
	}
	return nil
}

// hex4 decodes four hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
