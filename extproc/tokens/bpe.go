package tokens

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// o200kPattern splits text into the pieces that byte-pair encoding works on
// (words with their leading space or punctuation, runs of up to three
// digits, runs of whitespace). It is part of the encoding's published
// definition (with the vocabulary): counts match the vendor's only with
// exactly this pattern.
var o200kPattern = strings.Join([]string{
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`\p{N}{1,3}`,
	` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
	`\s*[\r\n]+`,
	`\s+(?!\S)`,
	`\s+`,
}, "|")

// bpe is a byte-pair encoder that counts tokens. Its vocabulary holds no
// pointers: token r is blob[off[r]:off[r+1]], and slots is an
// open-addressing hash table of rank+1 (0: empty).
type bpe struct {
	blob  []byte
	off   []uint32
	slots []uint32
	seed  maphash.Seed
	split *regexp2.Regexp
}

// loadO200k reads the embedded o200k_base vocabulary: one token per line,
// base64 then its rank, ranks 0, 1, 2, … in order.
func loadO200k() (*bpe, error) {
	data, err := assets.Assets.ReadFile("o200k_base.tiktoken")
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	split, err := regexp2.Compile(o200kPattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("tokens: %w", err)
	}
	n := bytes.Count(data, []byte{'\n'}) + 1
	b := &bpe{
		blob:  make([]byte, 0, len(data)*3/4),
		off:   make([]uint32, 1, n+1),
		seed:  maphash.MakeSeed(),
		split: split,
	}
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\n")
		if len(line) == 0 {
			continue
		}
		tok, rank, ok := bytes.Cut(line, []byte{' '})
		r, err := strconv.Atoi(string(rank))
		if !ok || err != nil || r != len(b.off)-1 {
			return nil, fmt.Errorf("tokens: vocabulary line %d: want rank %d", len(b.off), len(b.off)-1)
		}
		b.blob, err = base64.StdEncoding.AppendDecode(b.blob, tok)
		if err != nil {
			return nil, fmt.Errorf("tokens: vocabulary rank %d: %w", r, err)
		}
		b.off = append(b.off, uint32(len(b.blob)))
	}
	tokens := len(b.off) - 1
	if tokens < 256 {
		return nil, errors.New("tokens: vocabulary too small")
	}
	size := 1
	for size < 2*tokens {
		size <<= 1
	}
	b.slots = make([]uint32, size)
	for r := range tokens {
		tok := b.token(r)
		i := b.slot(tok)
		for b.slots[i] != 0 {
			if bytes.Equal(b.token(int(b.slots[i]-1)), tok) {
				return nil, fmt.Errorf("tokens: vocabulary lists %q twice", tok)
			}
			i = (i + 1) & (len(b.slots) - 1)
		}
		b.slots[i] = uint32(r + 1)
	}
	return b, nil
}

func (b *bpe) token(r int) []byte { return b.blob[b.off[r]:b.off[r+1]] }

func (b *bpe) slot(s []byte) int {
	return int(maphash.Bytes(b.seed, s) & uint64(len(b.slots)-1))
}

// rank returns the rank of the token spelled s, or math.MaxInt when s is no
// token.
func (b *bpe) rank(s []byte) int {
	for i := b.slot(s); b.slots[i] != 0; i = (i + 1) & (len(b.slots) - 1) {
		if r := int(b.slots[i] - 1); bytes.Equal(b.token(r), s) {
			return r
		}
	}
	return math.MaxInt
}

// count returns the number of tokens text encodes to.
func (b *bpe) count(text string) int64 {
	// The pattern works on runes: invalid UTF-8 becomes U+FFFD here, as
	// it does for every tokenizer of this encoding.
	runes := []rune(text)
	var n int64
	var piece []byte
	var marks []int
	var ranks []int
	m, _ := b.split.FindRunesMatch(runes)
	for m != nil {
		piece = append(piece[:0], string(runes[m.Index:m.Index+m.Length])...)
		n += int64(b.merge(piece, &marks, &ranks))
		m, _ = b.split.FindNextMatch(m)
	}
	return n
}

// merge returns the number of tokens piece encodes to. It starts from
// single bytes and repeatedly joins the adjacent pair that forms the token
// of lowest rank (the leftmost of equals) until no pair forms a token.
// marks and ranks are scratch space.
func (b *bpe) merge(piece []byte, marks, ranks *[]int) int {
	if len(piece) <= 1 || b.rank(piece) != math.MaxInt {
		return 1
	}
	// Token i spans piece[mk[i]:mk[i+1]]; rk[i] is the rank of tokens i and
	// i+1 joined.
	mk := (*marks)[:0]
	for i := 0; i <= len(piece); i++ {
		mk = append(mk, i)
	}
	rk := (*ranks)[:0]
	for i := 0; i+1 < len(piece); i++ {
		rk = append(rk, b.rank(piece[i:i+2]))
	}
	for len(rk) > 0 {
		best := 0
		for i, r := range rk {
			if r < rk[best] {
				best = i
			}
		}
		if rk[best] == math.MaxInt {
			break
		}
		// Join tokens best and best+1: drop the mark between them and
		// the pair rank that ended there.
		mk = append(mk[:best+1], mk[best+2:]...)
		rk = append(rk[:best], rk[best+1:]...)
		if best < len(rk) {
			rk[best] = b.rank(piece[mk[best]:mk[best+2]])
		}
		if best > 0 {
			rk[best-1] = b.rank(piece[mk[best-1]:mk[best+1]])
		}
	}
	*marks, *ranks = mk, rk
	return len(mk) - 1
}
