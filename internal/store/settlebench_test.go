package store

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/testclock"
	"github.com/modelgateway/gateway/internal/usage"

	"github.com/redis/go-redis/v9"
)

// redisCPU is the server's CPU time so far, seconds (INFO cpu).
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var t float64
	for l := range strings.SplitSeq(info, "\r\n") {
		name, v, _ := strings.Cut(l, ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			t += f
		}
	}
	return t
}

// BenchmarkSettleBatchLeased settles batches of requests admitted from a
// lease and never recorded (a fast reply's path), as the settler sends
// them, and reports Redis's CPU per request (redis-µs/req) at each batch
// size: a call's fixed cost in Redis shows as the difference between the
// sizes. Real redis-server only (GATEWAY_TEST_REDIS).
func BenchmarkSettleBatchLeased(b *testing.B) {
	for _, batch := range []int{1, 5, 20, 40} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) { benchmarkSettleLeased(b, batch) })
	}
}

func benchmarkSettleLeased(b *testing.B, batch int) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Provided(b)})
	defer rdb.Close()
	s := New(rdb, Options{Now: testclock.New(start).Now})
	ctx := context.Background()
	a, err := s.CreateAccount(ctx, "bench", 1e15, account.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	acct := a.ID
	const lid = "sc1.key_1.1"
	if r := s.Leases(ctx, []account.LeaseCall{{AccountID: acct, LeaseID: lid, KeyID: "key_1", Want: 1e14, Min: 1, Share: 1}})[0]; r.Err != nil || r.Delta == 0 {
		b.Fatal(r)
	}
	sts := make([]account.Settlement, batch)
	b.ReportAllocs()
	c0 := redisCPU(b, rdb)
	b.ResetTimer()
	seq := int64(0)
	for i := 0; i < b.N; i += batch {
		for j := range sts {
			seq++
			sts[j] = account.Settlement{
				Usage:     usage.Usage{Input: 12, Output: 17},
				Rates:     usage.Usage{Input: 3000, Output: 15000, CacheRead: 300, CacheWrite5m: 3750, CacheWrite1h: 6000},
				RequestID: "req_" + strconv.FormatInt(seq, 10), AccountID: acct, KeyID: "key_1",
				Requested: "claude-sonnet-4-5", Priced: "claude-sonnet-4-5", Reported: "claude-sonnet-4-5-20250929",
				Cost: 291000, Status: 200, Endpoint: "primary", VendorKey: "alpha-1",
				StartedAt: start, EndedAt: start,
				Lease: account.LeaseRef{ID: lid, Seq: seq, Hold: 1_000_000},
			}
		}
		for _, r := range s.SettleBatch(ctx, sts) {
			if r.Err != nil || !r.Applied {
				b.Fatal(r)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric((redisCPU(b, rdb)-c0)*1e6/float64(seq), "redis-µs/req")
}
