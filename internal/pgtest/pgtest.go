// Package pgtest hands the PostgreSQL server test/integration starts to the
// tests of packages outside test/, which start none (as redistest.Provided
// does for Redis).
package pgtest

import (
	"os"
	"testing"
)

// Env carries the URL of the PostgreSQL server test/integration provides.
const Env = "GATEWAY_TEST_POSTGRES"

// Provided returns the URL of an empty database of the PostgreSQL server
// test/integration provides, or skips tb.
func Provided(tb testing.TB) string {
	tb.Helper()
	url := os.Getenv(Env)
	if url == "" {
		tb.Skipf("needs PostgreSQL: run by test/integration, which sets $%s", Env)
	}
	return url
}
