package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/usage"
)

// commandCalls reads INFO commandstats: calls per command, the commands
// scripts run inside included (and the EVALSHA itself).
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		for f := range strings.SplitSeq(fields, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return calls
}

// countedCommand tells the commands a request causes from the test's own
// and the client's housekeeping.
func countedCommand(name string) bool {
	return name != "info" && name != "ping" && name != "hello" && !strings.HasPrefix(name, "client")
}

// TestCommandsPerRequest counts the Redis commands one metered request
// costs (admission and settlement; scripts' inner commands included) on a
// real redis-server, for an account without rate or daily limits whose
// requests report input and output tokens, settled one at a time and in
// batches of eight (the settler batches an account's settlements that end
// together).
func TestCommandsPerRequest(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Provided(t)})
	t.Cleanup(func() { rdb.Close() })
	s := New(rdb, Options{})
	a, err := s.CreateAccount(ctx, "commands", 1_000_000*usd, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, k, err := s.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seq := 0
	// run admits and settles n requests in batches of batch, and returns
	// the commands per request and their breakdown.
	run := func(n, batch int) (float64, map[string]int64) {
		before := commandCalls(t, rdb)
		for done := 0; done < n; done += batch {
			sts := make([]account.Settlement, batch)
			for i := range sts {
				seq++
				id := fmt.Sprintf("req_%012x_%d", 0xabcdef123456, seq)
				d, err := s.Admit(ctx, &account.Admission{RequestID: id, AccountID: a.ID, KeyID: k.ID, Priced: "claude-sonnet-4-5", Hold: 1_000_000})
				if err != nil || d.Outcome != account.Admitted {
					t.Fatalf("admit %s: %+v, %v", id, d, err)
				}
				sts[i] = account.Settlement{RequestID: id, AccountID: a.ID, KeyID: k.ID, Priced: "claude-sonnet-4-5",
					Usage: usage.Usage{Input: 1200, Output: 350}, Cost: 8_850, Status: 200, Endpoint: "primary",
					StartedAt: time.Now(), EndedAt: time.Now()}
			}
			for i, r := range s.SettleBatch(ctx, sts) {
				if !r.Applied || r.Err != nil {
					t.Fatalf("settle %s: %+v", sts[i].RequestID, r)
				}
			}
		}
		after := commandCalls(t, rdb)
		diff := map[string]int64{}
		var total int64
		for name, c := range after {
			if d := c - before[name]; d != 0 && countedCommand(name) {
				diff[name] = d
				total += d
			}
		}
		return float64(total) / float64(n), diff
	}
	// Warm up: scripts loaded, day keys created (their EXPIRE is once a
	// day), the credential's last_used written for this minute.
	run(8, 8)
	breakdown := func(m map[string]int64, n int) string {
		var b strings.Builder
		for _, name := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, " %s=%.2f", name, float64(m[name])/float64(n))
		}
		return b.String()
	}
	const n = 64
	one, oneBy := run(n, 1)
	eight, eightBy := run(n, 8)
	t.Logf("Redis commands per request, batches of 1: %.2f (%s)", one, breakdown(oneBy, n))
	t.Logf("Redis commands per request, batches of 8: %.2f (%s)", eight, breakdown(eightBy, n))
	if eight > 10 {
		t.Errorf("batches of 8: %.2f commands per request, want at most 10", eight)
	}
	// The key's spend (by day, month, total: one read and one write of its
	// state) and the account's month are a batch's, not a request's.
	if one > 23 {
		t.Errorf("batches of 1: %.2f commands per request, want at most 23", one)
	}
}

// TestSettleBatchOneCall: a batch of many accounts' settlements is one
// script call on a server that is not a cluster, every entry applied.
func TestSettleBatchOneCall(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: redistest.Provided(t)})
	t.Cleanup(func() { rdb.Close() })
	s := New(rdb, Options{})
	const accounts, each = 16, 8 // the settler's largest batch
	var sts []account.Settlement
	for a := range accounts {
		acct, err := s.CreateAccount(ctx, "batch", 1_000_000*usd, account.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range each {
			id := fmt.Sprintf("req_batch_%d_%d", a, i)
			if d, err := s.Admit(ctx, &account.Admission{RequestID: id, AccountID: acct.ID, Priced: "m", Hold: 1_000_000}); err != nil || d.Outcome != account.Admitted {
				t.Fatalf("admit %s: %+v, %v", id, d, err)
			}
			sts = append(sts, account.Settlement{RequestID: id, AccountID: acct.ID, Priced: "m",
				Usage: usage.Usage{Input: 10, Output: 5}, Cost: 100, Status: 200})
		}
	}
	before := commandCalls(t, rdb)["evalsha"]
	for i, r := range s.SettleBatch(ctx, sts) {
		if !r.Applied || r.Err != nil {
			t.Fatalf("settle %s: %+v", sts[i].RequestID, r)
		}
	}
	if n := commandCalls(t, rdb)["evalsha"] - before; n != 1 {
		t.Fatalf("%d script calls for %d accounts' %d settlements, want 1", n, accounts, len(sts))
	}
}
