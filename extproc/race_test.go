//go:build race

package extproc

// raceEnabled: the race detector's instrumentation makes every frame
// larger, so stack depths are not the product's.
const raceEnabled = true
