package tokens

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
)

// TestMain makes any attempt to fetch the vocabulary over the network fail:
// the proxy variables point at a closed port and the library's download
// cache is an empty directory. The counts below then prove that the
// embedded vocabulary is used.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tiktoken-cache")
	if err != nil {
		panic(err)
	}
	for k, v := range map[string]string{
		"HTTP_PROXY":         "http://127.0.0.1:1",
		"HTTPS_PROXY":        "http://127.0.0.1:1",
		"NO_PROXY":           "",
		"TIKTOKEN_CACHE_DIR": dir,
	} {
		os.Setenv(k, v)
	}
	// The reference the counts are checked against: the library's own
	// encoder, from the same embedded vocabulary.
	tiktoken.SetBpeLoader(loader.NewOfflineLoader())
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestLoadsOffline(t *testing.T) {
	if encoder != nil {
		t.Fatal("encoder loaded before first use")
	}
	if err := Init(); err != nil {
		t.Fatalf("loading the embedded vocabulary: %v", err)
	}
	entries, err := os.ReadDir(os.Getenv("TIKTOKEN_CACHE_DIR"))
	if err != nil || len(entries) != 0 {
		t.Fatalf("the download cache was used: %v %v", entries, err)
	}
}

func TestCount(t *testing.T) {
	enc, err := tiktoken.GetEncoding(Encoding)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"Hello, world!",
		"The quick brown fox jumps over the lazy dog.",
		"日本語のテキストと emoji 😀 mixed in.",
		`{"location": "San Francisco, CA", "unit": "celsius"}`,
		"func main() {\n\tfmt.Println(\"hi\")\n}\n",
		"<|endoftext|> is plain text here",
	} {
		want := int64(len(enc.EncodeOrdinary(s)))
		if got := Count([]byte(s)); got != want {
			t.Errorf("Count(%q) = %d, want %d", s, got, want)
		}
	}
	if got := Count([]byte("hello world")); got != 2 {
		t.Errorf(`Count("hello world") = %d, want 2`, got)
	}
	if Count(nil) != 0 {
		t.Error("Count(nil) != 0")
	}
}

func TestCountLongText(t *testing.T) {
	enc, err := tiktoken.GetEncoding(Encoding)
	if err != nil {
		t.Fatal(err)
	}
	// Windowing changes the count by at most about a token per window.
	text := strings.Repeat("Streaming replies are metered by the gateway, which counts tokens only as an estimate. ", 200)
	want := int64(len(enc.EncodeOrdinary(text)))
	got := Count([]byte(text))
	if diff := got - want; diff < 0 || diff > int64(len(text)/window)+1 {
		t.Errorf("Count = %d, want about %d", got, want)
	}
}

func TestCountPathological(t *testing.T) {
	// Without windows these take minutes: byte-pair merging is quadratic in
	// the length of a word.
	for _, text := range [][]byte{
		bytes.Repeat([]byte("x"), 1<<18),
		bytes.Repeat([]byte(" "), 1<<18),
		bytes.Repeat([]byte("é"), 1<<17),
		bytes.Repeat([]byte("\xff"), 1<<16),
	} {
		if n := Count(text); n <= 0 || n > int64(len(text)) {
			t.Errorf("Count of %d bytes = %d", len(text), n)
		}
	}
}

func TestCut(t *testing.T) {
	tests := []struct {
		text string
		n    int
		want int
	}{
		{"short", 10, 5},
		{"hello world again", 12, 11}, // before the space preceding "again"
		{"aaaaaaaaaa", 4, 4},
		{"ab\u00e9cd", 3, 2}, // not inside the two-byte é
		{"x", 0, 1},
	}
	for _, tt := range tests {
		if got := cut([]byte(tt.text), tt.n); got != tt.want {
			t.Errorf("cut(%q, %d) = %d, want %d", tt.text, tt.n, got, tt.want)
		}
	}
}

func TestTallyLazy(t *testing.T) {
	text := "One two three four five six seven eight nine ten. "
	var tl Tally
	for range 10 {
		tl.Write([]byte(text))
	}
	if want := Count([]byte(strings.Repeat(text, 10))); tl.Tokens() != want {
		t.Errorf("under the limit: %d, want %d", tl.Tokens(), want)
	}
	small := Tally{Limit: len(text) * 2}
	for range 10 {
		small.Write([]byte(text))
	}
	// The held text is two copies; the other eight are extrapolated.
	if want := 5 * Count([]byte(text+text)); small.Tokens() != want {
		t.Errorf("extrapolated: %d, want %d", small.Tokens(), want)
	}
	if small.Len() != int64(10*len(text)) || len(small.buf) != 2*len(text) {
		t.Errorf("Len %d, held %d", small.Len(), len(small.buf))
	}
}

func TestTallyEager(t *testing.T) {
	text := strings.Repeat("Counting in windows keeps memory bounded while streaming. ", 300)
	tl := Tally{Limit: 1024, Eager: true}
	for i := 0; i < len(text); i += 37 {
		tl.Write([]byte(text[i:min(i+37, len(text))]))
	}
	if cap(tl.buf) > 1024 {
		t.Errorf("held %d bytes", cap(tl.buf))
	}
	want := Count([]byte(text))
	if got := tl.Tokens(); got < want-want/100 || got > want+want/100 {
		t.Errorf("eager tally %d, want about %d", got, want)
	}
}

func TestTallyWriteDoesNotAllocate(t *testing.T) {
	var tl Tally
	piece := []byte("a delta of text ")
	tl.Write(piece)
	allocs := testing.AllocsPerRun(1000, func() { tl.Write(piece) })
	if allocs > 0.01 { // the buffer grows a few times, then never
		t.Fatalf("%v allocations per write", allocs)
	}
}

func BenchmarkCount(b *testing.B) {
	for _, size := range []int{64, 4 << 10} {
		text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog. ", size/45+1)[:size])
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			Count(text)
			b.ReportAllocs()
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				Count(text)
			}
		})
	}
}

// The messages-format ratio and what the o200k tokenizer gives on English
// prose, for the comparison stated at MessagesRatio.
func TestMessagesRatio(t *testing.T) {
	r := MessagesRatio
	for _, tt := range []struct{ n, want int64 }{{0, 0}, {1, 1}, {7, 2}, {8, 3}, {3500, 1000}} {
		if got := r.Count(tt.n); got != tt.want {
			t.Errorf("Count(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
	text := []byte(strings.Repeat("The gateway meters every streamed reply without holding it, and charges what the vendor reports. ", 20))
	o200k := float64(len(text)) / float64(Count(text))
	t.Logf("o200k: %.2f bytes a token; messages ratio: %.2f", o200k, float64(r.Bytes)/float64(r.N))
	if o200k <= 3.5 {
		t.Errorf("o200k counts %.2f bytes a token on English prose: the messages ratio would not be the dearer estimate", o200k)
	}
	var tl Tally
	tl.Ratio = r
	tl.Write(text)
	if tl.Tokens() != r.Count(int64(len(text))) || cap(tl.buf) != 0 {
		t.Errorf("ratio tally: %d tokens, %d bytes held", tl.Tokens(), cap(tl.buf))
	}
}

// The encoder counts exactly what the reference library encodes, on random
// text mixing scripts, digits, punctuation, whitespace, repeated letters
// (which exercise the leftmost-of-equal-ranks rule) and invalid UTF-8.
func TestCountMatchesReference(t *testing.T) {
	enc, err := tiktoken.GetEncoding(Encoding)
	if err != nil {
		t.Fatal(err)
	}
	parts := []string{
		"the", " The", " quick", "brown", " fox", "'s", "'LL", " don't", "aaaaaaa", "ééé", "zzzzzz",
		"12345678", " 3.14159", "日本語", "テキスト", "😀", "🇫🇷", "Ünïcödé", "مرحبا", "Привет", "\u0301",
		" ", "  ", "\t", "\n", "\r\n", "\n\n\n", "   \n", "{\"a\": [1, 2]}", "<|endoftext|>", "!!!", "...",
		"--", "/*", "*/", "\xff", "\xc3", "https://example.com/x?y=1", "CamelCaseWord", "snake_case_word",
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		var b strings.Builder
		for range 1 + rng.IntN(40) {
			b.WriteString(parts[rng.IntN(len(parts))])
		}
		s := b.String()
		if len(s) > window {
			s = s[:window] // Count windows longer text; the reference does not
		}
		want := int64(len(enc.EncodeOrdinary(s)))
		if got := Count([]byte(s)); got != want {
			t.Fatalf("Count(%q) = %d, want %d", s, got, want)
		}
	}
}
