package store

import (
	"testing"

	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// Tokens counts every kind priced per token and nothing else (reasoning is
// inside output; tool calls and seconds of audio are not tokens): a kind added to internal/usage
// fails here until Tokens decides.
func TestTokensCountEveryTokenKind(t *testing.T) {
	for _, k := range usage.Kinds {
		var u usage.Usage
		k.Set(&u, 1)
		if got, want := Tokens(u) == 1, k.Priced && !pricing.PerCall(k.Name) && !pricing.PerSecond(k.Name); got != want {
			t.Errorf("%s: counted %v, want %v", k.Name, got, want)
		}
	}
}
