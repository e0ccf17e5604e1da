package store

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// Data written by release 0.2.0, before projects: a key hash without a
// project, its state with today's spend, a hold admitted then (its record
// without the project's fields), a ledger entry without a project_id. Set
// here field by field as that release wrote them. Read by this code, the
// key is in the default project with no project limits, admits and
// refuses as it did, the old hold settles and sweeps as before, and the
// ledger and the projects read unchanged: no migration step.
func testUpgradeFromBeforeProjects(t *testing.T, e *env) {
	acct := e.account(10*usd, account.Limits{DailyNanoUSD: 5 * usd})
	now := e.clock.Now()
	const keyID, secret = "key_0a1b2c3d4e5f6071", "cr_written-by-release-0.2.0"
	sum := HashSecret(secret)
	hexHash := hex.EncodeToString(sum[:])
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	pipe := e.rdb.TxPipeline()
	pipe.HSet(e.ctx, acctKey(acct, "key:"+keyID),
		"account", acct, "kind", "cr", "label", "old", "prefix", secret[:8], "hash", hexHash, "models", "null",
		"created", ms, "expires", "0", "revoked", "0", "last_used", "0",
		"daily", "2000000000", "rpm", "0", "window", "0", "tpm", "0", "conc", "0", "monthly", "0", "total", "0", "cwait", "0")
	pipe.SAdd(e.ctx, acctKey(acct, "keys"), keyID)
	// 1.5 USD spent today by the key; 0.25 held by a request in flight.
	pipe.HSet(e.ctx, acctKey(acct, "ks:"+keyID), "dd", dayStamp(now), "dc", "1500000000", "dr", "3",
		"md", monthStamp(now), "mc", "1500000000", "mr", "3", "tc", "1500000000", "tr", "3", "held", "250000000", "open", "1")
	pipe.IncrBy(e.ctx, acctKey(acct, "day:"+dayStamp(now)), 1_500_000_000)
	pipe.HSet(e.ctx, acctKey(acct, "acct"), "held", "250000000")
	pipe.HSet(e.ctx, acctKey(acct, "holds"), "old1",
		fmt.Sprintf(`250000000 %d {"tb":0,"ta":0,"tk":0,"kc":1,"k":"%s","m":"m","s":%d}`, now.Add(holdTTL).UnixMilli(), keyID, now.UnixMilli()))
	pipe.XAdd(e.ctx, &redis.XAddArgs{Stream: acctKey(acct, "ledger"), Values: []any{
		"request_id", "done0", "key_id", keyID, "model", "m", "cost", "1500000000", "status", "200", "started", ms, "ended", ms,
	}})
	if _, err := pipe.Exec(e.ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.HSet(e.ctx, keyHashKey(hexHash), "key", keyID, "account", acct).Err(); err != nil {
		t.Fatal(err)
	}

	k, err := e.s.LookupKey(e.ctx, sum)
	if err != nil {
		t.Fatal(err)
	}
	if k.ID != keyID || k.ProjectID != "" || k.Project() != account.DefaultProject || !k.ProjectLimits.IsZero() || k.Limits.DailyNanoUSD != 2*usd {
		t.Fatalf("key read back %+v", k)
	}
	// The key's daily limit counts the old spend and hold: 1.5 + 0.25 +
	// 0.25 fits 2, one more does not.
	wantAdmitted(t, e.admitAs(k, "new1", usd/4))
	d := e.admitAs(k, "new2", usd/4)
	if d.Outcome != account.DailyLimited || d.Level != account.KeyLevel || d.Used != 1_500_000_000 || d.Held != usd/2 {
		t.Fatalf("over the key's daily limit: %+v", d)
	}
	// The old hold settles as it would have; the new one is swept.
	e.settleAs(k, "old1", usd/10)
	e.clock.Advance(holdTTL + time.Second)
	if r := e.sweep(acct); len(r.Interrupted) != 1 || r.Interrupted[0].ProjectID != "" {
		t.Fatalf("sweep %+v", r)
	}
	if s := e.keyState(acct, keyID); s.InFlight != 0 || s.Held != 0 || s.Day.Cost != 1_600_000_000 {
		t.Fatalf("key state %+v", s)
	}
	ps, err := e.s.ListProjects(e.ctx, acct)
	if err != nil || len(ps) != 1 || ps[0].ID != account.DefaultProject || !ps[0].Limits.IsZero() {
		t.Fatalf("projects %+v, %v", ps, err)
	}
	for _, l := range e.ledger(acct) {
		if l.ProjectID != "" {
			t.Fatalf("ledger entry %s in project %q", l.RequestID, l.ProjectID)
		}
	}
	if l := e.ledger(acct); len(l) != 3 || l[0].RequestID != "done0" || l[0].Cost != 1_500_000_000 {
		t.Fatalf("ledger %+v", l)
	}
	if b := e.balance(acct); b != 10*usd-usd/10 {
		t.Fatalf("balance %d", b)
	}
}
