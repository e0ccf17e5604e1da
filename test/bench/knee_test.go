package main

import "testing"

// The refinement closes on a stack's limit from both sides: every rate it
// settles on was passed, every rate above its interval failed, and the
// interval left is an eighth of a step after three rounds.
func TestKneeHalvesTheIntervalBetweenSteps(t *testing.T) {
	for _, limit := range []float64{1500, 1510, 1730, 1990} {
		k := knee{lo: 1500, hi: 2000}
		tried := 0
		for range 3 {
			rate, ok := k.next()
			if !ok {
				t.Fatalf("limit %v: no rate to try in [%v, %v]", limit, k.lo, k.hi)
			}
			if rate <= k.lo || rate >= k.hi || rate != float64(int(rate)/10*10) {
				t.Fatalf("limit %v: tried %v, not a round rate inside (%v, %v)", limit, rate, k.lo, k.hi)
			}
			k.record(rate, rate <= limit)
			tried++
		}
		if k.lo > limit || k.hi <= limit {
			t.Errorf("limit %v: settled on [%v, %v], which does not hold it", limit, k.lo, k.hi)
		}
		if k.hi-k.lo > 500.0/8+10 {
			t.Errorf("limit %v: [%v, %v] after %d rounds, wider than an eighth of the step", limit, k.lo, k.hi, tried)
		}
	}
}

// A stack that failed no step, or whose interval is down to 10/s, has
// nothing left to try.
func TestKneeStopsWhereThereIsNoRateBetween(t *testing.T) {
	var none knee
	if r, ok := none.next(); ok {
		t.Errorf("the zero knee offered %v", r)
	}
	narrow := knee{lo: 1500, hi: 1510}
	if r, ok := narrow.next(); ok {
		t.Errorf("[1500, 1510] offered %v", r)
	}
}
