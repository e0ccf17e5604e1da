package format

import (
	"slices"
	"testing"
)

func TestEveryKindHasStatusAndReason(t *testing.T) {
	for k := range ErrorKind(NumErrorKinds) {
		if s := k.Status(); s < 400 || s > 599 || k.Reason() == "" {
			t.Errorf("kind %d: status %d, reason %q", k, s, k.Reason())
		}
		if !slices.Contains(Reasons(), k.Reason()) {
			t.Errorf("kind %d: reason %q not among Reasons()", k, k.Reason())
		}
	}
	if got := Invalid("model", "m"); got.Status() != 400 || got.Param != "model" {
		t.Errorf("Invalid: %+v", got)
	}
}
