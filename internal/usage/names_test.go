package usage

import "testing"

func TestByNameRoundTrip(t *testing.T) {
	var u Usage
	for i, k := range Kinds {
		k.Set(&u, int64(i+1))
	}
	m := ByName(u)
	if len(m) != len(Kinds) {
		t.Fatalf("%d names, want %d", len(m), len(Kinds))
	}
	if got, err := FromNames(m); err != nil || got != u {
		t.Fatalf("round trip: %+v %v, want %+v", got, err, u)
	}
	if ByName(Usage{}) != nil {
		t.Fatal("zero usage: want nil, so that records leave it out")
	}
	got, err := FromNames(map[string]int64{"input": 5, "teleport": 1})
	if err == nil || got.Input != 5 {
		t.Fatalf("unknown kind: %+v %v; want input kept and an error", got, err)
	}
}
