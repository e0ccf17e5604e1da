package pricing

import (
	"testing"

	"github.com/modelgateway/gateway/internal/usage"
)

// The hold prices each priced usage kind on exactly one side: the input
// side (Hold's body bytes), the output side (Hold's maxOutput) or per call
// (CallHold) or per second (SecondsHold); the input side is what Usage.Prompt measures for long-context
// tiers. A kind added to internal/usage fails here until Hold or perCall
// knows it: a kind on no side would be held for nothing.
func TestHoldCoversEveryPricedKind(t *testing.T) {
	for _, k := range usage.Kinds {
		m := &Model{Name: "m", prices: map[PriceKey]int64{{Kind: k.Name}: 1_000_000}}
		in := m.Hold(1_000_000, 0) > 0
		out := m.Hold(0, 1_000_000) > 0
		call := m.CallHold(1_000_000) > 0
		sec := m.SecondsHold(1_000_000) > 0
		if sec != PerSecond(k.Name) {
			t.Errorf("%s: SecondsHold %v, PerSecond %v", k.Name, sec, PerSecond(k.Name))
		}
		if call != PerCall(k.Name) {
			t.Errorf("%s: CallHold %v, PerCall %v", k.Name, call, PerCall(k.Name))
		}
		sides := 0
		for _, b := range []bool{in, out, call, sec} {
			if b {
				sides++
			}
		}
		if want := map[bool]int{true: 1, false: 0}[k.Priced]; sides != want {
			t.Errorf("%s (priced %v): held on %d sides (input %v, output %v, per call %v, per second %v), want %d", k.Name, k.Priced, sides, in, out, call, sec, want)
		}
		var u usage.Usage
		k.Set(&u, 1)
		if prompt := u.Prompt() == 1; prompt != in {
			t.Errorf("%s: in the prompt %v, held as input %v", k.Name, prompt, in)
		}
	}
}
