package store

import "testing"

// The hash slots are the cluster's: the specification's check value and
// slots CLUSTER KEYSLOT gives.
func TestHashSlot(t *testing.T) {
	for tag, want := range map[string]int{"123456789": 0x31c3, "foo": 12182, "bar": 5061, "": 0} {
		if got := hashSlot(tag); got != want {
			t.Errorf("hashSlot(%q) = %d, want %d", tag, got, want)
		}
	}
}
