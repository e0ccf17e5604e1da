// Package jsonscan validates JSON documents and extracts a few values from
// them in one pass, without building a tree.
//
// The gateway reads a handful of fields from bodies it otherwise forwards
// untouched, so decoding whole documents into maps would cost far more than it
// needs. A Query names the fields of interest; Scan walks the document once,
// checks it against RFC 8259 (valid UTF-8 in strings, escapes included, and a
// bounded nesting depth), and hands each matching value to a callback as a
// slice of the input. Nothing is allocated per value.
//
// Validation is strict on purpose: the gateway and the vendor must read a body
// the same way, so anything a strict parser would reject, or that two lenient
// parsers might read differently (such as a repeated key on a path the
// gateway reads, or a key that equals one of those only under case folding,
// which encoding/json reads as the field), is rejected.
package jsonscan

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxDepth is the deepest nesting of objects and arrays Scan accepts. A
// top-level object is at depth 1.
const MaxDepth = 128

// maxChildren bounds the keys below one path node, so that keys seen in one
// object fit a uint64 bitmask.
const maxChildren = 64

// A Query is a compiled set of paths to extract. It is safe for concurrent
// use.
type Query struct {
	root   node
	maxKey int // longest key in any path, in bytes
	paths  []string
}

// node is one step of a path. A node may be both the end of a path and a
// prefix of longer ones.
type node struct {
	path     string // dotted path up to here, for error messages
	index    int    // index of the path that ends here, or -1
	keys     []string
	children []*node // children[i] is reached through keys[i]
	elem     *node   // reached through any array element ("[]")
}

// NewQuery compiles paths. A path is a sequence of object keys separated by
// dots, where "[]" after a step stands for every element of an array:
//
//	model
//	stream_options.include_usage
//	choices[].delta.tool_calls[].function.arguments
//
// The callback given to Scan receives the position of the path in this list.
// Keys cannot contain '.', '[' or ']'. NewQuery panics on a malformed path,
// like regexp.MustCompile, since paths are fixed by the program.
func NewQuery(paths ...string) *Query {
	q := &Query{root: node{index: -1}, paths: paths}
	for i, p := range paths {
		if err := q.add(i, p); err != nil {
			panic(fmt.Sprintf("jsonscan: path %q: %v", p, err))
		}
	}
	return q
}

// Paths returns the paths q was compiled from, in order: what a body's
// reader reads, for tests that derive their cases from it.
func (q *Query) Paths() []string { return slices.Clone(q.paths) }

func (q *Query) add(index int, path string) error {
	if path == "" {
		return fmt.Errorf("empty path")
	}
	n := &q.root
	rest := path
	for rest != "" {
		if strings.HasPrefix(rest, "[]") {
			if n.elem == nil {
				n.elem = &node{path: n.path + "[]", index: -1}
			}
			n = n.elem
			rest = rest[2:]
			if strings.HasPrefix(rest, ".") {
				rest = rest[1:]
				if rest == "" {
					return fmt.Errorf("trailing dot")
				}
			} else if rest != "" && !strings.HasPrefix(rest, "[]") {
				return fmt.Errorf("missing dot after []")
			}
			continue
		}
		end := strings.IndexAny(rest, ".[")
		if end < 0 {
			end = len(rest)
		}
		key := rest[:end]
		if key == "" {
			return fmt.Errorf("empty key")
		}
		if strings.ContainsRune(key, ']') {
			return fmt.Errorf("stray ]")
		}
		if !isASCII(key) {
			return fmt.Errorf("key not ASCII") // the scanner's bound on folded keys assumes it
		}
		if len(key) > maxKeyLen {
			return fmt.Errorf("key longer than %d bytes", maxKeyLen)
		}
		rest = rest[end:]
		if strings.HasPrefix(rest, ".") {
			rest = rest[1:]
			if rest == "" {
				return fmt.Errorf("trailing dot")
			}
		}
		n = n.child(key)
		if n == nil {
			return fmt.Errorf("more than %d keys below one step, or two that differ only in case", maxChildren)
		}
		q.maxKey = max(q.maxKey, len(key))
	}
	if n.index >= 0 {
		return fmt.Errorf("duplicate path")
	}
	n.index = index
	return nil
}

// child returns the child reached through key, adding it if needed.
func (n *node) child(key string) *node {
	for i, k := range n.keys {
		if k == key {
			return n.children[i]
		}
		if strings.EqualFold(k, key) {
			return nil // a key folding to another could not be refused
		}
	}
	if len(n.keys) == maxChildren {
		return nil
	}
	p := key
	if n.path != "" {
		p = n.path + "." + key
	}
	c := &node{path: p, index: -1}
	n.keys = append(n.keys, key)
	n.children = append(n.children, c)
	return c
}

// lookup returns the position of key among n's keys, or -1.
func (n *node) lookup(key []byte) int {
	for i, k := range n.keys {
		if k == string(key) {
			return i
		}
	}
	return -1
}

// lookupFold returns the position among n's keys of one that key equals
// under Unicode simple case folding, as encoding/json matches keys to
// fields, or -1.
func (n *node) lookupFold(key []byte) int {
	for i, k := range n.keys {
		if len(key) < len(k) || len(key) > maxFoldLen*len(k) {
			continue
		}
		// Most keys differ from k in their first byte, both ASCII.
		if c := key[0]; c < utf8.RuneSelf && lowerASCII(c) != lowerASCII(k[0]) {
			continue
		}
		if equalFold(key, k) {
			return i
		}
	}
	return -1
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFold is strings.EqualFold(string(b), s) without the conversion,
// which would allocate for a long key.
func equalFold(b []byte, s string) bool {
	for len(b) > 0 && len(s) > 0 {
		r, n := utf8.DecodeRune(b)
		t, m := utf8.DecodeRuneInString(s)
		b, s = b[n:], s[m:]
		if r == t {
			continue
		}
		if t < r {
			r, t = t, r
		}
		if t < utf8.RuneSelf { // ASCII: only letters fold, to each other
			if 'A' <= r && r <= 'Z' && t == r+'a'-'A' {
				continue
			}
			return false
		}
		// r and t fold together if t is in r's orbit, which SimpleFold
		// walks upwards from r and wraps around to the smallest.
		f := unicode.SimpleFold(r)
		for f != r && f < t {
			f = unicode.SimpleFold(f)
		}
		if f != t {
			return false
		}
	}
	return len(b) == len(s)
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
