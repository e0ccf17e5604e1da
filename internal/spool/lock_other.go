//go:build !unix

package spool

import "os"

// lockFile does nothing where flock is not available: two sidecars must not
// share a spool directory.
func lockFile(*os.File) error { return nil }
