package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/testclock"
)

// The suite runs unchanged on miniredis, on a real redis-server and on a real
// Redis Cluster; each backend hands every test an empty database. The real
// servers are test/integration's (go test ./test/...).

func TestMiniredis(t *testing.T) {
	runSuite(t, func(t *testing.T) redis.UniversalClient {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	})
}

func TestRedis(t *testing.T) {
	addr := redistest.Provided(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	runSuite(t, func(t *testing.T) redis.UniversalClient {
		if err := rdb.FlushAll(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		return rdb
	})
}

func TestRedisCluster(t *testing.T) {
	addrs := redistest.ProvidedCluster(t)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { rdb.Close() })
	runSuite(t, func(t *testing.T) redis.UniversalClient {
		err := rdb.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
			return c.FlushAll(ctx).Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		return rdb
	})
}

var suite = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"Accounts", testAccounts},
	{"TopUp", testTopUp},
	{"Keys", testKeys},
	{"RotateKey", testRotateKey},
	{"NoSecretStored", testNoSecretStored},
	{"Audit", testAudit},
	{"AdmitBalance", testAdmitBalance},
	{"AdmitRateLimit", testAdmitRateLimit},
	{"AdmitRateWindow", testAdmitRateWindow},
	{"AdmitDailyLimit", testAdmitDailyLimit},
	{"AdmitOrder", testAdmitOrder},
	{"AdmitErrors", testAdmitErrors},
	{"HoldExpiry", testHoldExpiry},
	{"RenewAndCheckpoint", testRenewAndCheckpoint},
	{"HoldValue", testHoldValue},
	{"ReindexRecheck", testReindexRecheck},
	{"LastUsedMinute", testLastUsedMinute},
	{"ExportLedger", testExportLedger},
	{"SinkHoldsBackTrim", testSinkHoldsBackTrim},
	{"SettleIdempotent", testSettleIdempotent},
	{"SettleAfterHoldExpiry", testSettleAfterHoldExpiry},
	{"SettleAfterSweep", testSettleAfterSweep},
	{"MoneyBounds", testMoneyBounds},
	{"SettleNon2xx", testSettleNon2xx},
	{"SettleErrors", testSettleErrors},
	{"PerModel", testPerModel},
	{"Periods", testPeriods},
	{"Ledger", testLedger},
	{"SettlementRoundTrip", testSettlementRoundTrip},
	{"Concurrency", testConcurrency},
	{"SettleBatch", testSettleBatch},
	{"SettleBatchAccounts", testSettleBatchAccounts},
	{"ConcurrencyLimit", testConcurrencyLimit},
	{"TokenLimit", testTokenLimit},
	{"TokenWindowRolls", testTokenWindowRolls},
	{"RefusalAmounts", testRefusalAmounts},
	{"SpendBudgets", testSpendBudgets},
	{"KeyRateLimit", testKeyRateLimit},
	{"StrictestWins", testStrictestWins},
	{"KeyLimitsStored", testKeyLimitsStored},
	{"LimitsConcurrent", testLimitsConcurrent},
	{"SignInAttempts", testSignInAttempts},
	{"Sessions", testSessions},
	{"LeaseEscrow", testLeaseEscrow},
	{"LeaseRefused", testLeaseRefused},
	{"LeaseRecordAndSettle", testLeaseRecordAndSettle},
	{"LeaseRecordOfMissingAccount", testLeaseRecordOfMissingAccount},
	{"LeaseSweep", testLeaseSweep},
	{"LeaseSweptAtFreeZero", testLeaseSweptAtFreeZero},
	{"LeaseKeyBudget", testLeaseKeyBudget},
	{"LeaseRateSlots", testLeaseRateSlots},
	{"LeaseKeyRateSlots", testLeaseKeyRateSlots},
	{"LeaseRateSweep", testLeaseRateSweep},
	{"LeaseRateRace", testLeaseRateRace},
	{"LeaseSeats", testLeaseSeats},
	{"LeaseSeatsRenew", testLeaseSeatsRenew},
	{"LeaseKeySeats", testLeaseKeySeats},
	{"LeaseSeatSweep", testLeaseSeatSweep},
	{"LeaseSeatsTooSmall", testLeaseSeatsTooSmall},
	{"LeaseTokens", testLeaseTokens},
	{"LeaseKeyTokens", testLeaseKeyTokens},
	{"LeaseTokenSweep", testLeaseTokenSweep},
	{"LeaseProjectBudget", testLeaseProjectBudget},
	{"LeaseProjectKind", testLeaseProjectKind},
	{"LeaseProjectSeats", testLeaseProjectSeats},
	{"LeaseProjectSlotsAndTokens", testLeaseProjectSlotsAndTokens},
	{"Projects", testProjects},
	{"ProjectLimits", testProjectLimits},
	{"ProjectRace", testProjectRace},
	{"SettleAfterSweepCountsEveryLevel", testSettleAfterSweepCountsEveryLevel},
	{"UpgradeFromBeforeProjects", testUpgradeFromBeforeProjects},
}

func runSuite(t *testing.T, open func(t *testing.T) redis.UniversalClient) {
	for _, tc := range suite {
		t.Run(tc.name, func(t *testing.T) {
			rdb := open(t)
			tc.fn(t, newEnv(t, rdb))
		})
	}
}

// start is the suite's initial time: a Sunday noon, UTC.
var start = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type env struct {
	t     *testing.T
	ctx   context.Context
	rdb   redis.UniversalClient
	clock *testclock.Clock
	s     *Store
}

const holdTTL = 10 * time.Minute

func newEnv(t *testing.T, rdb redis.UniversalClient) *env {
	c := testclock.New(start)
	return &env{
		t:     t,
		ctx:   context.Background(),
		rdb:   rdb,
		clock: c,
		s:     New(rdb, Options{Now: c.Now, HoldTTL: holdTTL}),
	}
}

func (e *env) account(balance int64, l account.Limits) string {
	e.t.Helper()
	a, err := e.s.CreateAccount(e.ctx, "test", balance, l)
	if err != nil {
		e.t.Fatal(err)
	}
	return a.ID
}

func (e *env) admit(acct, req string, hold int64) account.Decision {
	e.t.Helper()
	d, err := e.s.Admit(e.ctx, &account.Admission{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Hold: hold})
	if err != nil {
		e.t.Fatalf("admit %s: %v", req, err)
	}
	return d
}

// mustAdmit admits a request and fails the test unless it was admitted.
func (e *env) due() []string {
	e.t.Helper()
	ids, err := e.s.DueHoldAccounts(e.ctx, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func (e *env) sweep(acct string) ledger.SweepResult {
	e.t.Helper()
	r, err := e.s.SweepHolds(e.ctx, acct)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) mustAdmit(acct, req string, hold int64) {
	e.t.Helper()
	if d := e.admit(acct, req, hold); d.Outcome != account.Admitted {
		e.t.Fatalf("admit %s: outcome %s, want Admitted", req, d.Outcome)
	}
}

func (e *env) settle(st account.Settlement) bool {
	e.t.Helper()
	if st.Status == 0 {
		st.Status = 200
	}
	ok, err := e.s.Settle(e.ctx, st)
	if err != nil {
		e.t.Fatalf("settle %s: %v", st.RequestID, err)
	}
	return ok
}

func (e *env) balance(acct string) int64 {
	e.t.Helper()
	b, err := e.s.Balance(e.ctx, acct)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func (e *env) holds(acct string) (count, amount int64) {
	e.t.Helper()
	n, a, err := e.s.OpenHolds(e.ctx, acct)
	if err != nil {
		e.t.Fatal(err)
	}
	return n, a
}

func (e *env) usage(acct string, p ledger.Period) ledger.UsageReport {
	e.t.Helper()
	r, err := e.s.Usage(e.ctx, acct, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) ledger(acct string) []ledger.Entry {
	e.t.Helper()
	var all []ledger.Entry
	after := ""
	for {
		page, next, err := e.s.Ledger(e.ctx, acct, after, 100)
		if err != nil {
			e.t.Fatal(err)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		after = next
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

func wantDecision(t *testing.T, got account.Decision, outcome account.Outcome, retry time.Duration) {
	t.Helper()
	if got.Outcome != outcome || got.RetryAfter != retry {
		t.Fatalf("decision %s retry %v, want %s retry %v",
			got.Outcome, got.RetryAfter, outcome, retry)
	}
}

// dump returns every key and every value in the database, on every master of
// a cluster.
func dump(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	ctx := context.Background()
	var (
		mu  sync.Mutex
		out []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, "*", 100).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			vals := []string{key}
			typ, err := c.Type(ctx, key).Result()
			if err != nil {
				return err
			}
			switch typ {
			case "string":
				vals = append(vals, c.Get(ctx, key).Val())
			case "hash":
				for f, v := range c.HGetAll(ctx, key).Val() {
					vals = append(vals, f, v)
				}
			case "set":
				vals = append(vals, c.SMembers(ctx, key).Val()...)
			case "zset":
				vals = append(vals, c.ZRange(ctx, key, 0, -1).Val()...)
			case "stream":
				for _, m := range c.XRange(ctx, key, "-", "+").Val() {
					for f, v := range m.Values {
						vals = append(vals, f, str(v))
					}
				}
			default:
				t.Errorf("key %s has unexpected type %s", key, typ)
			}
			mu.Lock()
			out = append(out, vals...)
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func contains(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
