//go:build !race

package extproc

const raceEnabled = false
