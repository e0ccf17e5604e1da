package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{
		"", "plain", `quote " backslash \ slash /`, "nl\n cr\r tab\t nul\x00 bel\x07 \x1f",
		"<html> & co", "é ü — 漢字 🙂", "bad \xff utf8 \xc3", "line\u2028sep\u2029",
	} {
		got := appendJSONString(nil, s)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("%q: invalid JSON %s: %v", s, got, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if back != want {
			t.Errorf("%q: round trip gave %q", s, back)
		}
	}
}

func TestReplyWords(t *testing.T) {
	for _, c := range []struct {
		text string
		n    int
		want string
	}{
		{"a b", 1, "Echo:"},
		{"a b", 4, "Echo: a b a"},
		{"  many   spaces\there\n", 5, "Echo: many spaces here many"},
		{"", 3, "Echo: lorem ipsum"},
		{strings.Repeat("x", 40), 2, "Echo: " + strings.Repeat("x", 32)},
		{strings.Repeat("é", 20), 2, "Echo: " + strings.Repeat("é", 16)},
	} {
		got := strings.Join(replyWords(c.text, c.n), " ")
		if got != c.want {
			t.Errorf("replyWords(%q, %d) = %q, want %q", c.text, c.n, got, c.want)
		}
	}
}

func TestInputTokens(t *testing.T) {
	for n, want := range map[int]int{0: 0, 1: 1, 7: 1, 8: 1, 9: 2, 80: 10} {
		got := inputTokens(make([]byte, n))
		if got != want || got > n {
			t.Errorf("inputTokens(%d bytes) = %d, want %d", n, got, want)
		}
	}
}

func TestFragments(t *testing.T) {
	in := []byte(`{"k":"ééééé"}`)
	frags := fragments(in, 8)
	var joined []byte
	for _, f := range frags {
		if len(f) == 0 || len(f) > 8 || !utf8.Valid(f) {
			t.Errorf("fragment %q", f)
		}
		joined = append(joined, f...)
	}
	if string(joined) != string(in) {
		t.Errorf("fragments join to %s", joined)
	}
}

func TestToolArguments(t *testing.T) {
	for _, c := range []struct{ schema, want string }{
		{``, `{"location":"Paris"}`},
		{`{"type":"object"}`, `{"location":"Paris"}`},
		{`{"type":"object","properties":{"q":{"type":"string"}}}`, `{"location":"Paris"}`},
		{`{"properties":{"q":{"type":"string"},"n":{"type":"integer"},"f":{"type":"number"},"b":{"type":"boolean"},` +
			`"a":{"type":"array"},"o":{"type":"object"},"e":{"enum":[ "x" , 2]},"u":{}},"required":["q","n","f","b","a","o","e","u","missing"]}`,
			`{"q":"Paris","n":1,"f":1,"b":true,"a":[],"o":{},"e":"x","u":"Paris","missing":"Paris"}`},
		{`"not an object"`, `{"location":"Paris"}`},
	} {
		got := string(toolArguments(json.RawMessage(c.schema)))
		if got != c.want || !json.Valid([]byte(got)) {
			t.Errorf("toolArguments(%s) = %s, want %s", c.schema, got, c.want)
		}
	}
}
