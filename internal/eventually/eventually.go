// Package eventually is the tests' one way to wait for something another
// process or goroutine does: poll a check until it holds, and fail with what
// it last saw when it does not within a bound. The bound is a failure
// deadline, never a measured promise: speed is measured by make bench.
package eventually

import (
	"testing"
	"time"
)

// interval is the pause between checks.
const interval = 20 * time.Millisecond

// That polls check until it holds, failing tb, with what and what check
// last saw, once within has passed.
func That(tb testing.TB, within time.Duration, what string, check func() (ok bool, saw string)) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, saw := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s; last saw %s", what, within, saw)
		}
		time.Sleep(interval) // polling interval, not synchronisation
	}
}

// True is That for a condition with nothing to report.
func True(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	That(tb, within, what, func() (bool, string) { return cond(), "false" })
}
