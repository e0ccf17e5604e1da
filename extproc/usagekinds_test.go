package extproc

import (
	"testing"

	"github.com/modelgateway/gateway/internal/usage"
)

// boundedWithin are the usage kinds capUsage bounds by another kind, which
// contains them, rather than by the request's bounds: a kind cut to its
// container is not a vendor's figure beyond what the request allowed.
var boundedWithin = map[string]string{"reasoning": "output"}

// capUsage bounds every usage kind on its own: each kind, alone and far
// beyond what the request allowed, is cut and reported, unless listed in
// boundedWithin. A kind added to internal/usage fails here until capUsage
// bounds it.
func TestCapUsageBoundsUsageKinds(t *testing.T) {
	const input, output, seconds = 100, 200, 300
	for _, k := range usage.Kinds {
		var u usage.Usage
		k.Set(&u, 1<<62)
		got, ok := capUsage(u, usageCaps{input, output, seconds})
		if within, listed := boundedWithin[k.Name]; listed {
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
		if ok || k.Of(got) > max(input, output, seconds, maxToolCalls) {
			t.Errorf("%s: %d → %d, ok %v; want it cut and reported", k.Name, k.Of(u), k.Of(got), ok)
		}
	}
}
