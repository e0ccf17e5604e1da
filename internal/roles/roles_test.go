package roles

import (
	"slices"
	"testing"
)

func TestRoles(t *testing.T) {
	for _, r := range append(slices.Clone(Customer), OperatorSide...) {
		if !Valid(r) {
			t.Errorf("%s is not valid", r)
		}
	}
	if Valid("root") || Valid("") {
		t.Error("a role no console has is valid")
	}
	if !(Set{Owner, Billing}).Allows([]Role{Viewer, Billing}) || (Set{Owner}).Allows([]Role{Operator}) || (Set{Owner}).Allows(nil) {
		t.Error("Allows")
	}
	if got := Of([]Role{Operator, Billing, Support, Billing}, Customer); !slices.Equal(got, []Role{Billing}) {
		t.Errorf("Of = %v", got)
	}
}
