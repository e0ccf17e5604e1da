package store

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// tokenWindow reads a token window ("tw" of the hash "acct" or "ks:KEYID"):
// bucket -> {settled, held}.
func (e *env) tokenWindow(acct, hash string) map[int64][2]int64 {
	e.t.Helper()
	v, _ := e.rdb.HGet(e.ctx, acctKey(acct, hash), "tw").Result()
	f := strings.Fields(v)
	out := map[int64][2]int64{}
	for i := 0; i+2 < len(f); i += 3 {
		out[parseInt(f[i])] = [2]int64{parseInt(f[i+1]), parseInt(f[i+2])}
	}
	return out
}

// leaseField reads one lease's field, split.
func (e *env) leaseField(acct, lid string) []string {
	e.t.Helper()
	v, _ := e.rdb.HGet(e.ctx, acctKey(acct, "leases"), lid).Result()
	return strings.Fields(v)
}

// recordTokens records a request that took bound tokens from a lease's
// bucket b.
func (e *env) recordTokens(acct, lid string, seq, bound, b int64, levels int, req string, kl account.Limits) {
	e.t.Helper()
	err := e.s.RecordLeased(e.ctx, []account.LeasedRequest{{
		Lease:      account.LeaseRef{ID: lid, Seq: seq, Hold: 1, Tokens: bound, Bucket: b, TokenLevels: levels},
		KeyCounted: kl.TPM > 0,
		Admission:  account.Admission{RequestID: req, AccountID: acct, KeyID: "key_x", Priced: "m", Hold: 1, Tokens: bound, KeyLimits: kl},
	}})
	if err != nil {
		e.t.Fatal(err)
	}
}

// A lease on an account with a tokens-per-minute limit holds tokens in a
// future bucket of the token window admit.lua counts; a record makes the
// bound the request's, in that bucket; a settlement moves it to settled,
// from the lease when it comes first, once; a renewal takes the free
// tokens out and places its share of the room in a later bucket, leaving
// the bounds of unrecorded requests where they are; returning takes the
// free ones out.
func testLeaseTokens(t *testing.T, e *env) {
	const tpm, bound = 8000, 100
	acct := e.account(100*usd, account.Limits{TPM: tpm})
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, WantTokens: 10_000, MinTokens: bound})
	b := TokenBucket(e.clock.Now()) + 2 // 10 s on
	if r.Reason != account.LeaseHeld || r.Tokens != tpm/8 || r.TokenLevels != account.LevelAccount || r.TokenBucket != b {
		t.Fatalf("lease %+v, want 1000 tokens (8000 / share 8) in the account's window, bucket %d", r, b)
	}
	if w := e.tokenWindow(acct, "acct"); w[b] != [2]int64{0, 1000} || len(w) != 1 {
		t.Fatalf("window %v, want 1000 held in bucket %d", w, b)
	}
	// admit.lua counts them: 70 bounds more, not 71.
	for i := range 70 {
		wantAdmitted(t, e.admitKey(acct, "key_x", fmt.Sprintf("a%d", i), 1, bound, account.Limits{}))
	}
	if d := e.admitKey(acct, "key_x", "over", 1, bound, account.Limits{}); d.Outcome != account.TokenLimited {
		t.Fatalf("a bound past the window: %s, want tokens per minute", d.Outcome)
	}
	// r1 recorded (twice: a retry), then settled having used 30.
	e.recordTokens(acct, lid, 1, bound, b, account.LevelAccount, "r1", account.Limits{})
	e.recordTokens(acct, lid, 1, bound, b, account.LevelAccount, "r1", account.Limits{})
	if f := e.leaseField(acct, lid); len(f) != 12 || f[9] != "900" {
		t.Fatalf("lease %v after r1's record, want 900 tokens", f)
	}
	ref := func(seq int64) account.LeaseRef {
		return account.LeaseRef{ID: lid, Seq: seq, Hold: 1, Tokens: bound, Bucket: b, TokenLevels: account.LevelAccount}
	}
	if !e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: "key_x", Priced: "m", Usage: usage.Usage{Input: 30}, Lease: ref(1)}) {
		t.Fatal("r1 not settled")
	}
	if w := e.tokenWindow(acct, "acct"); w[b] != [2]int64{30, 900} {
		t.Fatalf("window %v after r1, want 30 settled and 900 held in bucket %d", w, b)
	}
	// r2 settles, having used 50, before its record: once.
	st2 := account.Settlement{RequestID: "r2", AccountID: acct, KeyID: "key_x", Priced: "m", Usage: usage.Usage{Input: 50}, Lease: ref(2)}
	if !e.settle(st2) {
		t.Fatal("r2 not settled from the lease")
	}
	e.recordTokens(acct, lid, 2, bound, b, account.LevelAccount, "r2", account.Limits{})
	if e.settle(st2) {
		t.Fatal("r2 settled twice")
	}
	if w, f := e.tokenWindow(acct, "acct"), e.leaseField(acct, lid); w[b] != [2]int64{80, 800} || f[9] != "800" {
		t.Fatalf("window %v, lease %v after r2; want 80 settled, 800 held, 800 in the lease", w, f)
	}
	// r3 taken (the sidecar's free tokens: 700), recorded after a renewal
	// 5 s on: its bound stays in bucket b, the free 700 leave it, and the
	// share of the room left, (8000 - 7000 - 80 - 100) / 8 = 102, goes to
	// bucket b + 1.
	e.clock.Advance(5000 * 1e6)
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd - 3, Want: usd, Min: 1, FreeTokens: 700, WantTokens: 10_000, MinTokens: bound})
	if r.Reason != account.LeaseHeld || r.Tokens != 102-700 || r.TokenBucket != b+1 {
		t.Fatalf("renewal %+v, want 102 tokens in bucket %d", r, b+1)
	}
	if w := e.tokenWindow(acct, "acct"); w[b] != [2]int64{80, 100} || w[b+1] != [2]int64{0, 102} {
		t.Fatalf("window %v after the renewal", w)
	}
	e.recordTokens(acct, lid, 3, bound, b, account.LevelAccount, "r3", account.Limits{})
	if w, f := e.tokenWindow(acct, "acct"), e.leaseField(acct, lid); w[b] != [2]int64{80, 100} || f[9] != "102" || f[10] != fmt.Sprint(b+1) {
		t.Fatalf("window %v, lease %v after r3's record; want r3's bound in bucket %d, the lease's 102 in the next", w, f, b)
	}
	if !e.settle(account.Settlement{RequestID: "r3", AccountID: acct, KeyID: "key_x", Priced: "m", Usage: usage.Usage{Input: 10}, Lease: ref(3)}) {
		t.Fatal("r3 not settled")
	}
	if w := e.tokenWindow(acct, "acct"); w[b] != [2]int64{90, 0} {
		t.Fatalf("window %v after r3 settled", w)
	}
	// Returned: its tokens leave the window, and so does the lease.
	r = e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Free: usd, Want: 0, Min: 1, FreeTokens: 102})
	if r.Tokens != -102 {
		t.Fatalf("return %+v", r)
	}
	if w, f := e.tokenWindow(acct, "acct"), e.leaseField(acct, lid); w[b+1] != [2]int64{0, 0} || len(f) != 0 {
		t.Fatalf("window %v, lease %v after the return", w, f)
	}
}

// A key's tokens-per-minute limit: the lease's tokens in the key's window,
// counted by admit.lua; a record counts the request in the key's state;
// the sweep returns the lease once its sidecar stopped renewing it.
func testLeaseKeyTokens(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{})
	kl := account.Limits{TPM: 1600}
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, WantTokens: 10_000, MinTokens: 100, KeyLimits: kl})
	b := TokenBucket(e.clock.Now()) + 2
	if r.Reason != account.LeaseHeld || r.Tokens != 200 || r.TokenLevels != account.LevelKey {
		t.Fatalf("lease %+v, want 200 tokens (1600 / 8) in the key's window", r)
	}
	for i := range 14 {
		wantAdmitted(t, e.admitKey(acct, "key_x", fmt.Sprintf("k%d", i), 1, 100, kl))
	}
	if d := e.admitKey(acct, "key_x", "over", 1, 100, kl); d.Outcome != account.TokenLimited || d.Level != account.KeyLevel {
		t.Fatalf("the key's bound past its window: %+v", d)
	}
	e.recordTokens(acct, lid, 1, 100, b, account.LevelKey, "r1", kl)
	if ks := e.keyState(acct, "key_x"); ks.InFlight != 15 || ks.MinuteTokens != 1600 {
		t.Fatalf("key state %+v after the record, want 15 in flight, 1600 tokens", ks)
	}
	e.clock.Advance(holdTTL + 1)
	if res := e.sweep(acct); len(res.LeasesReturned) != 1 {
		t.Fatalf("sweep %+v", res)
	}
	if f := e.leaseField(acct, lid); len(f) != 0 {
		t.Fatalf("lease %v after the sweep", f)
	}
}

// The sweep takes a lease's tokens out of its bucket while the bucket is
// still in the window.
func testLeaseTokenSweep(t *testing.T, e *env) {
	acct := e.account(100*usd, account.Limits{TPM: 8000})
	const lid = "sc1.key_x.1"
	r := e.lease(account.LeaseCall{AccountID: acct, LeaseID: lid, Want: usd, Min: 1, WantTokens: 10_000, MinTokens: 100})
	b := r.TokenBucket
	e.recordTokens(acct, lid, 1, 100, b, account.LevelAccount, "r1", account.Limits{})
	// A lease lasting 10 s: swept while its bucket is in the window.
	e2 := newEnv(t, e.rdb)
	e2.clock = e.clock
	e2.s = New(e.rdb, Options{Now: e.clock.Now, HoldTTL: 10_000 * 1e6})
	r = e2.lease(account.LeaseCall{AccountID: acct, LeaseID: "sc2.key_x.1", Want: usd, Min: 1, WantTokens: 10_000, MinTokens: 100})
	if r.TokenBucket != b {
		t.Fatalf("second lease %+v in another bucket than %d", r, b)
	}
	held := e.tokenWindow(acct, "acct")[b][1]
	if held != 1000+r.Tokens {
		t.Fatalf("held %d in bucket %d, want both leases' %d", held, b, 1000+r.Tokens)
	}
	e.clock.Advance(10_001 * 1e6)
	e2.sweep(acct)
	if w := e.tokenWindow(acct, "acct"); w[b] != [2]int64{0, 1000} {
		t.Fatalf("window %v after the second lease was swept, want the first's 1000 left in bucket %d", w, b)
	}
}

// A settlement's lease reference, with its tokens, survives the spool.
func TestLeaseRefInLedgerFields(t *testing.T) {
	for _, ref := range []account.LeaseRef{
		{ID: "sc1.key_x.1", Seq: 3, Hold: 7},
		{ID: "sc1.key_x.1", Seq: 3, Hold: 7, Tokens: 400, Bucket: 359_000_000, TokenLevels: account.LevelAccount | account.LevelKey},
	} {
		st := account.Settlement{RequestID: "r1", AccountID: "acct_1", Priced: "m", Status: 200, Lease: ref}
		if got := SettlementFromLedger("acct_1", LedgerFields(st)).Lease; !reflect.DeepEqual(got, ref) {
			t.Fatalf("lease %+v came back as %+v", ref, got)
		}
	}
}
