// Package integration holds the tests that start real processes other than
// the whole gateway: redis-server (plain, TLS, Cluster), PostgreSQL and
// `envoy --mode validate`; the one exception is a Redis Cluster failover,
// which only the whole gateway under load can show. Packages outside test/ are the unit tier and never
// start a process; where one of their tests needs a real server, this
// package starts it and runs that test with the server's address in the
// environment (redistest.Provided and its kin), so that each test is written
// once, next to the code it tests.
package integration
