package store

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/testclock"
)

// An entry keeps its origin, before, after and outcome, and goes once it
// is older than the audit retention.
func TestAuditRetentionAndChange(t *testing.T) {
	ctx := context.Background()
	mr := miniredis.RunT(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	mr.SetTime(now)
	clk := testclock.New(now)
	s := New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), Options{Now: clk.Now, AuditRetention: time.Hour})
	old := audit.Entry{Actor: "sso:ann", Origin: "10.0.0.1", Action: "account.limits", AccountID: "acct_1",
		Before: `{"rpm":1}`, After: `{"rpm":2}`}
	if err := s.AppendAudit(ctx, old); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Audit(ctx, "", 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("Audit = %v, %v", got, err)
	}
	old.ID, old.At = got[0].ID, now
	if got[0] != old {
		t.Errorf("entry %+v, want %+v", got[0], old)
	}
	clk.Advance(time.Hour + time.Second)
	mr.SetTime(clk.Now())
	refused := audit.Entry{Actor: "sso:bill", Action: "POST /console/api/keys", AccountID: "acct_1", Outcome: audit.OutcomeRefused}
	if err := s.AppendAudit(ctx, refused); err != nil {
		t.Fatal(err)
	}
	got, _, err = s.Audit(ctx, "", 10)
	if err != nil || len(got) != 1 || got[0].Outcome != audit.OutcomeRefused || got[0].Actor != "sso:bill" {
		t.Fatalf("after the retention: %+v, %v; want the refusal only", got, err)
	}
}

// An entry written before the audit trail had origins and states reads
// back with them empty.
func TestAuditEntryOfTheLastRelease(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	s := New(rdb, Options{})
	if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: auditKey, Values: []any{
		"actor", "console:admin", "action", "account.limits", "account_id", "acct_1", "key_id", "", "detail", "rpm=1", "at", "1764000000000",
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	got, _, err := s.Audit(ctx, "", 10)
	if err != nil || len(got) != 1 {
		t.Fatalf("Audit = %v, %v", got, err)
	}
	e := got[0]
	if e.Actor != "console:admin" || e.Action != "account.limits" || e.Detail != "rpm=1" || e.At.UnixMilli() != 1764000000000 ||
		e.Origin != "" || e.Before != "" || e.After != "" || e.Outcome != "" {
		t.Errorf("an entry of the last release: %+v", e)
	}
}
