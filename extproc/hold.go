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
	return usageCaps{input: max(b.Input, window), output: b.Output, seconds: b.Seconds, images: b.Images}
}

// usageCaps are the most usage a reply can claim: tokens on each side,
// seconds of audio and images.
type usageCaps struct{ input, output, seconds, images int64 }

// capUsage limits a reply's usage to what its request allowed (its bounds):
// the token kinds of each side (usage.Kind.Side) together to that side's
// bound (the hold covers no more), seconds and images to theirs, each kind
// of tool call to maxToolCalls, and a kind within another to it. A
// vendor's figure beyond them is not believed: ok is false when anything
// was cut.
func capUsage(u usage.Usage, c usageCaps) (capped usage.Usage, ok bool) {
	ok = true
	for _, k := range usage.Kinds {
		if !k.Priced() {
			continue
		}
		var bound *int64
		switch k.Unit {
		case usage.Token:
			bound = &c.output
			if k.Side == usage.SideInput {
				bound = &c.input
			}
		case usage.Second:
			bound = &c.seconds
		case usage.Image:
			bound = &c.images
		default:
			calls := int64(maxToolCalls)
			bound = &calls
		}
		if v := k.Of(u); v > *bound {
			k.Set(&u, *bound)
			ok = false
		}
		*bound -= k.Of(u)
	}
	for _, k := range usage.Kinds {
		if k.Within == "" {
			continue // most kinds: no container to look up by name
		}
		if c, found := usage.KindNamed(k.Within); found {
			k.Set(&u, min(k.Of(u), c.Of(u))) // inside its container
		}
	}
	return u, ok
}
