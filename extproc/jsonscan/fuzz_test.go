package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"unicode/utf8"
)

// depth returns the nesting depth of a document encoding/json accepts.
func depth(data []byte) int {
	d := json.NewDecoder(bytes.NewReader(data))
	cur, deepest := 0, 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return deepest
		}
		if err != nil {
			return -1
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			cur++
			deepest = max(deepest, cur)
		case json.Delim('}'), json.Delim(']'):
			cur--
		}
	}
}

// hasSurrogateEscape reports whether data may hold a \uD800-\uDFFF escape,
// which encoding/json accepts unpaired and Scan does not.
func hasSurrogateEscape(data []byte) bool {
	for i := 0; i+2 < len(data); i++ {
		if data[i] == '\\' && data[i+1] == 'u' && (data[i+2] == 'd' || data[i+2] == 'D') {
			return true
		}
	}
	return false
}

// exactInt is the oracle for Value.Int: the number's exact value, when it
// is an integer in int64 range and its exponent small enough to compute.
func exactInt(raw []byte) (n int64, ok, skip bool) {
	if i := bytes.IndexAny(raw, "eE"); i >= 0 {
		e, err := strconv.Atoi(string(raw[i+1:]))
		if err != nil || e > 400 || e < -400 {
			return 0, false, true
		}
	}
	r, set := new(big.Rat).SetString(string(raw))
	if !set {
		return 0, false, true
	}
	if !r.IsInt() || !r.Num().IsInt64() {
		return 0, false, false
	}
	return r.Num().Int64(), true, false
}

// decode is json.Unmarshal keeping numbers as text, so that numbers beyond
// float64's range decode too.
func decode(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

func FuzzScan(f *testing.F) {
	for _, s := range []string{
		`{"a":1,"c":[{"d":"x"},2]}`,
		`{"a":{"b":[1,2.5,-3e2]},"c":[]}`,
		`{"a":"caf\u00e9\ud83d\ude00","a2":"\n"}`,
		`{"a":1,"a":2}`,
		`[1,{"a":true},null,"s"]`,
		`{"a":12500e-2,"b":1E+3,"c":[0.0,-0]}`,
		"{\"a\":\"\xff\"}",
		`{"a":"\ud800"}`,
		`{"a" : [[[[]]]] , "b" : { "c" : null } }`,
		`{"A":1,"c":[{"D":2}]}`,
		`{"a":{"\u0042":1},"\u212a":2,"c":[{"\u017f":3}]}`,
	} {
		f.Add([]byte(s))
	}
	q := NewQuery("a", "a.b", "c[]", "c[].d")
	f.Fuzz(func(t *testing.T, data []byte) {
		type hit struct {
			path int
			v    Value
		}
		var hits []hit
		err := q.Scan(data, func(path int, v Value) error {
			hits = append(hits, hit{path, v})
			return nil
		})
		var syntax *SyntaxError
		var dup *DuplicateKeyError
		var folded *FoldedKeyError
		if err != nil && !errors.As(err, &syntax) && !errors.As(err, &dup) && !errors.As(err, &folded) {
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
		goValid := json.Valid(data)
		if err == nil && !goValid {
			t.Fatalf("accepted a document encoding/json rejects: %q", data)
		}
		if errors.As(err, &syntax) && goValid && utf8.Valid(data) && !hasSurrogateEscape(data) && depth(data) <= MaxDepth && !bytes.HasPrefix(data, []byte("\xEF\xBB\xBF")) {
			t.Fatalf("rejected a valid document %q: %v", data, err)
		}
		if err != nil {
			return
		}
		if (Valid(data) == nil) != true {
			t.Fatal("Valid disagrees with Scan")
		}
		for _, h := range hits {
			var want any
			if err := decode(h.v.Raw, &want); err != nil {
				t.Fatalf("visited value %q does not parse: %v", h.v.Raw, err)
			}
			switch h.v.Kind {
			case String:
				if got := h.v.Text(); got != want {
					t.Fatalf("Text() = %q, encoding/json says %q", got, want)
				}
				if !h.v.Equal(want.(string)) {
					t.Fatalf("Equal(%q) is false", want)
				}
			case Number:
				n, ok := h.v.Int()
				wn, wok, skip := exactInt(h.v.Raw)
				if !skip && (n != wn || ok != wok) {
					t.Fatalf("Int(%s) = %d, %v; want %d, %v", h.v.Raw, n, ok, wn, wok)
				}
			}
		}
		// Extracted values agree with a full decode when the document is an
		// object.
		if TopLevel(data) != Object {
			return
		}
		var doc map[string]any
		if err := decode(data, &doc); err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if h.path != 0 {
				continue
			}
			var got any
			_ = decode(h.v.Raw, &got)
			if !reflect.DeepEqual(got, doc["a"]) {
				t.Fatalf("path a: got %v, want %v", got, doc["a"])
			}
		}
		// A decoder into structs, which matches keys to fields by case
		// folding, reads the same values at every path.
		var folding struct {
			A any `json:"a"`
			C []struct {
				D any `json:"d"`
			} `json:"c"`
		}
		if decode(data, &folding) != nil {
			return // a type the struct cannot hold ("c" not an array of objects)
		}
		var a any
		var ds []any
		for _, h := range hits {
			var got any
			_ = decode(h.v.Raw, &got)
			switch h.path {
			case 0:
				a = got
			case 3:
				ds = append(ds, got)
			}
		}
		if !reflect.DeepEqual(a, folding.A) {
			t.Fatalf("path a: got %v, a folding decoder reads %v", a, folding.A)
		}
		var want []any
		for _, c := range folding.C {
			if c.D != nil {
				want = append(want, c.D)
			}
		}
		ds = slices.DeleteFunc(ds, func(d any) bool { return d == nil })
		if !slices.EqualFunc(ds, want, func(a, b any) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("path c[].d: got %v, a folding decoder reads %v", ds, want)
		}
	})
}

func FuzzAppendQuote(f *testing.F) {
	for _, s := range []string{"", "a\"b\\c", "\x00\x1f\x7f", "\xff\xfe", "\u2028", "日本😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		quoted := AppendQuote(nil, s)
		var got string
		err := NewQuery("a").Scan(append(append([]byte(`{"a":`), quoted...), '}'), func(_ int, v Value) error {
			got = v.Text()
			return nil
		})
		if err != nil {
			t.Fatalf("AppendQuote(%q) = %s: %v", s, quoted, err)
		}
		if want := string([]rune(s)); got != want {
			t.Fatalf("round trip of %q gave %q", s, got)
		}
	})
}
