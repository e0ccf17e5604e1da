package main

import (
	"bytes"
	"encoding/json"
	"unicode"
	"unicode/utf8"
)

// The fake's replies are deterministic functions of the request body and
// the controls, so that tests can assert exact contents and token counts:
//
//   - input tokens  = ceil(len(body)/8), never more than the body's bytes;
//   - a text reply is "Echo:" followed by words of the last user message,
//     cycled (or filler words when it has none), reply_words words in all,
//     cut to the request's token limit; output tokens = number of words;
//   - with the tool_call control on, a request that offers tools gets a
//     call of the first tool with small fixed arguments, unless its last
//     turn returns a tool result; output tokens = number of argument
//     fragments streamed (pieces of at most 8 bytes).

// fillerWords stand in for the user's words when the last user message has
// no text (for example a bare tool result or an image).
var fillerWords = []string{"lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit"}

const (
	// maxWordBytes caps each echoed word, so that a huge unbroken string
	// in a request does not become a huge reply.
	maxWordBytes = 32
	// fragmentBytes is the size of the tool argument pieces streamed.
	fragmentBytes = 8
)

// reply is what the fake answers to one generation request.
type reply struct {
	words     []string // text reply, one word per element; nil for a tool call
	truncated bool     // the token limit cut the text short
	tool      *toolCall

	choices         int // chat completions' n; 0 or 1: one
	inputTokens     int
	outputTokens    int // visible output: words or argument fragments
	reasoningTokens int // chat completions only: thought, never shown, billed as output
	cacheRead       int
	cacheWrite      int
	cacheWrite1h    int
	serviceTier     string // "" for the vendor's default
	audioIn         int    // chat completions: inside prompt_tokens
	audioOut        int    // chat completions: inside completion_tokens
	webSearches     int    // messages: server-side web searches
}

// toolCall is a call of a tool the request offered.
type toolCall struct {
	name      string
	arguments []byte   // JSON object
	fragments [][]byte // arguments, cut for streaming
}

// text returns the reply text: the words joined by single spaces.
func (rp *reply) text() string {
	n := len(rp.words) - 1
	for _, w := range rp.words {
		n += len(w)
	}
	b := make([]byte, 0, max(n, 0))
	for i, w := range rp.words {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, w...)
	}
	return string(b)
}

// planReply decides the reply to a request whose body is body and whose
// messages are msgs. limit is the request's output token limit (0: none);
// tool is the first tool offered (nil: none), called when the tool_call
// control is on and the last turn is not a tool result.
func planReply(body []byte, msgs []message, limit int, tool *toolCall, ctl *Controls) *reply {
	userText, afterTool := lastTurn(msgs)
	rp := &reply{
		inputTokens:     inputTokens(body),
		reasoningTokens: ctl.ReasoningTokens,
		cacheRead:       ctl.CacheReadTokens,
		cacheWrite:      ctl.CacheWriteTokens,
		cacheWrite1h:    ctl.CacheWrite1hTokens,
		serviceTier:     ctl.ServiceTier,
		audioIn:         ctl.AudioInputTokens,
		audioOut:        ctl.AudioOutputTokens,
		webSearches:     ctl.WebSearchRequests,
	}
	if ctl.InputTokens > 0 {
		rp.inputTokens = ctl.InputTokens
	}
	if tool != nil {
		rp.inputTokens += ctl.ToolPromptTokens
	}
	if tool != nil && ctl.ToolCall && !afterTool {
		tool.fragments = fragments(tool.arguments, fragmentBytes)
		rp.tool = tool
		rp.outputTokens = len(tool.fragments)
		return rp
	}
	n := ctl.replyWords()
	if limit > 0 && limit < n {
		n, rp.truncated = limit, true
	}
	rp.words = replyWords(userText, n)
	rp.outputTokens = len(rp.words)
	if ctl.OutputTokens > 0 {
		rp.outputTokens = ctl.OutputTokens
	}
	return rp
}

// inputTokens is the fake's token count of a request body: ceil(len/8).
func inputTokens(body []byte) int {
	return (len(body) + 7) / 8
}

// replyWords returns n words: "Echo:" and then the words of text, cycled.
func replyWords(text string, n int) []string {
	if n <= 0 {
		return nil
	}
	out := make([]string, 1, n)
	out[0] = "Echo:"
	// Scan lazily: only as many words as the reply needs.
	for i := 0; i < len(text) && len(out) < n; {
		r, size := utf8.DecodeRuneInString(text[i:])
		if unicode.IsSpace(r) {
			i += size
			continue
		}
		start := i
		for i < len(text) {
			r, size := utf8.DecodeRuneInString(text[i:])
			if unicode.IsSpace(r) {
				break
			}
			i += size
		}
		out = append(out, capWord(text[start:i]))
	}
	src := out[1:]
	if len(src) == 0 {
		src = fillerWords
	}
	for i := 0; len(out) < n; i++ {
		out = append(out, src[i%len(src)])
	}
	return out
}

// capWord cuts w to at most maxWordBytes, on a rune boundary.
func capWord(w string) string {
	if len(w) <= maxWordBytes {
		return w
	}
	end := maxWordBytes
	for end > 0 && !utf8.RuneStart(w[end]) {
		end--
	}
	return w[:end]
}

// fragments cuts b into pieces of at most size bytes, on rune boundaries.
func fragments(b []byte, size int) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		end := min(size, len(b))
		for end < len(b) && end > 1 && !utf8.RuneStart(b[end]) {
			end--
		}
		out = append(out, b[:end])
		b = b[end:]
	}
	return out
}

// contentText extracts the text of a message's content, which both vendors
// accept either as a string or as an array of typed parts. Text parts are
// joined with spaces; the content of tool results is searched too.
func contentText(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return ""
	}
	switch raw[0] {
	case '"':
		var s string
		json.Unmarshal(raw, &s)
		return s
	case '[':
		var parts []struct {
			Type    string          `json:"type"`
			Text    string          `json:"text"`
			Content json.RawMessage `json:"content"`
		}
		json.Unmarshal(raw, &parts)
		var b []byte
		for _, p := range parts {
			t := p.Text
			if p.Type == "tool_result" {
				t = contentText(p.Content)
			} else if p.Type != "text" && p.Type != "input_text" {
				continue
			}
			if t == "" {
				continue
			}
			if len(b) > 0 {
				b = append(b, ' ')
			}
			b = append(b, t...)
		}
		return string(b)
	}
	return ""
}

// message is the part of a request message the fake looks at, the same
// for both vendors.
type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// lastTurn returns the text the reply echoes: that of the last message
// from the user side, role "user" or (chat completions) "tool". afterTool reports that
// this message returns a tool result, as a "tool" message or a user message
// with a tool_result block; the fake then answers in text even with the
// tool_call control on, so that client tool loops end as with a real model.
func lastTurn(msgs []message) (text string, afterTool bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		switch msgs[i].Role {
		case "tool":
			return contentText(msgs[i].Content), true
		case "user":
			text, afterTool = contentText(msgs[i].Content), hasToolResult(msgs[i].Content)
			return text, afterTool
		}
	}
	return "", false
}

// hasToolResult reports whether content is an array holding a tool_result
// block.
func hasToolResult(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 || raw[0] != '[' || !bytes.Contains(raw, []byte("tool_result")) {
		return false
	}
	var parts []struct {
		Type string `json:"type"`
	}
	json.Unmarshal(raw, &parts)
	for _, p := range parts {
		if p.Type == "tool_result" {
			return true
		}
	}
	return false
}

// defaultArguments are the tool arguments when the schema does not give a
// simple list of required properties.
var defaultArguments = []byte(`{"location":"Paris"}`)

// toolArguments builds small arguments that satisfy a simple JSON schema:
// each required property gets the first value of its enum or a fixed value
// of its type ("Paris", 1, true, [], {}). Anything else gets
// defaultArguments, which the SDKs parse all the same.
func toolArguments(schema json.RawMessage) []byte {
	var s struct {
		Properties map[string]struct {
			Type json.RawMessage   `json:"type"`
			Enum []json.RawMessage `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil || len(s.Required) == 0 {
		return defaultArguments
	}
	b := []byte{'{'}
	for i, name := range s.Required {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, name)
		b = append(b, ':')
		p := s.Properties[name]
		if len(p.Enum) > 0 {
			var c bytes.Buffer
			if json.Compact(&c, p.Enum[0]) == nil {
				b = append(b, c.Bytes()...)
				continue
			}
		}
		switch schemaType(p.Type) {
		case "integer", "number":
			b = append(b, '1')
		case "boolean":
			b = append(b, "true"...)
		case "array":
			b = append(b, "[]"...)
		case "object":
			b = append(b, "{}"...)
		case "null":
			b = append(b, "null"...)
		default:
			b = append(b, `"Paris"`...)
		}
	}
	return append(b, '}')
}

// schemaType returns a schema's type, which may be a string or a list of
// strings (then the first that is not "null").
func schemaType(raw json.RawMessage) string {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return one
	}
	var many []string
	json.Unmarshal(raw, &many)
	for _, t := range many {
		if t != "null" {
			return t
		}
	}
	return ""
}

// appendJSONString appends s as a JSON string. The hot path builds small
// SSE events by hand with it instead of reflecting over structs.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	b = appendEscaped(b, s)
	return append(b, '"')
}

// appendEscaped appends s escaped for use inside a JSON string, without the
// quotes.
func appendEscaped(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but break JavaScript parsers
		// that some SSE consumers use; escape them as encoding/json does.
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(b, s[start:]...)
}
