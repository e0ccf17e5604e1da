package leases

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// commandCalls sums INFO commandstats' calls (the commands scripts run
// inside included), leaving out the test's and the client's housekeeping.
func commandCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var all int64
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		if name == "info" || name == "ping" || name == "hello" || strings.HasPrefix(name, "client") {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				all += c
			}
		}
	}
	return all
}

// sentCounter counts the commands a client sends (pipelined ones each).
type sentCounter struct{ n atomic.Int64 }

func (c *sentCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *sentCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *sentCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestCommandsPerLeasedRequest counts the Redis commands a request costs
// admitted from a lease (its record, for half of them: the other half
// settle within the record loop's linger, unless they used a request slot;
// and settlement, in batches of eight as the record loop and the settler
// send them, and a lease renewal every 500 requests: 500 requests/s on one
// sidecar with the 1 s interval) against the same requests admitted by the
// store's script, on a real redis-server: for an account without limits,
// and for one with a request-rate limit (whose lease holds request slots).
func TestCommandsPerLeasedRequest(t *testing.T) {
	addr := redistest.Provided(t)
	for _, tc := range []struct {
		name   string
		limits account.Limits
	}{
		{"no limits", account.Limits{}},
		{"rpm", account.Limits{RPM: 1_000_000, WindowMinutes: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var sent sentCounter
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			rdb.AddHook(&sent)
			info := redis.NewClient(&redis.Options{Addr: addr})
			t.Cleanup(func() { rdb.Close(); info.Close() })
			st := store.New(rdb, store.Options{})
			a, err := st.CreateAccount(ctx, "commands", 1_000_000*usd, tc.limits)
			if err != nil {
				t.Fatal(err)
			}
			_, k, err := st.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			m := New(st, st, Options{Interval: time.Hour})
			seq := 0
			run := func(n, batch int, leased bool) (float64, float64) {
				all0, sent0 := commandCalls(t, info), sent.n.Load()
				for done := 0; done < n; done += batch {
					sts := make([]account.Settlement, batch)
					for i := range sts {
						seq++
						id := fmt.Sprintf("req_%012x_%d", 0xabcdef123456, seq)
						adm := account.Admission{RequestID: id, AccountID: a.ID, KeyID: k.ID, Priced: "claude-sonnet-4-5", Hold: 1_000_000}
						var d account.Decision
						var err error
						if leased {
							d, err = m.Admit(ctx, &adm)
						} else {
							d, err = st.Admit(ctx, &adm)
						}
						if err != nil || d.Outcome != account.Admitted || leased && d.Lease.ID == "" {
							t.Fatalf("admit %s: %+v, %v", id, d, err)
						}
						sts[i] = account.Settlement{RequestID: id, AccountID: a.ID, KeyID: k.ID, Priced: "claude-sonnet-4-5",
							Usage: usage.Usage{Input: 1200, Output: 350}, Cost: 8_850, Status: 200, Endpoint: "primary",
							StartedAt: time.Now(), EndedAt: time.Now(), Lease: d.Lease}
					}
					if leased {
						// Half the batch settle before their record is sent.
						for _, st := range sts[:batch/2] {
							m.Settled(st.Lease)
						}
						m.flush(ctx)
					}
					for i, r := range st.SettleBatch(ctx, sts) {
						if !r.Applied || r.Err != nil {
							t.Fatalf("settle %s: %+v", sts[i].RequestID, r)
						}
					}
					if leased && (done+batch)%500 < batch {
						m.Renew(ctx, false)
					}
				}
				all1, sent1 := commandCalls(t, info), sent.n.Load()
				return float64(all1-all0) / float64(n), float64(sent1-sent0) / float64(n)
			}
			run(8, 8, false)
			m.Admit(ctx, &account.Admission{RequestID: "first", AccountID: a.ID, KeyID: k.ID, Priced: "m", Hold: 1_000_000})
			// A lease for the run: as if the interval's rate were 1,000
			// holds and requests.
			m.mu.Lock()
			m.leases[leaseKey{a.ID, k.ID}].admits = 1000 * 1_000_000
			m.leases[leaseKey{a.ID, k.ID}].reqs = 1000
			m.mu.Unlock()
			m.Renew(ctx, false)
			run(8, 8, true)
			const n = 1000
			script, scriptSent := run(n, 8, false)
			lease, leaseSent := run(n, 8, true)
			t.Logf("Redis commands per request, batches of 8: admit.lua %.2f (%.2f sent), leases %.2f (%.2f sent)", script, scriptSent, lease, leaseSent)
			// The bound: at most two commands sent per request.
			if leaseSent > 2 {
				t.Errorf("leases: %.2f commands sent per request, want at most 2", leaseSent)
			}
			if leaseSent > scriptSent/2 {
				t.Errorf("leases: %.2f commands sent per request, want at most half of admit.lua's %.2f", leaseSent, scriptSent)
			}
			if lease >= script {
				t.Errorf("leases: %.2f commands per request in all, admit.lua %.2f: want fewer", lease, script)
			}
		})
	}
}

// redisUsec is the time INFO commandstats says the server spent in EVALSHA
// calls, the commands the scripts ran inside included.
func redisUsec(tb testing.TB, rdb *redis.Client) int64 {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for f := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
	}
	return 0
}

// BenchmarkSettleBatch reports the Redis time a settlement of a request
// admitted from a lease costs (redis-µs/req: the script calls' time as
// Redis counts it, divided by their requests), by batch size, on a real
// redis-server: what a batch shares (the account's sums, the key's state,
// the lease) against what each request adds (its hold, bit and ledger
// entry). Admission happens outside the measured calls.
func BenchmarkSettleBatch(b *testing.B) {
	addr := redistest.Provided(b)
	for _, batch := range []int{1, 4, 16, 64} {
		b.Run(strconv.Itoa(batch), func(b *testing.B) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			b.Cleanup(func() { rdb.Close() })
			st := store.New(rdb, store.Options{})
			a, err := st.CreateAccount(ctx, "bench", 1_000_000*usd, account.Limits{})
			if err != nil {
				b.Fatal(err)
			}
			_, k, err := st.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{})
			if err != nil {
				b.Fatal(err)
			}
			m := New(st, st, Options{Interval: time.Hour})
			var usec, settled int64
			sts := make([]account.Settlement, batch)
			seq := 0
			for b.Loop() {
				b.StopTimer()
				for i := range sts {
					seq++
					adm := account.Admission{RequestID: fmt.Sprintf("req_%012x_%d", 0xabcdef123456, seq), AccountID: a.ID, KeyID: k.ID,
						Priced: "claude-sonnet-4-5", Hold: 1_000_000}
					d, err := m.Admit(ctx, &adm)
					if err != nil || d.Outcome != account.Admitted {
						b.Fatalf("admit: %+v, %v", d, err)
					}
					sts[i] = account.Settlement{RequestID: adm.RequestID, AccountID: a.ID, KeyID: k.ID, Priced: "claude-sonnet-4-5",
						Requested: "claude-sonnet-4-5", Reported: "claude-sonnet-4-5-20250929",
						Usage: usage.Usage{Input: 1200, Output: 350}, Rates: usage.Usage{Input: 3_000_000_000, Output: 15_000_000_000, CacheRead: 300_000_000,
							CacheWrite5m: 3_750_000_000, CacheWrite1h: 6_000_000_000},
						Cost: 8_850, Status: 200, Endpoint: "primary", StartedAt: time.Now(), EndedAt: time.Now(), Lease: d.Lease}
				}
				u0 := redisUsec(b, rdb)
				b.StartTimer()
				for i, r := range st.SettleBatch(ctx, sts) {
					if !r.Applied || r.Err != nil {
						b.Fatalf("settle %s: %+v", sts[i].RequestID, r)
					}
				}
				b.StopTimer()
				usec += redisUsec(b, rdb) - u0
				settled += int64(batch)
				if seq%500 < batch {
					m.Renew(ctx, false)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(usec)/float64(settled), "redis-µs/req")
		})
	}
}
