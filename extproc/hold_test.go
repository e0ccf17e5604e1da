package extproc

import (
	"testing"

	"github.com/modelgateway/gateway/internal/usage"
)

// Usage beyond what the request allowed is capped at its bounds, each side
// as a whole, and reported.
func TestCapUsage(t *testing.T) {
	u := usage.Usage{Input: 50, CacheRead: 80, Output: 9e18, Reasoning: 9e18, AudioOutput: 5, WebSearches: 2}
	got, ok := capUsage(u, usageCaps{100, 200, 0, 0})
	want := usage.Usage{Input: 50, CacheRead: 50, Output: 200, Reasoning: 200, WebSearches: 2}
	if ok || got != want {
		t.Errorf("capped %+v, %v; want %+v, false", got, ok, want)
	}
	if got, ok := capUsage(usage.Usage{Input: 100, Output: 150, AudioOutput: 50}, usageCaps{100, 200, 0, 0}); !ok || got.Output != 150 {
		t.Errorf("within bounds: %+v, %v", got, ok)
	}
	// Every kind is bounded, whichever it is: a kind added to internal/usage
	// fails here until capUsage bounds it.
	var huge usage.Usage
	for _, k := range usage.Kinds {
		k.Set(&huge, 9e18)
	}
	got, _ = capUsage(huge, usageCaps{100, 200, 300, 400})
	for _, k := range usage.Kinds {
		if k.Of(got) > maxToolCalls {
			t.Errorf("%s not capped: %d", k.Name, k.Of(got))
		}
	}
}
