package extproc

import (
	"testing"

	"github.com/modelgateway/gateway/internal/usage"
)

// capUsage bounds every usage kind on its own: each kind, alone and far
// beyond what the request allowed, is cut to its side's or unit's bound
// and reported, unless it is within another (usage.Kind.Within): a kind
// cut to its container is not a vendor's figure beyond what the request
// allowed.
func TestCapUsageBoundsUsageKinds(t *testing.T) {
	const input, output, seconds, images = 100, 200, 300, 400
	for _, k := range usage.Kinds {
		var u usage.Usage
		k.Set(&u, 1<<62)
		got, ok := capUsage(u, usageCaps{input, output, seconds, images})
		if within := k.Within; within != "" {
			c, found := usage.KindNamed(within)
			if !found {
				t.Fatalf("%s: bounded within %q, no usage kind", k.Name, within)
			}
			// Its container is zero here, and so it becomes.
			if k.Of(got) != c.Of(got) {
				t.Errorf("%s = %d, not bounded by %s = %d", k.Name, k.Of(got), within, c.Of(got))
			}
			continue
		}
		var bound int64
		switch {
		case k.Unit == usage.Token && k.Side == usage.SideInput:
			bound = input
		case k.Unit == usage.Token:
			bound = output
		case k.Unit == usage.Second:
			bound = seconds
		case k.Unit == usage.Image:
			bound = images
		default:
			bound = maxToolCalls
		}
		if ok || k.Of(got) != bound {
			t.Errorf("%s: %d → %d, ok %v; want it cut and reported", k.Name, k.Of(u), k.Of(got), ok)
		}
	}
}
