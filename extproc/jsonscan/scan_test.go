package jsonscan

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode"
)

func TestValid(t *testing.T) {
	valid := []string{
		`{}`, `[]`, `0`, `-0`, `1.5e+10`, `-12.0E-3`, `"x"`, `true`, `false`, `null`,
		` { "a" : [ 1 , 2 , { "b" : null } ] } `,
		"\t\r\n{}\n",
		`"\"\\\/\b\f\n\r\t\u00e9\u20AC"`,
		`"\ud83d\ude00"`,
		`"héllo 日本語 😀"`,
		`{"a":1,"a":2}`, // duplicates off the query's paths are allowed
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	}
	for _, s := range valid {
		if err := Valid([]byte(s)); err != nil {
			t.Errorf("Valid(%q) = %v", s, err)
		}
	}
	invalid := []string{
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a"}`, `{"a" 1}`, `{a:1}`, `{'a':1}`,
		`01`, `-`, `1.`, `.5`, `1e`, `1e+`, `+1`, `0x10`, `NaN`, `Infinity`, `1 2`,
		`tru`, `nul`, `True`, `"abc`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"a\tb\"", "\"\x00\"",
		"\"\xff\"", "\"\xc3\x28\"", "\"\xed\xa0\x80\"", // invalid UTF-8, encoded surrogate
		"\"\xc0\xaf\"", // overlong
		`"\ud83d"`, `"\ude00"`, `"\ud83d\u0041"`, `"\ud83dx"`,
		"\xEF\xBB\xBF{}", // byte order mark
		`{} x`, `[]]`, `{"a":1}}`,
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
		strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1),
	}
	for _, s := range invalid {
		err := Valid([]byte(s))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Valid(%q) = %v, want a SyntaxError", s, err)
		}
	}
}

func TestScanPaths(t *testing.T) {
	q := NewQuery("model", "stream_options.include_usage", "choices[].delta.content", "usage", "a[][]")
	doc := `{"model":"gpt\u002d4o","x":{"model":"inner"},"stream_options":{"include_usage":true},
		"choices":[{"delta":{"content":"Hi"}},{"delta":{"content":null}},{"delta":{}}],
		"usage":{"prompt_tokens":3},"a":[[1,2],[3],4]}`
	type hit struct {
		path int
		kind Kind
		raw  string
	}
	var got []hit
	err := q.Scan([]byte(doc), func(path int, v Value) error {
		got = append(got, hit{path, v.Kind, string(v.Raw)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []hit{
		{0, String, `"gpt\u002d4o"`},
		{1, True, `true`},
		{2, String, `"Hi"`},
		{2, Null, `null`},
		{3, Object, `{"prompt_tokens":3}`},
		{4, Number, `1`},
		{4, Number, `2`},
		{4, Number, `3`},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("hit %d: got %v, want %v", i, got[i], want[i])
		}
	}
}

func TestEscapedKeyMatches(t *testing.T) {
	q := NewQuery("model")
	var got string
	err := q.Scan([]byte(`{"mod\u0065l":"m"}`), func(_ int, v Value) error {
		got = v.Text()
		return nil
	})
	if err != nil || got != "m" {
		t.Fatalf("got %q, %v", got, err)
	}
	// The escaped and plain spellings are the same key.
	err = q.Scan([]byte(`{"model":"a","mod\u0065l":"b"}`), nil)
	var dup *DuplicateKeyError
	if !errors.As(err, &dup) || dup.Path != "model" {
		t.Fatalf("got %v, want duplicate model", err)
	}
}

func TestDuplicateKeys(t *testing.T) {
	q := NewQuery("model", "stream_options.include_usage")
	tests := []struct {
		doc  string
		path string // "" for no error
	}{
		{`{"model":"a","model":"b"}`, "model"},
		{`{"stream_options":{},"stream_options":{}}`, "stream_options"},
		{`{"stream_options":{"include_usage":true,"include_usage":false}}`, "stream_options.include_usage"},
		{`{"other":1,"other":2,"model":"a"}`, ""},
		{`{"x":{"model":1,"model":2}}`, ""},
		{`[{"model":1,"model":2}]`, ""},
		{`{"stream_options":{"a":1,"a":2}}`, ""},
	}
	for _, tt := range tests {
		err := q.Scan([]byte(tt.doc), nil)
		var dup *DuplicateKeyError
		switch {
		case tt.path == "" && err != nil:
			t.Errorf("%s: %v", tt.doc, err)
		case tt.path != "" && (!errors.As(err, &dup) || dup.Path != tt.path):
			t.Errorf("%s: got %v, want duplicate %s", tt.doc, err, tt.path)
		}
	}
}

func TestVisitErrorStopsScan(t *testing.T) {
	stop := errors.New("stop")
	q := NewQuery("a")
	if err := q.Scan([]byte(`{"a":1,"b":[}`), func(int, Value) error { return stop }); err != stop {
		t.Fatalf("got %v, want the visitor's error", err)
	}
}

func TestTruncatedStillVisitsEarlierValues(t *testing.T) {
	q := NewQuery("model", "usage.input_tokens")
	var seen []string
	err := q.Scan([]byte(`{"model":"m","usage":{"input_tokens":12,"output`), func(_ int, v Value) error {
		seen = append(seen, string(v.Raw))
		return nil
	})
	if err == nil || len(seen) != 2 || seen[1] != "12" {
		t.Fatalf("got %v, %v", seen, err)
	}
}

func TestInt(t *testing.T) {
	tests := []struct {
		raw string
		n   int64
		ok  bool
	}{
		{"0", 0, true},
		{"-0", 0, true},
		{"1", 1, true},
		{"1024", 1024, true},
		{"-7", -7, true},
		{"100.0", 100, true},
		{"1e3", 1000, true},
		{"1E+3", 1000, true},
		{"1.5e1", 15, true},
		{"12500e-2", 125, true},
		{"0.0e99999999999", 0, true},
		{"0.000", 0, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"-9223372036854775808", -9223372036854775808, true},
		{"9223372036854775808", 0, false},
		{"92233720368547758070e-1", 9223372036854775807, true},
		{"99999999999999999999", 0, false},
		{"1.5", 0, false},
		{"1e-1", 0, false},
		{"10e-2", 0, false},
		{"1e30", 0, false},
		{"1e99999999999999999999", 0, false},
		{"1e-99999999999999999999", 0, false},
		{"0.1", 0, false},
		{"2.50", 0, false},
	}
	for _, tt := range tests {
		n, ok := Value{Kind: Number, Raw: []byte(tt.raw)}.Int()
		if n != tt.n || ok != tt.ok {
			t.Errorf("Int(%s) = %d, %v; want %d, %v", tt.raw, n, ok, tt.n, tt.ok)
		}
	}
	if _, ok := (Value{Kind: String, Raw: []byte(`"1"`)}).Int(); ok {
		t.Error("a string is not an integer")
	}
}

func TestTextAndEqual(t *testing.T) {
	q := NewQuery("s")
	for _, doc := range []string{
		`{"s":"plain"}`,
		`{"s":"a\"b\\c\/d\be\ff\ng\rh\ti"}`,
		`{"s":"caf\u00e9 \u20ac \ud83d\ude00 日本"}`,
		`{"s":""}`,
	} {
		var want struct{ S string }
		if err := json.Unmarshal([]byte(doc), &want); err != nil {
			t.Fatal(err)
		}
		err := q.Scan([]byte(doc), func(_ int, v Value) error {
			if got := v.Text(); got != want.S {
				t.Errorf("Text of %s = %q, want %q", doc, got, want.S)
			}
			if !v.Equal(want.S) {
				t.Errorf("Equal(%q) false for %s", want.S, doc)
			}
			if v.Equal(want.S+"x") || (want.S != "" && v.Equal(want.S[:len(want.S)-1])) {
				t.Errorf("Equal matched a different string for %s", doc)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestAppendQuote(t *testing.T) {
	for _, s := range []string{"", "plain", "quote\" back\\ slash", "ctl \x00\x01\x1f\n\r\t", "bad \xff utf8", "sep \u2028\u2029", "日本 😀", "<&>"} {
		q := AppendQuote(nil, s)
		if err := Valid(q); err != nil {
			t.Fatalf("AppendQuote(%q) = %s: %v", s, q, err)
		}
		var back string
		if err := json.Unmarshal(q, &back); err != nil {
			t.Fatal(err)
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if back != want {
			t.Errorf("round trip of %q gave %q", s, back)
		}
	}
}

func TestNewQueryPanics(t *testing.T) {
	for _, p := range []string{"", "a.", ".a", "a..b", "a[]b", "a]", strings.Repeat("k", maxKeyLen+1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewQuery(%q) did not panic", p)
				}
			}()
			NewQuery(p)
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("NewQuery with a repeated path did not panic")
			}
		}()
		NewQuery("a", "a")
	}()
}

func TestTopLevel(t *testing.T) {
	for doc, want := range map[string]Kind{" {": Object, "[": Array, `"`: String, "1": Number, "-": Number, "t": True, "f": False, "n": Null, "": Invalid, "x": Invalid} {
		if got := TopLevel([]byte(doc)); got != want {
			t.Errorf("TopLevel(%q) = %v, want %v", doc, got, want)
		}
	}
}

func TestScanDoesNotAllocate(t *testing.T) {
	q := NewQuery("type", "delta.text", "usage.output_tokens")
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","te\u0078t":"Hello \u00e9"}}`)
	var n int64
	allocs := testing.AllocsPerRun(100, func() {
		_ = q.Scan(data, func(path int, v Value) error {
			if path == 2 {
				n, _ = v.Int()
			}
			return nil
		})
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per scan", allocs)
	}
	_ = n
}

func BenchmarkScan(b *testing.B) {
	q := NewQuery("model", "max_tokens", "stream")
	doc := []byte(`{"model":"m","max_tokens":1024,"stream":true,"messages":[` +
		strings.Repeat(`{"role":"user","content":[{"type":"text","text":"Some text with \"escapes\" and unicode é"}]},`, 100) +
		`{"role":"user","content":"end"}]}`)
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if err := q.Scan(doc, func(int, Value) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFoldedKeys(t *testing.T) {
	q := NewQuery("model", "max_tokens", "stream_options.include_usage", "tools[].type")
	tests := []struct {
		doc  string
		path string // "" for no error
		key  string
	}{
		{`{"MODEL":"a"}`, "model", "MODEL"},
		{`{"model":"a","Model":"b"}`, "model", "Model"},
		{`{"max_to\u212aens":1}`, "max_tokens", "max_to\u212aens"},
		{"{\"max_to\u212aens\":1}", "max_tokens", "max_to\u212aens"}, // the Kelvin sign unescaped
		{`{"Max_Tokens":1}`, "max_tokens", "Max_Tokens"},
		{`{"\u017ftream_options":{}}`, "stream_options", "\u017ftream_options"}, // a long s
		{`{"stream_options":{"INCLUDE_USAGE":true}}`, "stream_options.include_usage", "INCLUDE_USAGE"},
		{`{"tools":[{"type":"a"},{"TYPE":"b"}]}`, "tools[].type", "TYPE"},
		{`{"TOOLS":[]}`, "tools", "TOOLS"},
		{`{"mod\u0045l":"a"}`, "model", "modEl"},
		// Not a folding of a read key, or not where the query reads.
		{`{"model":"a","models":"b","mode":"c","m\u00f6del":"d"}`, "", ""},
		{`{"x":{"MODEL":1},"other":[{"Max_Tokens":2}]}`, "", ""},
		{`[{"MODEL":1}]`, "", ""},
		{`{"stream_options":{"Include_Usage_x":true}}`, "", ""},
		{`{"max_tokens\u0000":1}`, "", ""},
	}
	for _, tt := range tests {
		err := q.Scan([]byte(tt.doc), nil)
		var folded *FoldedKeyError
		switch {
		case tt.path == "" && err != nil:
			t.Errorf("%s: %v", tt.doc, err)
		case tt.path != "" && (!errors.As(err, &folded) || folded.Path != tt.path || folded.Key != tt.key):
			t.Errorf("%s: got %v, want %q folded to %s", tt.doc, err, tt.key, tt.path)
		}
	}
}

func TestEqualFoldIsStringsEqualFold(t *testing.T) {
	keys := []string{"model", "max_tokens", "stream", "n", "k", "s", "include_usage"}
	// Every rune whose fold orbit holds an ASCII letter, and its neighbours.
	subs := []string{"K", "k", "\u212a", "S", "s", "\u017f", "\u212b", "\u00e5", "\u0130", "\u0131", "I", "i", "_", "\u00df"}
	for _, k := range keys {
		for i := range len(k) {
			for _, sub := range subs {
				b := k[:i] + sub + k[i+1:]
				if got, want := equalFold([]byte(b), k), strings.EqualFold(b, k); got != want {
					t.Errorf("equalFold(%q, %q) = %v, strings.EqualFold says %v", b, k, got, want)
				}
			}
		}
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		b := string(r)
		for _, k := range []string{"k", "s", "a"} {
			if got, want := equalFold([]byte(b), k), strings.EqualFold(b, k); got != want {
				t.Errorf("equalFold(%q, %q) = %v, strings.EqualFold says %v", b, k, got, want)
			}
		}
	}
}

func TestFoldedKeyFormsFit(t *testing.T) {
	// The longest key a query takes, each letter written as the Kelvin
	// sign escaped: the longest escaped form of a key that folds to one.
	long := strings.Repeat("k", maxKeyLen)
	q := NewQuery(long)
	for _, key := range []string{strings.Repeat(`\u212a`, maxKeyLen), strings.Repeat("\u212a", maxKeyLen)} {
		err := q.Scan([]byte(`{"`+key+`":1}`), nil)
		var folded *FoldedKeyError
		if !errors.As(err, &folded) || folded.Path != long {
			t.Errorf("got %v, want the key folded to the long one", err)
		}
	}
}

func TestNewQueryRefusesFoldingKeys(t *testing.T) {
	for _, paths := range [][]string{{"model", "MODEL"}, {"a.k", "a.\u212a"}, {"caf\u00e9"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewQuery(%q) did not panic", paths)
				}
			}()
			NewQuery(paths...)
		}()
	}
}

func TestFoldCheckDoesNotAllocate(t *testing.T) {
	q := NewQuery("model", "messages[].content")
	data := []byte(`{"model":"m","messages":[{"role":"user","content":"hi","a_rather_long_key_name_beyond_thirty_two_bytes":1}],"temperature":1}`)
	if allocs := testing.AllocsPerRun(100, func() { _ = q.Scan(data, nil) }); allocs != 0 {
		t.Fatalf("%v allocations per scan", allocs)
	}
}
