// Package gcfloor keeps the Go heap from being collected before it reaches a
// floor size.
//
// The sidecar's live heap is small (a few MB) and every request allocates
// some 20 KB, so with the runtime's default (collect when the heap has grown
// by 100% of the live heap) it collects every few hundred requests, and each
// collection delays the requests running through it. Collecting only once
// the heap reaches a floor of a few tens of MB makes collections rare at no
// cost beyond that floor. Above the floor the default applies, so a heap
// that really grows (thousands of open streams) is collected as usual.
//
// After every collection the GC percentage is set so that the next one
// starts at max(floor, 2 × live heap): GOGC = max(100, floor/live − 1).
package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Start sets the floor, in bytes, and keeps the GC percentage in step with
// the live heap after every collection. A floor of zero or less leaves the
// runtime's settings alone. It returns a function that stops the tuning and
// restores the percentage in force before.
func Start(floor int64) (stop func()) {
	if floor <= 0 {
		return func() {}
	}
	before := debug.SetGCPercent(100)
	var stopped atomic.Bool
	tune(floor)
	arm(func() bool {
		if stopped.Load() {
			return false
		}
		tune(floor)
		return true
	})
	return func() {
		stopped.Store(true)
		debug.SetGCPercent(before)
	}
}

// tunings counts the calls of tune, for the tests.
var tunings atomic.Int64

// tune sets the GC percentage for the live heap now.
func tune(floor int64) {
	debug.SetGCPercent(Percent(floor, liveHeap()))
	tunings.Add(1)
}

// Percent is the GC percentage that makes the next collection start when
// the heap reaches the larger of floor and twice live.
func Percent(floor, live int64) int {
	if live <= 0 {
		live = 1 << 20
	}
	p := (floor - live) * 100 / live
	return int(max(100, min(p, 100_000)))
}

var sample = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

// liveHeap is the heap marked live by the last collection.
func liveHeap() int64 {
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(sample[0].Value.Uint64())
}

// arm calls f after the next collection, and again after each one while f
// returns true: a finalizer runs once its object is found unreachable,
// that is, in the collection after it was dropped.
func arm(f func() bool) {
	s := new(sentinel)
	runtime.SetFinalizer(s, func(*sentinel) {
		if f() {
			arm(f)
		}
	})
}

// sentinel is large enough not to share a tiny-allocation block, whose
// finalizer would then wait for its neighbours.
type sentinel struct{ _ [16]byte }
