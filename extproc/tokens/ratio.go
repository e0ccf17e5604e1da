package tokens

// Ratio estimates tokens from the length of UTF-8 text, for vendors whose
// tokenizer is not public: Bytes bytes of text make N tokens, rounded up.
type Ratio struct {
	Bytes, N int64
}

// MessagesRatio is the estimate for messages-format (Anthropic) text: 7 bytes
// per 2 tokens, 3.5 bytes a token. Anthropic documents a Claude token as
// about 3.5 English characters; its tokenizer is not published, and the
// o200k count under-estimates Claude text (o200k counts 5.7 bytes a token on
// the English sentence of TestMessagesRatio, Claude's about 3.5). Rounding up
// leans towards billing what was sent. For text of multi-byte characters
// (CJK) the estimate is lower than the vendor's count.
var MessagesRatio = Ratio{Bytes: 7, N: 2}

func (r Ratio) valid() bool { return r.Bytes > 0 && r.N > 0 }

// Count returns the estimated tokens of n bytes of text.
func (r Ratio) Count(n int64) int64 {
	if n <= 0 || !r.valid() {
		return 0
	}
	return (n*r.N + r.Bytes - 1) / r.Bytes
}
