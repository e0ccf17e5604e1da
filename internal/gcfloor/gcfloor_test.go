package gcfloor

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestPercent(t *testing.T) {
	for _, tt := range []struct {
		floor, live int64
		want        int
	}{
		{64 << 20, 8 << 20, 700},   // next collection at 64 MB
		{64 << 20, 32 << 20, 100},  // twice live is the floor
		{64 << 20, 100 << 20, 100}, // above the floor: the default
		{64 << 20, 0, 6300},        // nothing measured yet: as if 1 MB
		{1 << 40, 1, 100_000},      // bounded
	} {
		if got := Percent(tt.floor, tt.live); got != tt.want {
			t.Errorf("Percent(%d, %d) = %d, want %d", tt.floor, tt.live, got, tt.want)
		}
	}
}

// After a collection the percentage follows the live heap, and stopping
// restores the one in force before.
func TestStartTunesAfterEachCollection(t *testing.T) {
	orig := debug.SetGCPercent(123)
	defer debug.SetGCPercent(orig)
	floor := int64(1 << 30)
	stop := Start(floor)
	// The finalizer runs on its own goroutine after the collection that
	// finds the sentinel: collect until it has run twice (re-armed once).
	n0 := tunings.Load()
	for i := 0; tunings.Load() < n0+2; i++ {
		if i == 1000 {
			t.Fatal("no tuning after 1000 collections")
		}
		runtime.GC()
		runtime.Gosched()
	}
	got := debug.SetGCPercent(-1)
	debug.SetGCPercent(got)
	want := Percent(floor, liveHeap())
	// The live heap moves a little between the tuning and this reading.
	if got < want*9/10 || got > want*11/10 || got <= 100 {
		t.Errorf("GC percent %d after collections, want about %d", got, want)
	}
	stop()
	if got := debug.SetGCPercent(100); got != 123 {
		t.Errorf("GC percent %d after stop, want the 123 set before", got)
	}
}

func TestZeroFloorChangesNothing(t *testing.T) {
	orig := debug.SetGCPercent(77)
	defer debug.SetGCPercent(orig)
	Start(0)()
	if got := debug.SetGCPercent(77); got != 77 {
		t.Errorf("GC percent %d, want 77 untouched", got)
	}
}
