package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/usage"
)

// Redis memory per request and per account-day, measured with MEMORY USAGE
// on a real redis-server (docs/operations.md states these figures). A request leaves
// its ledger entry (until exported and past the retention); while it runs,
// its hold, admission record and checkpoint.
func TestMemoryPerRequest(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Provided(t)})
	t.Cleanup(func() { rdb.Close() })
	s := New(rdb, Options{})
	a, err := s.CreateAccount(ctx, "memory", 1_000_000_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	mem := func(key string) int64 {
		n, err := rdb.MemoryUsage(ctx, key, 0).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return n
	}
	const n = 1000
	// Open requests: hold, admission record, checkpoint.
	ids := make([]string, n)
	var renewals []account.Renewal
	for i := range ids {
		ids[i] = fmt.Sprintf("req_%012x_%s", 0xabcdef123456, fmt.Sprint(i+1000))
		d, err := s.Admit(ctx, &account.Admission{RequestID: ids[i], AccountID: a.ID, KeyID: "key_0123456789abcdef", Priced: "claude-sonnet-4-5-20250929", Hold: 1_000_000, Stream: true})
		if err != nil || d.Outcome != account.Admitted {
			t.Fatal(d, err)
		}
		renewals = append(renewals, account.Renewal{AccountID: a.ID, RequestID: ids[i], Checkpoint: &account.Checkpoint{Status: 200, Endpoint: "primary", Priced: "claude-sonnet-4-5-20250929", Usage: usage.Usage{Input: 1200, Output: 350}, Cost: 8_850_000}})
	}
	if _, err := s.RenewHolds(ctx, renewals); err != nil {
		t.Fatal(err)
	}
	open := mem(acctKey(a.ID, "holds"))
	// Settle them all.
	for _, id := range ids {
		st := account.Settlement{RequestID: id, AccountID: a.ID, KeyID: "key_0123456789abcdef", Priced: "claude-sonnet-4-5-20250929",
			Usage: usage.Usage{Input: 1200, Output: 350, CacheRead: 20000}, Cost: 8_850_000, Status: 200, Endpoint: "primary", Stream: true,
			StartedAt: time.Now().Add(-3 * time.Second), EndedAt: time.Now()}
		if _, err := s.Settle(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	ledger := mem(acctKey(a.ID, "ledger"))
	now := time.Now().UTC()
	day := mem(acctKey(a.ID, "day:"+dayStamp(now))) + mem(acctKey(a.ID, "u:d:"+dayStamp(now)))
	left := mem(acctKey(a.ID, "holds"))
	t.Logf("per open request: %d bytes (one hold: amount, lease, admission record, checkpoint)", open/n)
	t.Logf("per settled request: ledger entry %d bytes (kept until exported and past the retention)", ledger/n)
	t.Logf("per account-day, one model: %d bytes (daily spend and usage counters)", day)
	t.Logf("holds left after settlement: %d bytes", left)
	// Bounds: a request's own keys are bounded whatever the client sends
	// (ids and model names are bounded before they reach the store).
	if ledger/n > 400 || open/n > 400 {
		t.Errorf("per-request memory grew: ledger entry %d, open request %d", ledger/n, open/n)
	}
	if left != 0 {
		t.Errorf("settled requests left %d bytes of holds", left)
	}
}
