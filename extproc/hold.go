package extproc

import (
	"math"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// defaultHoldOutput is the output a request without max_tokens is held for
// when the catalogue gives no maximum output for its model.
const defaultHoldOutput = 128_000

// defaultHoldInput is the context a request continuing a stored response
// (previous_response_id) is held for when the catalogue gives no input
// window for its model.
const defaultHoldInput = 1_000_000

// defaultHoldCalls is the number of built-in tool calls a request offering
// paid tools without max_tool_calls is held for. A reply making more is
// still charged in full: the hold bounds the balance check, not the charge.
const defaultHoldCalls = 10

// toolPromptAllowance covers the input a vendor adds to a request offering
// tools (its tool-use system prompt, a few hundred tokens per request).
const toolPromptAllowance = 1000

// holdOf returns a request's hold: the most its settlement can charge.
//
// Input: every body byte counts as one token (a token is never shorter than
// a byte), plus toolPromptAllowance when the request offers tools. Output:
// max_tokens (or the model's maximum output, or defaultHoldOutput) for each
// of the n choices asked for. Each side is priced at the dearest price the
// request could trigger (pricing.Model.Hold: any service tier, any
// long-context tier, cache writes of either lifetime, audio), so neither the
// prompt's length nor the tier the vendor reports can make the charge exceed
// it.
//
// The responses operation adds two bounds. A request continuing a stored
// response (previous_response_id) carries context the body does not show:
// its input is held for the model's whole input window (defaultHoldInput
// when the catalogue gives none), not the stored response's recorded size,
// which later turns and truncation change. Built-in tools with a per-call
// fee, when offered, are held for max_tool_calls calls (defaultHoldCalls
// without it) at the dearest per-call price. Not covered: the chat
// formats' web-search fees and media sent by URL (see docs/billing.md and
// docs/responses.md).
func holdOf(price *pricing.Model, req format.Request, b bounds) int64 {
	hold := price.Hold(b.input, b.output)
	if req.PaidTools {
		calls := int64(defaultHoldCalls)
		if req.HasMaxToolCalls {
			calls = req.MaxToolCalls
		}
		hold += price.CallHold(calls)
	}
	return hold
}

// bounds are a request's input and output token bounds (see holdOf),
// fixed at admission: its hold, its share of a tokens-per-minute limit, its
// wait for a reply and the cap on the usage it is charged all follow from
// them.
type bounds struct{ input, output int64 }

// total is the most tokens (input + output) the request can use: what it
// counts towards a tokens-per-minute limit while it runs.
func (b bounds) total() int64 {
	if b.output > math.MaxInt64-b.input {
		return math.MaxInt64
	}
	return b.input + b.output
}

// tokenBounds are a request's input and output bounds (see holdOf).
func tokenBounds(price *pricing.Model, req format.Request, bodyBytes int64) bounds {
	var input, output int64
	maxOut := price.MaxOutput
	if maxOut == 0 {
		maxOut = defaultHoldOutput
	}
	if req.HasMaxTokens {
		maxOut = req.MaxTokens
	}
	input = max(bodyBytes, 0)
	if req.HasTools {
		input += toolPromptAllowance
	}
	if req.PreviousResponseID != "" {
		window := price.MaxInput
		if window == 0 {
			window = defaultHoldInput
		}
		input += window
	}
	choices := max(req.Choices, 1)
	output = max(maxOut, 0)
	if output > math.MaxInt64/choices {
		output = math.MaxInt64 // far beyond any balance; Hold caps the cost
	} else {
		output *= choices
	}
	return bounds{input, output}
}

// maxToolCalls bounds each kind of built-in tool call (web searches, file
// searches, code interpreter sessions, image generations) one reply is
// charged for; vendors run a few dozen at most.
const maxToolCalls = 1000

// defaultMaxInput is the context window assumed for a model the catalogue
// gives none for: far above any model's today.
const defaultMaxInput = 10_000_000

// usageBounds are the most usage a reply to the request can claim: output
// as the hold counts it (max_tokens × n); input the larger of the hold's
// (the body) and the model's context window, since files, images and
// documents referenced by id or URL legitimately bring more input than the
// body's bytes.
func usageBounds(price *pricing.Model, b bounds) (input, output int64) {
	window := price.MaxInput
	if window == 0 {
		window = defaultMaxInput
	}
	return max(b.input, window), b.output
}

// capUsage limits a reply's usage to what its request allowed (tokenBounds):
// input-side kinds together to input, output-side kinds together to output
// (the hold covers no more), each kind of tool call to maxToolCalls. A vendor's
// figure beyond them is not believed: ok is false when anything was cut.
func capUsage(u usage.Usage, input, output int64) (capped usage.Usage, ok bool) {
	ok = true
	take := func(v *int64, left *int64) {
		if *v > *left {
			*v, ok = *left, false
		}
		*left -= *v
	}
	for _, v := range []*int64{&u.Input, &u.CacheRead, &u.CacheWrite5m, &u.CacheWrite1h, &u.AudioInput} {
		take(v, &input)
	}
	for _, v := range []*int64{&u.Output, &u.AudioOutput} {
		take(v, &output)
	}
	u.Reasoning = min(u.Reasoning, u.Output) // inside output
	for _, v := range []*int64{&u.WebSearches, &u.FileSearches, &u.CodeInterpreter, &u.ImageGenerations} {
		if *v > maxToolCalls {
			*v, ok = maxToolCalls, false
		}
	}
	return u, ok
}
