package integration

import (
	"bytes"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// promotionBound is the acceptance bound: the gateway's errors end at most
// this long after the dead master's replica is promoted.
const promotionBound = 10 * time.Second

// A master of a 3 × 2 Redis Cluster killed under load: the gateway's 503s
// end within promotionBound of its replica's promotion, /health names the
// dead shard and gateway_store_up drops while it is down, and every
// admitted request is charged once.
func TestRedisClusterFailoverUnderLoad(t *testing.T) {
	skipShort(t)
	nodes := redistest.StartReplicatedCluster(t, 3, 2)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	s := launchtest.Start(t, launch.Options{RedisCluster: addrs})
	ctx := t.Context()

	// A first request gives the price of one; the fake vendor answers every
	// request alike.
	probe := s.NewAccount(10, account.Limits{})
	if resp, body := s.Do("POST", "/alpha/v1/messages", messagesHeaders(probe.Key), messagesBody()); resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s", resp.StatusCode, body)
	}
	s.WaitSettled()
	unitCost := nanos(t, s.Usage(probe.ReadOnly, "total"), "usage.cost_usd")

	const balance = 1000.0
	acct := s.NewAccount(balance, account.Limits{})
	// The master holding the account's keys is the one to kill.
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	master, err := rdb.MasterForKey(ctx, "gw:{acct:"+acct.ID+"}:x")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := master.Options().Addr
	var victim *redistest.Server
	for _, n := range nodes {
		if n.Addr == deadAddr {
			victim = n
		}
	}

	// Load: a few clients send requests back to back until stopped.
	var (
		mu        sync.Mutex
		ok        int
		failures  = map[int]int{}
		lastError time.Time
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				code := post(client, s.URL+"/alpha/v1/messages", acct.Key)
				mu.Lock()
				if code == 200 {
					ok++
				} else {
					failures[code]++
					lastError = time.Now()
				}
				mu.Unlock()
			}
		}()
	}
	eventually.True(t, 10*time.Second, "requests succeed before the kill", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ok >= 20
	})

	killed := time.Now()
	victim.Stop()

	// Health turns while the shard is down.
	eventually.That(t, 10*time.Second, "/health names the dead shard", func() (bool, string) {
		code, body := get(client, s.ControlURL+"/health")
		return code == 503 && strings.Contains(body, "shard "+deadAddr), body
	})
	healthRed := time.Since(killed)
	eventually.True(t, 5*time.Second, "gateway_store_up drops to 0", func() bool {
		_, body := get(client, s.ControlURL+"/metrics")
		return strings.Contains(body, "\ngateway_store_up 0\n")
	})

	// The promotion, as the surviving nodes see it.
	var survivor string
	for _, a := range addrs {
		if a != deadAddr {
			survivor = a
			break
		}
	}
	node := redis.NewClient(&redis.Options{Addr: survivor})
	t.Cleanup(func() { node.Close() })
	slot, err := rdb.ClusterKeySlot(ctx, "gw:{acct:"+acct.ID+"}:x").Result()
	if err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 60*time.Second, "a replica takes over the dead master's slots", func() (bool, string) {
		shards, err := node.ClusterShards(ctx).Result()
		if err != nil {
			return false, err.Error()
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, n := range sh.Nodes {
					if n.Role == "master" && n.Health == "online" {
						addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
						return addr != deadAddr, addr
					}
				}
			}
		}
		return false, "slot not served"
	})
	promoted := time.Now()

	// The load runs on past the bound, so that errors after it would show.
	<-time.After(time.Until(promoted.Add(promotionBound + 2*time.Second)))
	close(stop)
	wg.Wait()

	eventually.That(t, 10*time.Second, "/health recovers", func() (bool, string) {
		code, body := get(client, s.ControlURL+"/health")
		return code == 200, body
	})
	_, metrics := get(client, s.ControlURL+"/metrics")
	if !strings.Contains(metrics, "\ngateway_store_up 1\n") {
		t.Error("gateway_store_up is not 1 after the failover")
	}

	mu.Lock()
	defer mu.Unlock()
	sinceLast := lastError.Sub(promoted)
	t.Logf("kill → /health red %v; kill → promotion %v; promotion → last error %v; %d ok, failures by status %v",
		healthRed.Round(time.Millisecond), promoted.Sub(killed).Round(time.Millisecond), sinceLast.Round(time.Millisecond), ok, failures)
	if sinceLast > promotionBound {
		t.Errorf("errors went on %v after the promotion; want at most %v", sinceLast, promotionBound)
	}
	for code := range failures {
		if code != 503 {
			t.Errorf("%d requests failed with %d; a store outage is 503", failures[code], code)
		}
	}

	// Money: every admitted request charged once, nothing for the failures.
	s.WaitSettled()
	u := s.Usage(acct.ReadOnly, "total")
	if got := num(t, u, "usage.requests"); got != float64(ok) {
		t.Errorf("usage counts %v requests; %d were answered 200", got, ok)
	}
	cost := nanos(t, u, "usage.cost_usd")
	if cost != int64(ok)*unitCost {
		t.Errorf("cost %d nano-USD; want %d × %d", cost, ok, unitCost)
	}
	if spent := int64(balance*1e9) - nanos(t, u, "balance_usd"); spent != cost {
		t.Errorf("balance fell by %d nano-USD; the usage costs %d", spent, cost)
	}
}

// nanos reads a dollar field of a usage record in nano-USD.
func nanos(t *testing.T, m map[string]any, path string) int64 {
	t.Helper()
	return int64(math.Round(num(t, m, path) * 1e9))
}

// num reads a dotted number field of a usage record.
func num(t *testing.T, m map[string]any, path string) float64 {
	t.Helper()
	var v any = m
	for _, k := range strings.Split(path, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("usage has no %s: %v", path, m)
		}
		v = mm[k]
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("usage %s = %v, not a number", path, v)
	}
	return f
}

func messagesHeaders(key string) map[string]string {
	return map[string]string{"x-api-key": key, "anthropic-version": "2023-06-01", "content-type": "application/json"}
}

func messagesBody() []byte {
	return []byte(`{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"Hello there, gateway"}]}`)
}

// post sends one request and returns its status; a transport error is 0.
func post(client *http.Client, url, key string) int {
	req, err := http.NewRequest("POST", url, bytes.NewReader(messagesBody()))
	if err != nil {
		return 0
	}
	for k, v := range messagesHeaders(key) {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// get returns a GET's status and body; a transport error is 0.
func get(client *http.Client, url string) (int, string) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
