package extproc

import (
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

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
func usageBounds(price *pricing.Model, b operation.Bounds) usageCaps {
	window := price.MaxInput
	if window == 0 {
		window = defaultMaxInput
	}
	return usageCaps{input: max(b.Input, window), output: b.Output, seconds: b.Seconds}
}

// usageCaps are the most usage a reply can claim: tokens on each side, and
// seconds of audio.
type usageCaps struct{ input, output, seconds int64 }

// capUsage limits a reply's usage to what its request allowed (its bounds):
// input-side kinds together to input, output-side kinds together to output
// (the hold covers no more), each kind of tool call to maxToolCalls. A vendor's
// figure beyond them is not believed: ok is false when anything was cut.
func capUsage(u usage.Usage, c usageCaps) (capped usage.Usage, ok bool) {
	ok = true
	input, output := c.input, c.output
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
	take(&u.AudioSeconds, &c.seconds)
	for _, v := range []*int64{&u.WebSearches, &u.FileSearches, &u.CodeInterpreter, &u.ImageGenerations} {
		if *v > maxToolCalls {
			*v, ok = maxToolCalls, false
		}
	}
	return u, ok
}
