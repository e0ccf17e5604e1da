package formattest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/extproc/format"
)

// FoldedKeys returns the spellings of key that a parser folding case
// (encoding/json's matching of keys to fields) reads as key, written as
// JSON string content: upper case, a capital first letter, and every k and
// s as the Kelvin sign and the long s, raw and as \u escapes, and each
// letter alone in its other case, raw and escaped.
func FoldedKeys(key string) []string {
	var out []string
	add := func(v string) {
		if v != key && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	add(strings.ToUpper(key))
	add(strings.ToUpper(key[:1]) + key[1:])
	kelvin := strings.NewReplacer("k", "\u212a", "K", "\u212a", "s", "\u017f", "S", "\u017f")
	escaped := strings.NewReplacer("k", `\u212a`, "K", `\u212a`, "s", `\u017f`, "S", `\u017f`)
	add(kelvin.Replace(key))
	add(escaped.Replace(key))
	for i := range len(key) { // one letter at a time: its other case, raw and as a \u escape
		c := key[i]
		if c < 'a' || c > 'z' {
			continue
		}
		add(key[:i] + string(c-'a'+'A') + key[i+1:])
		add(key[:i] + `\u00` + hexByte(c-'a'+'A') + key[i+1:])
		switch c {
		case 'k':
			add(key[:i] + `\u212A` + key[i+1:])
		case 's':
			add(key[:i] + "\u017f" + key[i+1:])
		}
	}
	return out
}

func hexByte(c byte) string {
	const digits = "0123456789ABCDEF"
	return string([]byte{digits[c>>4], digits[c&0xF]})
}

// A FoldedCase is a body holding one folded spelling of one step of a read
// path, and the path the refusal names.
type FoldedCase struct {
	Body  string
	Param string
}

// FoldedBodies returns, for every step of every path (as given to
// jsonscan.NewQuery), a body that spells that step in each of its folded
// forms, the steps before it exactly: {"stream_options":{"INCLUDE_USAGE":1}}.
// The folded key comes first in its object, before anything a parser could
// refuse first.
func FoldedBodies(paths []string) []FoldedCase {
	var out []FoldedCase
	for _, p := range paths {
		steps := strings.Split(p, ".")
		for i := range steps {
			key := steps[i]
			for strings.HasSuffix(key, "[]") {
				key = strings.TrimSuffix(key, "[]")
			}
			param := strings.Join(append(append([]string{}, steps[:i]...), key), ".")
			for _, f := range FoldedKeys(key) {
				out = append(out, FoldedCase{Body: nest(steps[:i], `"`+f+`":1`), Param: param})
			}
		}
	}
	return out
}

// nest wraps member in the objects and arrays steps name.
func nest(steps []string, member string) string {
	if len(steps) == 0 {
		return "{" + member + "}"
	}
	key, inner := steps[0], nest(steps[1:], member)
	for strings.HasSuffix(key, "[]") {
		key = strings.TrimSuffix(key, "[]")
		inner = "[" + inner + "]"
	}
	return `{"` + key + `":` + inner + "}"
}

// CheckFoldedKeys fails t unless parse refuses, as a 400 naming the field,
// every folded spelling of every step of the paths it reads.
func CheckFoldedKeys(t *testing.T, parse Parse, contentType string, paths []string) {
	t.Helper()
	cases := FoldedBodies(paths)
	if len(cases) < 3*len(paths) {
		t.Fatalf("only %d folded bodies for %d paths", len(cases), len(paths))
	}
	for _, c := range cases {
		_, err := parse([]byte(c.Body), contentType)
		var re *format.Error
		if !errors.As(err, &re) || re.Kind != format.InvalidRequest || re.Param != c.Param || !strings.Contains(re.Message, "only in case") {
			t.Errorf("%s: got %v, want a 400 on %s", c.Body, err, c.Param)
		}
	}
}
