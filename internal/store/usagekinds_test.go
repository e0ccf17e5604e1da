package store

import (
	"testing"

	"github.com/modelgateway/gateway/internal/usage"
)

// Usage.Tokens, what a tokens-per-minute limit counts (settleCall),
// counts every priced kind measured in tokens, of either side, and nothing
// else (reasoning is inside output; tool calls, seconds of audio
// and images are not tokens), as the kinds' declarations say: a kind
// declared in internal/usage is counted by its unit, or fails here.
func TestTokensCountEveryTokenKind(t *testing.T) {
	for _, k := range usage.Kinds {
		var u usage.Usage
		k.Set(&u, 1)
		want := k.Priced() && k.Unit == usage.Token
		if got := u.Tokens() == 1; got != want {
			t.Errorf("%s: counted %v, want %v", k.Name, got, want)
		}
		if want && k.Side != usage.SideInput && k.Side != usage.SideOutput {
			t.Errorf("%s: a token kind on no side", k.Name)
		}
	}
}
