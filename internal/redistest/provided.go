package redistest

import (
	"os"
	"strings"
	"testing"
)

// The servers test/integration provides to the tests of other packages.
// A package outside test/ never starts a server itself (its tests are the
// unit tier, which needs nothing but Go): a test that needs a real Redis asks
// for the one test/integration started and handed over in these variables,
// and is skipped when there is none.
const (
	AddrEnv    = "GATEWAY_TEST_REDIS"         // host:port of an empty redis-server
	ClusterEnv = "GATEWAY_TEST_REDIS_CLUSTER" // comma-separated masters of a Redis Cluster
	// TLSEnv is "host:port,CA file" of a redis-server's TLS listener with
	// the ACL user TLSUser (password TLSPassword).
	TLSEnv = "GATEWAY_TEST_REDIS_TLS"
)

// The ACL user of the TLS server.
const (
	TLSUser     = "gateway"
	TLSPassword = "s3cret"
)

// Provided returns the address of the redis-server test/integration
// provides, or skips tb.
func Provided(tb testing.TB) string {
	tb.Helper()
	return provided(tb, AddrEnv)
}

// ProvidedCluster returns the masters of the Redis Cluster test/integration
// provides, or skips tb.
func ProvidedCluster(tb testing.TB) []string {
	tb.Helper()
	return strings.Split(provided(tb, ClusterEnv), ",")
}

// ProvidedTLS returns the TLS address and CA file of the redis-server
// test/integration provides, or skips tb.
func ProvidedTLS(tb testing.TB) (addr, caFile string) {
	tb.Helper()
	addr, caFile, _ = strings.Cut(provided(tb, TLSEnv), ",")
	return addr, caFile
}

func provided(tb testing.TB, env string) string {
	tb.Helper()
	v := os.Getenv(env)
	if v == "" {
		tb.Skipf("needs a real Redis: run by test/integration, which sets $%s", env)
	}
	return v
}
