package usage

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
)

// Kinds names every field of Usage exactly once, with distinct names that
// can stand in a Redis counter name ("m:NAME:MODEL").
func TestKindsCoverUsage(t *testing.T) {
	typ := reflect.TypeOf(Usage{})
	if len(Kinds) != typ.NumField() {
		t.Fatalf("%d kinds for %d fields", len(Kinds), typ.NumField())
	}
	names := map[string]bool{}
	var u Usage
	for i, k := range Kinds {
		if names[k.Name] || k.Name == "" || strings.Contains(k.Name, ":") {
			t.Errorf("kind name %q", k.Name)
		}
		names[k.Name] = true
		k.Set(&u, int64(i+1))
		if got, ok := KindNamed(k.Name); !ok || got.Of(u) != int64(i+1) {
			t.Errorf("KindNamed(%q)", k.Name)
		}
	}
	// Every field was reached by exactly one kind.
	v := reflect.ValueOf(u)
	seen := map[int64]bool{}
	for i := range v.NumField() {
		n := v.Field(i).Int()
		if n == 0 || seen[n] {
			t.Errorf("field %s = %d", typ.Field(i).Name, n)
		}
		seen[n] = true
	}
	if Kinds[len(Kinds)-1].Of(u.Add(u)) != 2*int64(len(Kinds)) || !u.Valid() {
		t.Error("Add or Valid")
	}
	if (Usage{Input: 1, CacheRead: 2, CacheWrite5m: 3, CacheWrite1h: 4, AudioInput: 5, Output: 100}).Prompt() != 15 {
		t.Error("Prompt counts every input kind and nothing else")
	}
}

// Reading and checking usage runs for every kind of every request: it
// must not allocate.
func TestKindsDoNotAllocate(t *testing.T) {
	u := Usage{Input: 1, Output: 2, WebSearches: 3}
	var sink int64
	if n := testing.AllocsPerRun(100, func() {
		for _, k := range Kinds {
			sink += k.Of(u)
		}
		if !u.Valid() {
			sink++
		}
	}); n != 0 {
		t.Fatalf("%v allocations per pass over the kinds", n)
	}
	_ = sink
}

func TestLogValue(t *testing.T) {
	var b strings.Builder
	slog.New(slog.NewJSONHandler(&b, nil)).Info("request", "usage", Usage{Input: 12, Output: 34})
	if !strings.Contains(b.String(), `"usage":{"input":12,"output":34}`) {
		t.Fatalf("log line %s", b.String())
	}
}

// A name with an invalid byte, a NUL or another control character is not
// clean; Clean replaces each with U+FFFD and keeps the rest.
func TestCleanName(t *testing.T) {
	for s, want := range map[string]string{
		"gpt-5":       "gpt-5",
		"模型-😀":        "模型-😀",
		"a\x00b":      "a\uFFFDb",
		"a\x1b[31mb":  "a\uFFFD[31mb",
		"a\u0085b":    "a\uFFFDb",
		"bad\xffutf8": "bad\uFFFDutf8",
		"tab\tsep":    "tab\uFFFDsep",
		"":            "",
	} {
		if got := Clean(s); got != want {
			t.Errorf("Clean(%q) = %q, want %q", s, got, want)
		}
		if CleanName(s) != (s == want) {
			t.Errorf("CleanName(%q) = %v", s, CleanName(s))
		}
	}
}

// The declarations hold together: each kind's index is its place in
// Kinds, a kind of tokens is on a side and others on none, the kinds it
// names exist, and no two share a configuration name or a catalogue field.
func TestKindsDeclarations(t *testing.T) {
	config, fields := map[string]bool{}, map[string]bool{}
	for i, k := range Kinds {
		if k.Index() != i {
			t.Errorf("%s: index %d at %d", k.Name, k.Index(), i)
		}
		if (k.Unit == Token) != (k.Side != SideNone) {
			t.Errorf("%s: unit %v on side %v; tokens have a side, other units none", k.Name, k.Unit, k.Side)
		}
		for _, other := range []string{k.Within, k.Else} {
			if _, ok := KindNamed(other); other != "" && !ok {
				t.Errorf("%s names %q, no kind", k.Name, other)
			}
		}
		if k.Priced() != (k.Config != "") {
			t.Errorf("%s: priced %v, operator's price %q", k.Name, k.Priced(), k.Config)
		}
		if k.Config != "" && config[k.Config] {
			t.Errorf("%s: configuration name %q twice", k.Name, k.Config)
		}
		config[k.Config] = true
		for _, f := range k.Catalogue {
			if fields[f] {
				t.Errorf("%s: catalogue field %s twice", k.Name, f)
			}
			fields[f] = true
		}
	}
	if got := (Usage{Input: 1, Output: 2, Reasoning: 2, CacheRead: 3, ImageInput: 4, ImageOutput: 5, WebSearches: 6, Images: 7}).Tokens(); got != 15 {
		t.Errorf("Tokens = %d, want 15", got)
	}
}
