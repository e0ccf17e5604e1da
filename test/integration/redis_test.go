package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/redistest"
)

// The store's suite, its memory and command counts, on a real redis-server.
func TestStoreOnRedis(t *testing.T) {
	skipShort(t)
	for _, test := range []string{"TestRedis", "TestMemoryPerRequest", "TestCommandsPerRequest"} {
		t.Run(test, func(t *testing.T) {
			runWith(t, "./internal/store", []string{test}, redistest.AddrEnv+"="+redistest.Start(t))
		})
	}
}

// The Redis commands a leased request costs, counted on a real
// redis-server (a script's inner commands included).
func TestLeasesOnRedis(t *testing.T) {
	skipShort(t)
	runWith(t, "./internal/leases", []string{"TestCommandsPerLeasedRequest"}, redistest.AddrEnv+"="+redistest.Start(t))
}

// The processor's request paths within an 8 KB stack, on a real
// redis-server.
func TestStreamStackOnRedis(t *testing.T) {
	skipShort(t)
	runWith(t, "./extproc", []string{"TestStreamStackStaysSmall"}, redistest.AddrEnv+"="+redistest.Start(t))
}

// The store's suite on a three-node Redis Cluster.
func TestStoreOnRedisCluster(t *testing.T) {
	skipShort(t)
	addrs := redistest.StartCluster(t, 3)
	runWith(t, "./internal/store", []string{"TestRedisCluster"}, redistest.ClusterEnv+"="+strings.Join(addrs, ","))
}

// The gateway's Redis client over TLS with an ACL user.
func TestGatewayRedisOverTLS(t *testing.T) {
	skipShort(t)
	srv := redistest.NewTLSServer(t, "--user", redistest.TLSUser, "on", ">"+redistest.TLSPassword, "~*", "&*", "+@all")
	runWith(t, "./cmd/gateway", []string{"TestRedisOverTLSWithAuth"}, redistest.TLSEnv+"="+srv.TLSAddr+","+srv.CAFile)
}

// redistest's servers: they start empty, stop and start again, form a
// cluster, and keep their data on disk when asked to.
func TestRedistestServers(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	client := func(addr string) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		t.Cleanup(func() { c.Close() })
		return c
	}

	s := redistest.NewServer(t)
	c := client(s.Addr)
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // stopping twice is harmless
	s.Start()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
	if v, err := c.Get(ctx, "k").Result(); err == nil || v == "v" {
		t.Fatal("data survived a restart; the server should keep nothing")
	}
	s.Restart()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}

	for _, addr := range redistest.StartCluster(t, 3) {
		info, err := client(addr).ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
			t.Errorf("%s: %s %v", addr, info, err)
		}
	}

	p := redistest.NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	pc := client(p.Addr)
	if err := pc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	p.Start()
	if v, err := pc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("GET k after restart = %q, %v; want the value kept on disk", v, err)
	}
}
