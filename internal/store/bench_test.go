package store

import (
	"context"
	"strconv"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/testclock"
	"github.com/modelgateway/gateway/internal/usage"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/redistest"
)

// benchBackends are the backends the benchmarks run on.
var benchBackends = []struct {
	name string
	open func(b *testing.B) redis.UniversalClient
}{
	{"miniredis", func(b *testing.B) redis.UniversalClient {
		m := miniredis.RunT(b)
		return redis.NewClient(&redis.Options{Addr: m.Addr()})
	}},
	{"redis", func(b *testing.B) redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: redistest.Provided(b)})
	}},
}

// benchAccount makes a store and an account with every limit in force but
// none reached.
func benchAccount(b *testing.B, rdb redis.UniversalClient) (*Store, string) {
	c := testclock.New(start)
	s := New(rdb, Options{Now: c.Now})
	a, err := s.CreateAccount(context.Background(), "bench", 1e15,
		account.Limits{DailyNanoUSD: 1e15, RPM: 1e9, WindowMinutes: 1})
	if err != nil {
		b.Fatal(err)
	}
	return s, a.ID
}

func BenchmarkAdmit(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			rdb := be.open(b)
			defer rdb.Close()
			s, acct := benchAccount(b, rdb)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				d, err := s.Admit(ctx, &account.Admission{RequestID: strconv.Itoa(i), AccountID: acct, KeyID: "key_1", Priced: "m", Hold: 1000})
				if err != nil || d.Outcome != account.Admitted {
					b.Fatal(d, err)
				}
			}
		})
	}
}

func BenchmarkSettle(b *testing.B) {
	for _, be := range benchBackends {
		b.Run(be.name, func(b *testing.B) {
			rdb := be.open(b)
			defer rdb.Close()
			s, acct := benchAccount(b, rdb)
			ctx := context.Background()
			for i := range b.N {
				if _, err := s.Admit(ctx, &account.Admission{RequestID: strconv.Itoa(i), AccountID: acct, Hold: 1000}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				ok, err := s.Settle(ctx, account.Settlement{Usage: usage.Usage{Input: 1000, Output: 500, CacheRead: 200},
					RequestID: strconv.Itoa(i), AccountID: acct, KeyID: "key_1", Priced: "claude-sonnet",
					Cost: 900, Status: 200, Endpoint: "primary",
					StartedAt: start, EndedAt: start,
				})
				if err != nil || !ok {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
