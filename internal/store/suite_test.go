package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

const usd = 1_000_000_000 // nano-USD

func testAccounts(t *testing.T, e *env) {
	limits := account.Limits{DailyNanoUSD: 5 * usd, RPM: 60, WindowMinutes: 2}
	a, err := e.s.CreateAccount(e.ctx, "alpha", 10*usd, limits)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^acct_[0-9a-f]{16}$`).MatchString(a.ID) {
		t.Errorf("id %q", a.ID)
	}
	if a.Name != "alpha" || a.Limits != limits || !a.CreatedAt.Equal(start) {
		t.Errorf("created %+v", a)
	}
	e.clock.Advance(time.Second)
	b, err := e.s.CreateAccount(e.ctx, "beta", 0, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}

	got, err := e.s.Account(e.ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got != a {
		t.Errorf("Account = %+v, want %+v", got, a)
	}
	if bal := e.balance(a.ID); bal != 10*usd {
		t.Errorf("balance %d", bal)
	}

	list, err := e.s.ListAccounts(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0] != a || list[1] != b {
		t.Errorf("ListAccounts = %+v", list)
	}

	newLimits := account.Limits{DailyNanoUSD: 1, RPM: 2, WindowMinutes: 3}
	if err := e.s.SetLimits(e.ctx, a.ID, newLimits); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.s.Account(e.ctx, a.ID); got.Limits != newLimits || got.Name != "alpha" {
		t.Errorf("after SetLimits: %+v", got)
	}
	if bal := e.balance(a.ID); bal != 10*usd {
		t.Errorf("SetLimits changed the balance: %d", bal)
	}

	for _, id := range []string{"acct_0000000000000000", "", "x}y", "a:b"} {
		_, err := e.s.Account(e.ctx, id)
		wantErr(t, err, ErrNotFound)
		_, err = e.s.Balance(e.ctx, id)
		wantErr(t, err, ErrNotFound)
		wantErr(t, e.s.SetLimits(e.ctx, id, account.Limits{}), ErrNotFound)
		_, _, err = e.s.OpenHolds(e.ctx, id)
		wantErr(t, err, ErrNotFound)
	}
	if _, err := e.s.CreateAccount(e.ctx, "neg", -1, account.Limits{}); err == nil {
		t.Error("negative balance accepted")
	}
	if err := e.s.SetLimits(e.ctx, a.ID, account.Limits{RPM: -1}); err == nil {
		t.Error("negative limit accepted")
	}
	if err := e.s.Ping(e.ctx); err != nil {
		t.Error(err)
	}
}

func testTopUp(t *testing.T, e *env) {
	acct := e.account(100, account.Limits{})
	bal, applied, err := e.s.TopUp(e.ctx, acct, 50, "pay-1")
	if err != nil || !applied || bal != 150 {
		t.Fatalf("TopUp = %d, %v, %v", bal, applied, err)
	}
	bal, applied, err = e.s.TopUp(e.ctx, acct, 50, "pay-1")
	if err != nil || applied || bal != 150 {
		t.Fatalf("replayed TopUp = %d, %v, %v", bal, applied, err)
	}
	_, applied, err = e.s.TopUp(e.ctx, acct, 70, "pay-1")
	wantErr(t, err, ErrIdempotencyConflict)
	if applied || e.balance(acct) != 150 {
		t.Fatalf("conflicting TopUp applied")
	}
	// Without a key every call applies.
	for range 2 {
		if _, applied, err := e.s.TopUp(e.ctx, acct, 10, ""); err != nil || !applied {
			t.Fatalf("TopUp without key = %v, %v", applied, err)
		}
	}
	if bal := e.balance(acct); bal != 170 {
		t.Fatalf("balance %d, want 170", bal)
	}
	// Keys are per account.
	other := e.account(0, account.Limits{})
	if bal, applied, err := e.s.TopUp(e.ctx, other, 50, "pay-1"); err != nil || !applied || bal != 50 {
		t.Fatalf("TopUp on another account = %d, %v, %v", bal, applied, err)
	}
	_, _, err = e.s.TopUp(e.ctx, "acct_0000000000000000", 1, "k")
	wantErr(t, err, ErrNotFound)
	if _, _, err := e.s.TopUp(e.ctx, acct, 0, "zero"); err == nil {
		t.Error("zero top-up accepted")
	}
}

func testKeys(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{})
	expires := start.Add(24 * time.Hour)
	secret, k, err := e.s.CreateKey(e.ctx, acct, account.ModelKey, account.KeyOptions{
		Label: "ci", ExpiresAt: expires, Models: []string{"claude:opus", "gpt"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^cr_[A-Za-z0-9_-]{43}$`).MatchString(secret) {
		t.Errorf("secret %q", secret)
	}
	want := account.Key{
		ID: k.ID, AccountID: acct, Kind: account.ModelKey, Label: "ci", Prefix: secret[:8],
		CreatedAt: start, ExpiresAt: expires, Models: []string{"claude:opus", "gpt"},
	}
	if !regexp.MustCompile(`^key_[0-9a-f]{16}$`).MatchString(k.ID) || !keyEqual(k, want) {
		t.Errorf("CreateKey = %+v, want %+v", k, want)
	}

	got, err := e.s.LookupKey(e.ctx, HashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !keyEqual(got, want) {
		t.Errorf("LookupKey = %+v, want %+v", got, want)
	}
	_, err = e.s.LookupKey(e.ctx, HashSecret(secret+"x"))
	wantErr(t, err, ErrNotFound)

	e.clock.Advance(time.Minute)
	roSecret, ro, err := e.s.CreateKey(e.ctx, acct, account.ReadOnlyToken, account.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if roSecret[:3] != "ro_" || ro.Kind != account.ReadOnlyToken || len(ro.Models) != 0 || !ro.ExpiresAt.IsZero() {
		t.Errorf("read-only token %q %+v", roSecret, ro)
	}

	// Settling a request records the key's last use.
	used := start.Add(2 * time.Minute)
	e.mustAdmit(acct, "r1", 1)
	e.mustAdmit(acct, "r0", 1)
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, KeyID: k.ID, Priced: "gpt", Cost: 1, EndedAt: used})
	got, _ = e.s.LookupKey(e.ctx, HashSecret(secret))
	if !got.LastUsedAt.Equal(used) {
		t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, used)
	}
	// An older replay does not move it back.
	e.settle(account.Settlement{RequestID: "r0", AccountID: acct, KeyID: k.ID, Priced: "gpt", Cost: 1, EndedAt: start})
	got, _ = e.s.LookupKey(e.ctx, HashSecret(secret))
	if !got.LastUsedAt.Equal(used) {
		t.Errorf("LastUsedAt = %v after an older settlement, want %v", got.LastUsedAt, used)
	}

	keys, err := e.s.ListKeys(e.ctx, acct)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != k.ID || keys[1].ID != ro.ID {
		t.Errorf("ListKeys = %+v", keys)
	}

	e.clock.Advance(time.Minute)
	revokedAt := e.clock.Now()
	if err := e.s.RevokeKey(e.ctx, acct, k.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	if err := e.s.RevokeKey(e.ctx, acct, k.ID); err != nil {
		t.Fatal(err)
	}
	got, err = e.s.LookupKey(e.ctx, HashSecret(secret))
	if err != nil {
		t.Fatal(err)
	}
	if !got.RevokedAt.Equal(revokedAt) {
		t.Errorf("RevokedAt = %v, want the first revocation %v", got.RevokedAt, revokedAt)
	}

	other := e.account(0, account.Limits{})
	wantErr(t, e.s.RevokeKey(e.ctx, other, ro.ID), ErrNotFound)
	wantErr(t, e.s.RevokeKey(e.ctx, acct, "key_0000000000000000"), ErrNotFound)
	_, err = e.s.ListKeys(e.ctx, "acct_0000000000000000")
	wantErr(t, err, ErrNotFound)
	if keys, err := e.s.ListKeys(e.ctx, other); err != nil || len(keys) != 0 {
		t.Errorf("ListKeys of a keyless account = %v, %v", keys, err)
	}
	_, _, err = e.s.CreateKey(e.ctx, "acct_0000000000000000", account.ModelKey, account.KeyOptions{})
	wantErr(t, err, ErrNotFound)
	if _, _, err := e.s.CreateKey(e.ctx, acct, "xx", account.KeyOptions{}); err == nil {
		t.Error("unknown kind accepted")
	}
}

func keyEqual(a, b account.Key) bool {
	return a.ID == b.ID && a.AccountID == b.AccountID && a.Kind == b.Kind && a.Label == b.Label &&
		a.Prefix == b.Prefix && a.CreatedAt.Equal(b.CreatedAt) && a.ExpiresAt.Equal(b.ExpiresAt) &&
		a.LastUsedAt.Equal(b.LastUsedAt) && a.RevokedAt.Equal(b.RevokedAt) &&
		slices.Equal(a.Models, b.Models)
}

func testRotateKey(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{})
	oldSecret, old, err := e.s.CreateKey(e.ctx, acct, account.ModelKey, account.KeyOptions{Label: "prod", Models: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	newSecret, nk, err := e.s.RotateKey(e.ctx, acct, old.ID, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if newSecret == oldSecret || nk.ID == old.ID || nk.Kind != account.ModelKey || nk.Label != "prod" ||
		!slices.Equal(nk.Models, []string{"a", "b"}) || !nk.ExpiresAt.IsZero() {
		t.Errorf("rotated key %+v", nk)
	}
	got, err := e.s.LookupKey(e.ctx, HashSecret(newSecret))
	if err != nil || got.ID != nk.ID {
		t.Fatalf("LookupKey(new) = %+v, %v", got, err)
	}
	got, err = e.s.LookupKey(e.ctx, HashSecret(oldSecret))
	if err != nil {
		t.Fatal(err)
	}
	if want := e.clock.Now().Add(10 * time.Minute); !got.ExpiresAt.Equal(want) {
		t.Errorf("old key expires %v, want %v", got.ExpiresAt, want)
	}
	if !got.RevokedAt.IsZero() {
		t.Error("rotation revoked the old key")
	}

	// A key that expires sooner keeps its expiry.
	soon := e.clock.Now().Add(time.Minute)
	_, short, err := e.s.CreateKey(e.ctx, acct, account.ReadOnlyToken, account.KeyOptions{ExpiresAt: soon})
	if err != nil {
		t.Fatal(err)
	}
	_, nk2, err := e.s.RotateKey(e.ctx, acct, short.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if nk2.Kind != account.ReadOnlyToken {
		t.Errorf("rotated kind %q", nk2.Kind)
	}
	if !nk2.ExpiresAt.Equal(soon) {
		t.Errorf("replacement of an expiring key expires %v, want the old key's %v", nk2.ExpiresAt, soon)
	}
	keys, _ := e.s.ListKeys(e.ctx, acct)
	for _, k := range keys {
		if k.ID == short.ID && !k.ExpiresAt.Equal(soon) {
			t.Errorf("short key expires %v, want %v", k.ExpiresAt, soon)
		}
	}
	if len(keys) != 4 {
		t.Errorf("%d keys, want 4", len(keys))
	}

	if err := e.s.RevokeKey(e.ctx, acct, nk.ID); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.s.RotateKey(e.ctx, acct, nk.ID, 0)
	wantErr(t, err, ErrRevoked)
	_, _, err = e.s.RotateKey(e.ctx, acct, "key_0000000000000000", 0)
	wantErr(t, err, ErrNotFound)
}

func testNoSecretStored(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{RPM: 10, DailyNanoUSD: usd})
	var secrets []string
	for _, kind := range []account.KeyKind{account.ModelKey, account.ReadOnlyToken} {
		secret, k, err := e.s.CreateKey(e.ctx, acct, kind, account.KeyOptions{Label: "l"})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, secret)
		e.mustAdmit(acct, "req-"+k.ID, 10)
		e.settle(account.Settlement{RequestID: "req-" + k.ID, AccountID: acct, KeyID: k.ID, Priced: "m", Cost: 5})
		if _, _, err := e.s.RotateKey(e.ctx, acct, k.ID, time.Minute); err != nil {
			t.Fatal(err)
		}
		err = e.s.AppendAudit(e.ctx, audit.Entry{Actor: "admin", Action: "create_key", AccountID: acct, KeyID: k.ID,
			Detail: "oops, pasted " + secret})
		if err != nil {
			t.Fatal(err)
		}
	}
	all := dump(t, e.rdb)
	if len(all) < 20 {
		t.Fatalf("dump found only %d strings", len(all))
	}
	for _, secret := range secrets {
		if contains(all, secret) || contains(all, secret[3:]) {
			t.Errorf("secret %s... is stored", secret[:8])
		}
		sum := HashSecret(secret)
		if !contains(all, hex.EncodeToString(sum[:])) {
			t.Errorf("hash of %s... not stored", secret[:8])
		}
	}
}

func testAudit(t *testing.T, e *env) {
	for i := range 5 {
		e.clock.Advance(time.Second)
		err := e.s.AppendAudit(e.ctx, audit.Entry{
			Actor: "admin", Action: fmt.Sprintf("action-%d", i), AccountID: "acct_1", KeyID: "key_1", Detail: "d",
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var got []audit.Entry
	after, pages := "", 0
	for {
		page, next, err := e.s.Audit(e.ctx, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, page...)
		if next == "" {
			break
		}
		after = next
	}
	if len(got) != 5 || pages != 3 {
		t.Fatalf("%d entries in %d pages, want 5 in 3", len(got), pages)
	}
	for i, a := range got {
		want := audit.Entry{ID: a.ID, Actor: "admin", Action: fmt.Sprintf("action-%d", i), AccountID: "acct_1",
			KeyID: "key_1", Detail: "d", At: start.Add(time.Duration(i+1) * time.Second)}
		if a != want || a.ID == "" {
			t.Errorf("entry %d = %+v, want %+v", i, a, want)
		}
	}
	// Anything shaped like a secret is redacted.
	secret := newSecret(account.ModelKey)
	if err := e.s.AppendAudit(e.ctx, audit.Entry{Action: "x", Detail: "secret=" + secret + "."}); err != nil {
		t.Fatal(err)
	}
	page, _, err := e.s.Audit(e.ctx, got[4].ID, 10)
	if err != nil || len(page) != 1 {
		t.Fatalf("Audit = %v, %v", page, err)
	}
	if page[0].Detail != "secret=[redacted]." {
		t.Errorf("detail %q", page[0].Detail)
	}
}

func testAdmitBalance(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	e.mustAdmit(acct, "r1", 600)
	if n, a := e.holds(acct); n != 1 || a != 600 {
		t.Fatalf("holds %d, %d", n, a)
	}
	wantDecision(t, e.admit(acct, "r2", 500), account.InsufficientBalance, 0)
	e.mustAdmit(acct, "r3", 400) // exactly the rest
	wantDecision(t, e.admit(acct, "r4", 1), account.InsufficientBalance, 0)
	e.mustAdmit(acct, "r5", 0)
	if n, a := e.holds(acct); n != 3 || a != 1000 {
		t.Fatalf("holds %d, %d", n, a)
	}
	if e.balance(acct) != 1000 {
		t.Fatal("admission changed the balance")
	}
	// Settling releases the hold and charges the actual cost.
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Cost: 100})
	if n, a := e.holds(acct); n != 2 || a != 400 {
		t.Fatalf("holds after settle %d, %d", n, a)
	}
	if b := e.balance(acct); b != 900 {
		t.Fatalf("balance %d, want 900", b)
	}
	e.mustAdmit(acct, "r6", 500)
}

func testAdmitRateLimit(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{RPM: 2, WindowMinutes: 1})
	e.mustAdmit(acct, "r1", 1) // t0
	e.clock.Advance(10 * time.Second)
	e.mustAdmit(acct, "r2", 1) // t0+10s
	e.clock.Advance(10 * time.Second)
	// r1 leaves the window at t0+60s.
	wantDecision(t, e.admit(acct, "r3", 1), account.RateLimited, 40*time.Second)
	if n, _ := e.holds(acct); n != 2 {
		t.Fatalf("a rate-limited request holds: %d holds", n)
	}
	e.clock.Set(start.Add(60*time.Second - time.Millisecond))
	wantDecision(t, e.admit(acct, "r3", 1), account.RateLimited, time.Second) // 1ms, at least 1s
	e.clock.Set(start.Add(60 * time.Second))
	e.mustAdmit(acct, "r3", 1) // the rejections did not enter the log
	wantDecision(t, e.admit(acct, "r4", 1), account.RateLimited, 10*time.Second)

	// Lowering the limit below the log's size waits for enough to leave.
	acct2 := e.account(usd, account.Limits{RPM: 3, WindowMinutes: 1})
	e.clock.Set(start)
	for i := range 3 {
		e.mustAdmit(acct2, fmt.Sprintf("q%d", i), 1)
		e.clock.Advance(10 * time.Second)
	}
	// Admissions at t0, t0+10s, t0+20s; now t0+30s.
	if err := e.s.SetLimits(e.ctx, acct2, account.Limits{RPM: 1, WindowMinutes: 1}); err != nil {
		t.Fatal(err)
	}
	wantDecision(t, e.admit(acct2, "q3", 1), account.RateLimited, 50*time.Second)
	// Without a rate limit there is none.
	if err := e.s.SetLimits(e.ctx, acct2, account.Limits{}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		e.mustAdmit(acct2, fmt.Sprintf("u%d", i), 1)
	}
}

func testAdmitRateWindow(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{RPM: 1, WindowMinutes: 3})
	for i := range 3 {
		e.mustAdmit(acct, fmt.Sprintf("r%d", i), 1)
		e.clock.Advance(time.Minute)
	}
	// Three admissions at t0, t0+1m, t0+2m; now t0+3m: the first has left.
	e.mustAdmit(acct, "r3", 1)
	e.clock.Advance(30 * time.Second)
	wantDecision(t, e.admit(acct, "r4", 1), account.RateLimited, 30*time.Second)
}

func testAdmitDailyLimit(t *testing.T, e *env) {
	e.clock.Set(time.Date(2026, 11, 22, 23, 0, 0, 0, time.UTC))
	acct := e.account(10_000, account.Limits{DailyNanoUSD: 1000})
	e.mustAdmit(acct, "r1", 600)
	// Open holds count towards the day.
	wantDecision(t, e.admit(acct, "r2", 500), account.DailyLimited, time.Hour)
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Cost: 600})
	wantDecision(t, e.admit(acct, "r2", 500), account.DailyLimited, time.Hour)
	e.mustAdmit(acct, "r3", 400) // 600 + 400 = 1000 exactly
	e.settle(account.Settlement{RequestID: "r3", AccountID: acct, Cost: 400})
	if r := e.usage(acct, ledger.Day); r.DailyUsed != 1000 {
		t.Fatalf("DailyUsed %d", r.DailyUsed)
	}
	e.clock.Advance(59*time.Minute + 59*time.Second + 999*time.Millisecond)
	wantDecision(t, e.admit(acct, "r2", 500), account.DailyLimited, time.Millisecond)
	// A new UTC day starts afresh.
	e.clock.Advance(time.Millisecond)
	e.mustAdmit(acct, "r2", 500)
	if r := e.usage(acct, ledger.Day); r.DailyUsed != 0 {
		t.Fatalf("DailyUsed %d on the new day", r.DailyUsed)
	}
	wantDecision(t, e.admit(acct, "r4", 501), account.DailyLimited, 24*time.Hour)
}

func testAdmitOrder(t *testing.T, e *env) {
	acct := e.account(100, account.Limits{RPM: 1, WindowMinutes: 1, DailyNanoUSD: 100})
	e.mustAdmit(acct, "r1", 100)
	// Rate, daily and balance would all refuse: the rate limit answers.
	wantDecision(t, e.admit(acct, "r2", 50), account.RateLimited, time.Minute)
	e.clock.Advance(time.Minute)
	// Daily and balance would refuse: the daily limit answers.
	wantDecision(t, e.admit(acct, "r2", 50), account.DailyLimited, 12*time.Hour-time.Minute)
	if err := e.s.SetLimits(e.ctx, acct, account.Limits{RPM: 1, WindowMinutes: 1}); err != nil {
		t.Fatal(err)
	}
	wantDecision(t, e.admit(acct, "r2", 50), account.InsufficientBalance, 0)
	// None of the rejections entered the log.
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Cost: 10})
	e.mustAdmit(acct, "r2", 50)
}

func testAdmitErrors(t *testing.T, e *env) {
	acct := e.account(100, account.Limits{})
	_, err := e.s.Admit(e.ctx, &account.Admission{RequestID: "r", AccountID: "acct_0000000000000000", Hold: 1})
	wantErr(t, err, ErrNotFound)
	_, err = e.s.Admit(e.ctx, &account.Admission{RequestID: "r", AccountID: "{x}", Hold: 1})
	wantErr(t, err, ErrNotFound)
	if _, err := e.s.Admit(e.ctx, &account.Admission{AccountID: acct, Hold: 1}); err == nil {
		t.Error("empty request id accepted")
	}
	if _, err := e.s.Admit(e.ctx, &account.Admission{RequestID: "r", AccountID: acct, Hold: -1}); err == nil {
		t.Error("negative hold accepted")
	}
	// A request id is not admitted while it is held. Once settled, nothing
	// of it is remembered: ids are unique by construction (the sidecar
	// makes them), so the store does not look for a settled one. What
	// holds is that its settlement is not applied twice, whatever follows.
	e.mustAdmit(acct, "r", 10)
	_, err = e.s.Admit(e.ctx, &account.Admission{RequestID: "r", AccountID: acct, Hold: 10})
	wantErr(t, err, ErrDuplicateRequest)
	if !e.settle(account.Settlement{RequestID: "r", AccountID: acct, Cost: 1, Status: 200}) {
		t.Fatal("settlement not applied")
	}
	if e.settle(account.Settlement{RequestID: "r", AccountID: acct, Cost: 1, Status: 200}) {
		t.Fatal("settlement applied twice")
	}
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d", n, a)
	}
	if b := e.balance(acct); b != 99 {
		t.Fatalf("balance %d, want 99", b)
	}
}

func testHoldExpiry(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	e.mustAdmit(acct, "r1", 500)
	e.clock.Advance(time.Minute)
	e.mustAdmit(acct, "r2", 300)
	wantDecision(t, e.admit(acct, "r3", 300), account.InsufficientBalance, 0)

	// r1's lease ends at t0+holdTTL; r2's a minute later. Nothing is due
	// before, and admission itself never releases a hold.
	e.clock.Set(start.Add(holdTTL - time.Millisecond))
	if due := e.due(); len(due) != 0 {
		t.Fatalf("due before expiry: %v", due)
	}
	e.clock.Set(start.Add(holdTTL))
	wantDecision(t, e.admit(acct, "r3", 300), account.InsufficientBalance, 0)
	if due := e.due(); len(due) != 1 || due[0] != acct {
		t.Fatalf("due at expiry: %v", due)
	}
	r := e.sweep(acct)
	if len(r.Interrupted) != 1 || r.Interrupted[0].RequestID != "r1" || !r.Applied[0] {
		t.Fatalf("sweep at expiry: %+v", r)
	}
	if n, a := e.holds(acct); n != 1 || a != 300 {
		t.Fatalf("holds %d, %d, want 1, 300", n, a)
	}
	// The account is due again when r2's lease ends, not before.
	if due := e.due(); len(due) != 0 {
		t.Fatalf("due after sweep: %v", due)
	}
	e.clock.Advance(holdTTL)
	if due := e.due(); len(due) != 1 {
		t.Fatalf("due at r2's expiry: %v", due)
	}
	e.sweep(acct)
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d, want none", n, a)
	}
	if due := e.due(); len(due) != 0 {
		t.Fatalf("index keeps an account without holds: %v", due)
	}
	// No checkpoint: recorded as interrupted at no charge.
	if e.balance(acct) != 1000 {
		t.Fatal("interrupted requests without a checkpoint charged")
	}
	l := e.ledger(acct)
	if len(l) != 2 || !l[0].Interrupted || !l[0].Estimated || l[0].Status != 499 || l[0].Cost != 0 {
		t.Fatalf("ledger %+v", l)
	}
}

// A hold's lease, admission record and checkpoint live in its one value:
// a renewal without a new checkpoint keeps the last one, a model name with
// spaces survives, and a bare amount (an older sidecar's hold) still settles,
// or is released at no charge one lease after a sweep first sees it.
func testHoldValue(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	if _, err := e.s.Admit(e.ctx, &account.Admission{RequestID: "r1", AccountID: acct, KeyID: "key_1", Priced: "a model with spaces", Hold: 500}); err != nil {
		t.Fatal(err)
	}
	ck := account.Checkpoint{Status: 200, Priced: "a model with spaces", Usage: usage.Usage{Output: 3}, Cost: 40}
	if _, err := e.s.RenewHolds(e.ctx, []account.Renewal{{AccountID: acct, RequestID: "r1", Checkpoint: &ck}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(holdTTL / 2)
	if _, err := e.s.RenewHolds(e.ctx, []account.Renewal{{AccountID: acct, RequestID: "r1"}}); err != nil {
		t.Fatal(err)
	}
	cs, err := e.s.Checkpoints(e.ctx, acct)
	if err != nil || len(cs) != 1 || cs["r1"].Cost != 40 || cs["r1"].Priced != ck.Priced {
		t.Fatalf("checkpoints %+v, %v", cs, err)
	}
	// The second renewal moved the lease: not expired a lease after the first.
	e.clock.Advance(holdTTL / 2)
	if r := e.sweep(acct); len(r.Interrupted) != 0 {
		t.Fatalf("a renewed hold was swept: %+v", r)
	}
	e.clock.Advance(holdTTL / 2)
	r := e.sweep(acct)
	if len(r.Interrupted) != 1 || !r.Applied[0] || r.Interrupted[0].Priced != ck.Priced || r.Interrupted[0].KeyID != "key_1" || r.Interrupted[0].Cost != 40 {
		t.Fatalf("sweep: %+v", r)
	}
	if b := e.balance(acct); b != 960 {
		t.Fatalf("balance %d, want 960", b)
	}

	// Holds as an older sidecar wrote them: a bare amount.
	for _, id := range []string{"old1", "old2"} {
		if err := e.rdb.HSet(e.ctx, acctKey(acct, "holds"), id, "100").Err(); err != nil {
			t.Fatal(err)
		}
		if err := e.rdb.HIncrBy(e.ctx, acctKey(acct, "acct"), "held", 100).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if !e.settle(account.Settlement{RequestID: "old1", AccountID: acct, Cost: 60, Status: 200}) {
		t.Fatal("an older hold did not settle")
	}
	if r := e.sweep(acct); len(r.Interrupted) != 0 || r.Released != 0 {
		t.Fatalf("an older hold was swept at once: %+v", r)
	}
	e.clock.Advance(holdTTL)
	if r := e.sweep(acct); r.Released != 1 {
		t.Fatalf("an older hold was not released a lease later: %+v", r)
	}
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d", n, a)
	}
	if b := e.balance(acct); b != 900 {
		t.Fatalf("balance %d, want 900", b)
	}
}

// A credential's last_used is written at most once a minute per store
// client: later uses within the minute it was written leave it as it is,
// the next minute's first use moves it, and another client (another
// sidecar) writes its own uses.
func testLastUsedMinute(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	_, k, err := e.s.CreateKey(e.ctx, acct, account.ModelKey, account.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lastUsed := func() time.Time {
		t.Helper()
		keys, err := e.s.ListKeys(e.ctx, acct)
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys %+v, %v", keys, err)
		}
		return keys[0].LastUsedAt
	}
	minute := start.Truncate(time.Minute).Add(10 * time.Minute)
	use := func(s *Store, req string, at time.Time) {
		t.Helper()
		e.mustAdmit(acct, req, 1)
		if ok, err := s.Settle(e.ctx, account.Settlement{RequestID: req, AccountID: acct, KeyID: k.ID, Priced: "m", Cost: 1, Status: 200, EndedAt: at}); !ok || err != nil {
			t.Fatalf("settle %s: %v, %v", req, ok, err)
		}
	}
	use(e.s, "r1", minute.Add(5*time.Second))
	if got := lastUsed(); !got.Equal(minute.Add(5 * time.Second)) {
		t.Fatalf("last_used %v after the first use", got)
	}
	// Within the same minute: not written again, in a batch or alone.
	e.mustAdmit(acct, "r2", 1)
	e.mustAdmit(acct, "r3", 1)
	res := e.s.SettleBatch(e.ctx, []account.Settlement{
		{RequestID: "r2", AccountID: acct, KeyID: k.ID, Priced: "m", Cost: 1, Status: 200, EndedAt: minute.Add(30 * time.Second)},
		{RequestID: "r3", AccountID: acct, KeyID: k.ID, Priced: "m", Cost: 1, Status: 200, EndedAt: minute.Add(40 * time.Second)},
	})
	if !res[0].Applied || !res[1].Applied {
		t.Fatalf("batch %+v", res)
	}
	use(e.s, "r4", minute.Add(59*time.Second))
	if got := lastUsed(); !got.Equal(minute.Add(5 * time.Second)) {
		t.Fatalf("last_used %v, want it left at the minute's first use", got)
	}
	// The next minute's first use is written.
	use(e.s, "r5", minute.Add(61*time.Second))
	if got := lastUsed(); !got.Equal(minute.Add(61 * time.Second)) {
		t.Fatalf("last_used %v after the next minute's use", got)
	}
	// Another store client has not written this minute: it does.
	other := New(e.rdb, Options{Now: e.clock.Now, HoldTTL: holdTTL})
	use(other, "r6", minute.Add(70*time.Second))
	if got := lastUsed(); !got.Equal(minute.Add(70 * time.Second)) {
		t.Fatalf("last_used %v after another client's use", got)
	}
	// A revoked-then-deleted credential's hash is never recreated.
	if err := e.rdb.Del(e.ctx, acctKey(acct, "key:"+k.ID)).Err(); err != nil {
		t.Fatal(err)
	}
	use(e.s, "r7", minute.Add(5*time.Minute))
	if n, err := e.rdb.Exists(e.ctx, acctKey(acct, "key:"+k.ID)).Result(); err != nil || n != 0 {
		t.Fatalf("deleted credential recreated: %d, %v", n, err)
	}
}

// A sweep that found no hold drops the account from the sweeper's index,
// unless a hold was admitted meanwhile: then the account stays, due at once,
// so that the next pass indexes it at its hold's expiry.
func testReindexRecheck(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	e.mustAdmit(acct, "r1", 10)
	indexed := func() bool {
		t.Helper()
		_, err := e.rdb.ZScore(e.ctx, holdIndexKey, acct).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		return err == nil
	}
	// As if a sweep had run just before the admission and seen nothing.
	if err := e.s.reindex(e.ctx, acct, 0, -1); err != nil {
		t.Fatal(err)
	}
	if !indexed() {
		t.Fatal("an account with a hold left the sweeper's index")
	}
	if due := e.due(); !slices.Contains(due, acct) {
		t.Fatalf("re-added account not due at once: %v", due)
	}
	r := e.sweep(acct)
	if len(r.Interrupted) != 0 {
		t.Fatalf("sweep %+v", r)
	}
	if due := e.due(); slices.Contains(due, acct) {
		t.Fatalf("account due before its hold expires: %v", due)
	}
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Status: 200})
	if err := e.s.reindex(e.ctx, acct, 0, -1); err != nil {
		t.Fatal(err)
	}
	if indexed() {
		t.Fatal("an account without holds stayed in the sweeper's index")
	}
}

func testRenewAndCheckpoint(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	if _, err := e.s.Admit(e.ctx, &account.Admission{RequestID: "r1", AccountID: acct, KeyID: "key_1", Priced: "m", Hold: 500, Stream: true}); err != nil {
		t.Fatal(err)
	}
	// Renewed every half lease, the hold outlives many leases.
	for range 6 {
		e.clock.Advance(holdTTL / 2)
		gone, err := e.s.RenewHolds(e.ctx, []account.Renewal{{AccountID: acct, RequestID: "r1",
			Checkpoint: &account.Checkpoint{Status: 200, Endpoint: "primary", Priced: "m", Usage: usage.Usage{Input: 10, Output: 7}, Cost: 120}}})
		if err != nil || len(gone) != 0 {
			t.Fatalf("renew: %v, %v", gone, err)
		}
		if r := e.sweep(acct); len(r.Interrupted) != 0 {
			t.Fatalf("a renewed hold was swept: %+v", r)
		}
	}
	// Renewals of unknown requests renew nothing and create no hold.
	if gone, err := e.s.RenewHolds(e.ctx, []account.Renewal{{AccountID: acct, RequestID: "ghost"}}); err != nil || len(gone) != 1 || gone[0] != "ghost" {
		t.Fatalf("renew ghost: %v, %v", gone, err)
	}
	// The sidecar dies: after one lease the sweeper settles at the checkpoint.
	e.clock.Advance(holdTTL)
	r := e.sweep(acct)
	if len(r.Interrupted) != 1 || !r.Applied[0] {
		t.Fatalf("sweep: %+v", r)
	}
	if b := e.balance(acct); b != 880 {
		t.Fatalf("balance %d, want 880", b)
	}
	l := e.ledger(acct)
	if len(l) != 1 {
		t.Fatalf("ledger %+v", l)
	}
	got := l[0]
	if !got.Interrupted || !got.Estimated || got.Status != 200 || got.KeyID != "key_1" || got.Priced != "m" ||
		got.Usage.Input != 10 || got.Usage.Output != 7 || got.Cost != 120 || !got.Stream || got.Endpoint != "primary" || !got.StartedAt.Equal(start) {
		t.Fatalf("entry %+v", got)
	}
	// The request's own late settlement is reconciled: 400 in all, once.
	for range 2 {
		e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Priced: "m", Cost: 400, Status: 200})
	}
	if b := e.balance(acct); b != 600 {
		t.Fatalf("balance %d after late settlement, want 600", b)
	}
	if u := e.usage(acct, ledger.Total).Totals; u.Cost != 400 || u.Requests != 1 {
		t.Fatalf("usage %+v", u)
	}
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d", n, a)
	}
	// Two sweepers racing charge once.
	e.mustAdmit(acct, "r2", 100)
	e.s.RenewHolds(e.ctx, []account.Renewal{{AccountID: acct, RequestID: "r2", Checkpoint: &account.Checkpoint{Status: 200, Cost: 30}}})
	e.clock.Advance(holdTTL)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { e.s.SweepHolds(e.ctx, acct) })
	}
	wg.Wait()
	if b := e.balance(acct); b != 570 {
		t.Fatalf("balance %d after racing sweeps, want 570", b)
	}
	if l := e.ledger(acct); len(l) != 3 {
		t.Fatalf("%d ledger entries after racing sweeps", len(l))
	}
}

func testExportLedger(t *testing.T, e *env) {
	acct := e.account(1_000_000, account.Limits{})
	for i := range 25 {
		id := "r" + strconv.Itoa(i)
		e.mustAdmit(acct, id, 10)
		e.settle(account.Settlement{RequestID: id, AccountID: acct, Priced: "m", Cost: 1, Status: 200})
	}
	// Export in pages of 10, committing each, with retention zero: nothing
	// is trimmed.
	var got []string
	for {
		page, _, err := e.s.ExportLedger(e.ctx, acct, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, le := range page {
			got = append(got, le.RequestID)
		}
		if _, n, err := e.s.CommitExport(e.ctx, acct, page[len(page)-1].ID); err != nil || n != 0 {
			t.Fatalf("commit: %d, %v", n, err)
		}
	}
	if len(got) != 25 || got[0] != "r0" || got[24] != "r24" {
		t.Fatalf("exported %v", got)
	}
	all := e.ledger(acct)
	// The mark never moves back.
	if mark, _, err := e.s.CommitExport(e.ctx, acct, all[3].ID); err != nil || mark != all[24].ID {
		t.Fatalf("mark moved back to %s (%v)", mark, err)
	}
	if _, _, err := e.s.CommitExport(e.ctx, acct, "garbage"); err == nil {
		t.Fatal("bad entry id accepted")
	}
	// An id the ledger does not hold (another account's, one in the future)
	// never moves the mark.
	other := e.account(1000, account.Limits{})
	if _, _, err := e.s.CommitExport(e.ctx, other, all[3].ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another account's entry id committed: %v", err)
	}
	if _, _, err := e.s.CommitExport(e.ctx, acct, "99999999999999-0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a future entry id committed: %v", err)
	}
	if mark, _, err := e.s.CommitExport(e.ctx, acct, ""); err != nil || mark != all[24].ID {
		t.Fatalf("mark %s after refused commits (%v)", mark, err)
	}

	// With a retention, exported entries older than it go; unexported never,
	// however old. Entry ids carry Redis's clock, so the store's clock is
	// moved relative to it.
	for i := range 5 {
		id := "late" + strconv.Itoa(i)
		e.mustAdmit(acct, id, 10)
		e.settle(account.Settlement{RequestID: id, AccountID: acct, Priced: "m", Cost: 1, Status: 200})
	}
	e.s.opts.LedgerRetention = time.Hour
	e.clock.Set(time.Now().Add(30 * time.Minute))
	if n, err := e.s.TrimLedger(e.ctx, acct); err != nil || n != 0 {
		t.Fatalf("trimmed %d (%v) inside the retention", n, err)
	}
	e.clock.Set(time.Now().Add(2 * time.Hour))
	n, err := e.s.TrimLedger(e.ctx, acct)
	if err != nil || n != 25 {
		t.Fatalf("trimmed %d (%v), want the 25 exported", n, err)
	}
	left := e.ledger(acct)
	if len(left) != 5 || left[0].RequestID != "late0" {
		t.Fatalf("left %d entries: %+v", len(left), left)
	}
	page, _, err := e.s.ExportLedger(e.ctx, acct, "", 100)
	if err != nil || len(page) != 5 {
		t.Fatalf("resumed export: %d entries, %v", len(page), err)
	}
}

// The SQL sink's mark holds back trimming like an export's: an entry leaves
// only when every reader that ever committed has copied it.
func testSinkHoldsBackTrim(t *testing.T, e *env) {
	acct := e.account(1_000_000, account.Limits{})
	for i := range 10 {
		id := "r" + strconv.Itoa(i)
		e.mustAdmit(acct, id, 10)
		e.settle(account.Settlement{RequestID: id, AccountID: acct, Priced: "m", Cost: 1, Status: 200})
	}
	all := e.ledger(acct)
	e.s.opts.LedgerRetention = time.Hour
	e.clock.Set(time.Now().Add(2 * time.Hour))
	// A sink that has copied nothing yet but called holds back everything.
	if mark, n, err := e.s.CommitSink(e.ctx, acct, ""); err != nil || mark != "0-0" || n != 0 {
		t.Fatalf("sink registration: mark %s, trimmed %d, %v", mark, n, err)
	}
	if _, n, err := e.s.CommitExport(e.ctx, acct, all[9].ID); err != nil || n != 0 {
		t.Fatalf("an export trimmed %d entries the sink has not copied (%v)", n, err)
	}
	// What the sink copied goes.
	if mark, n, err := e.s.CommitSink(e.ctx, acct, all[3].ID); err != nil || mark != all[3].ID || n != 4 {
		t.Fatalf("sink commit: mark %s, trimmed %d, %v", mark, n, err)
	}
	if m, err := e.s.SinkMark(e.ctx, acct); err != nil || m != all[3].ID {
		t.Fatalf("sink mark %q, %v", m, err)
	}
	// An export ahead of the sink trims nothing the sink has not copied.
	if n, err := e.s.TrimLedger(e.ctx, acct); err != nil || n != 0 {
		t.Fatalf("trimmed %d, %v", n, err)
	}
	// The sink's mark never moves back, and does not move the export's.
	if mark, _, err := e.s.CommitSink(e.ctx, acct, all[1].ID); err != nil || mark != all[3].ID {
		t.Fatalf("sink mark moved back to %s (%v)", mark, err)
	}
	if _, mark, err := e.s.ExportLedger(e.ctx, acct, "", 1); err != nil || mark != all[9].ID {
		t.Fatalf("export mark %s (%v)", mark, err)
	}
	// An export behind the sink holds it back in turn.
	if _, n, err := e.s.CommitSink(e.ctx, acct, all[9].ID); err != nil || n != 6 {
		t.Fatalf("sink commit to the end: trimmed %d, %v", n, err)
	}
	if l := e.ledger(acct); len(l) != 0 {
		t.Fatalf("%d entries left", len(l))
	}
}

func testSettleIdempotent(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	e.mustAdmit(acct, "r1", 500)
	st := account.Settlement{Usage: usage.Usage{Input: 10, Output: 20}, RequestID: "r1", AccountID: acct, KeyID: "key_1", Priced: "m", Cost: 300}
	if !e.settle(st) {
		t.Fatal("first settlement not applied")
	}
	if e.settle(st) {
		t.Fatal("second settlement applied")
	}
	st.Cost = 999 // a replay with other numbers changes nothing either
	if e.settle(st) {
		t.Fatal("third settlement applied")
	}
	// Nothing but the hold says whether a request settled: none is left.
	if n, err := e.rdb.HExists(e.ctx, acctKey(acct, "holds"), "r1").Result(); err != nil || n {
		t.Fatalf("hold of a settled request: %v, %v", n, err)
	}
	// A request never admitted does not settle.
	if e.settle(account.Settlement{RequestID: "never", AccountID: acct, Cost: 5, Status: 200}) {
		t.Fatal("a request without a hold settled")
	}
	if b := e.balance(acct); b != 700 {
		t.Fatalf("balance %d, want 700", b)
	}
	if l := e.ledger(acct); len(l) != 1 || l[0].Cost != 300 {
		t.Fatalf("ledger %+v", l)
	}
	r := e.usage(acct, ledger.Total)
	if r.Totals != (ledger.Counters{Requests: 1, Usage: usage.Usage{Input: 10, Output: 20}, Cost: 300}) || r.DailyUsed != 300 {
		t.Fatalf("usage %+v", r)
	}
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d", n, a)
	}
}

func testSettleAfterHoldExpiry(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	e.mustAdmit(acct, "r1", 400)
	e.mustAdmit(acct, "r2", 200)
	e.clock.Advance(holdTTL + time.Second)
	// A settlement whose hold expired but was not yet swept settles normally
	// and removes the hold.
	if !e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Cost: 350, Status: 200}) {
		t.Fatal("late settlement not applied")
	}
	if e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Cost: 350, Status: 200}) {
		t.Fatal("replayed late settlement applied")
	}
	if b := e.balance(acct); b != 650 {
		t.Fatalf("balance %d, want 650", b)
	}
	if n, a := e.holds(acct); n != 1 || a != 200 {
		t.Fatalf("holds %d, %d, want 1, 200", n, a)
	}
	r := e.sweep(acct)
	if len(r.Interrupted) != 1 || r.Interrupted[0].RequestID != "r2" {
		t.Fatalf("sweep %+v", r)
	}
	if l := e.ledger(acct); len(l) != 2 {
		t.Fatalf("%d ledger entries", len(l))
	}
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d", n, a)
	}
}

func testSettleNon2xx(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{DailyNanoUSD: 5000})
	_, k, err := e.s.CreateKey(e.ctx, acct, account.ModelKey, account.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.mustAdmit(acct, "r1", 500)
	ended := start.Add(3 * time.Second)
	st := account.Settlement{Usage: usage.Usage{Input: 100}, RequestID: "r1", AccountID: acct, KeyID: k.ID, Priced: "m", Cost: 123,
		Status: 529, Endpoint: "reserve", StartedAt: start, EndedAt: ended}
	if !e.settle(st) {
		t.Fatal("not applied")
	}
	if b := e.balance(acct); b != 1000 {
		t.Fatalf("balance %d", b)
	}
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Fatalf("holds %d, %d", n, a)
	}
	for _, p := range []ledger.Period{ledger.Day, ledger.Month, ledger.Total} {
		r := e.usage(acct, p)
		if r.Totals != (ledger.Counters{}) || len(r.ByModel) != 0 || r.DailyUsed != 0 {
			t.Fatalf("%s usage %+v", p, r)
		}
	}
	l := e.ledger(acct)
	if len(l) != 1 || l[0].Status != 529 || l[0].Cost != 0 || l[0].Usage.Input != 100 || l[0].Endpoint != "reserve" {
		t.Fatalf("ledger %+v", l)
	}
	keys, _ := e.s.ListKeys(e.ctx, acct)
	if !keys[0].LastUsedAt.Equal(ended) {
		t.Errorf("LastUsedAt %v", keys[0].LastUsedAt)
	}
	// Statuses around the 2xx range.
	for i, status := range []int{199, 200, 299, 300, 0} {
		st := account.Settlement{RequestID: fmt.Sprint("s", i), AccountID: acct, Cost: 1, Status: status}
		e.mustAdmit(acct, st.RequestID, 1)
		if _, err := e.s.Settle(e.ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if b := e.balance(acct); b != 998 {
		t.Fatalf("balance %d, want 998 (only 200 and 299 charge)", b)
	}
}

func testSettleErrors(t *testing.T, e *env) {
	acct := e.account(1000, account.Limits{})
	_, err := e.s.Settle(e.ctx, account.Settlement{RequestID: "r", AccountID: "acct_0000000000000000", Status: 200})
	wantErr(t, err, ErrNotFound)
	if _, err := e.s.Settle(e.ctx, account.Settlement{AccountID: acct, Status: 200}); err == nil {
		t.Error("empty request id accepted")
	}
	if _, err := e.s.Settle(e.ctx, account.Settlement{RequestID: "r", AccountID: acct, Cost: -1, Status: 200}); err == nil {
		t.Error("negative cost accepted")
	}
	if l := e.ledger(acct); len(l) != 0 {
		t.Fatalf("ledger %+v", l)
	}
	_, _, err = e.s.Ledger(e.ctx, "acct_0000000000000000", "", 10)
	wantErr(t, err, ErrNotFound)
	_, err = e.s.Usage(e.ctx, "acct_0000000000000000", ledger.Day)
	wantErr(t, err, ErrNotFound)
	if _, err := e.s.Usage(e.ctx, acct, "week"); err == nil {
		t.Error("unknown period accepted")
	}
}

func testPerModel(t *testing.T, e *env) {
	limits := account.Limits{DailyNanoUSD: usd, RPM: 100, WindowMinutes: 1}
	acct := e.account(usd, limits)
	models := []string{"zeta", "claude:sonnet:4", "claude"}
	for i := range 6 {
		m := models[i%3]
		req := fmt.Sprint("r", i)
		e.mustAdmit(acct, req, 1000)
		e.settle(account.Settlement{Usage: usage.Usage{Input: 1, Output: 2, CacheWrite5m: 3, CacheRead: 4}, RequestID: req, AccountID: acct, Priced: usage.PricedModel(m),
			Cost: int64(10 * (i + 1))})
	}
	r := e.usage(acct, ledger.Total)
	want := ledger.UsageReport{
		Balance:   usd - 210,
		Limits:    limits,
		DailyUsed: 210,
		Period:    ledger.Total,
		Totals:    ledger.Counters{Requests: 6, Usage: usage.Usage{Input: 6, Output: 12, CacheWrite5m: 18, CacheRead: 24}, Cost: 210},
		ByModel: []ledger.ModelCounters{
			{Model: "claude", Counters: ledger.Counters{Requests: 2, Usage: usage.Usage{Input: 2, Output: 4, CacheWrite5m: 6, CacheRead: 8}, Cost: 30 + 60}},
			{Model: "claude:sonnet:4", Counters: ledger.Counters{Requests: 2, Usage: usage.Usage{Input: 2, Output: 4, CacheWrite5m: 6, CacheRead: 8}, Cost: 20 + 50}},
			{Model: "zeta", Counters: ledger.Counters{Requests: 2, Usage: usage.Usage{Input: 2, Output: 4, CacheWrite5m: 6, CacheRead: 8}, Cost: 10 + 40}},
		},
	}
	if !usageEqual(r, want) {
		t.Fatalf("usage\n got %+v\nwant %+v", r, want)
	}
}

func usageEqual(a, b ledger.UsageReport) bool {
	return a.Balance == b.Balance && a.Limits == b.Limits && a.DailyUsed == b.DailyUsed &&
		a.Period == b.Period && a.Totals == b.Totals && slices.Equal(a.ByModel, b.ByModel)
}

func testPeriods(t *testing.T, e *env) {
	// The last second of November and the first of December, UTC.
	before := time.Date(2026, 11, 30, 23, 59, 59, 0, time.UTC)
	after := time.Date(2026, 12, 1, 0, 0, 1, 0, time.UTC)
	e.clock.Set(before.Add(-24 * time.Hour))
	acct := e.account(usd, account.Limits{})
	e.mustAdmit(acct, "r0", 10)
	e.settle(account.Settlement{RequestID: "r0", AccountID: acct, Priced: "a", Cost: 1})
	e.clock.Set(before)
	e.mustAdmit(acct, "r1", 10)
	e.settle(account.Settlement{RequestID: "r1", AccountID: acct, Priced: "a", Cost: 10})
	e.clock.Set(after)
	e.mustAdmit(acct, "r2", 10)
	e.settle(account.Settlement{RequestID: "r2", AccountID: acct, Priced: "b", Cost: 100})

	check := func(p ledger.Period, requests, cost, daily int64, models ...string) {
		t.Helper()
		r := e.usage(acct, p)
		var got []string
		for _, m := range r.ByModel {
			got = append(got, string(m.Model))
		}
		if r.Period != p || r.Totals.Requests != requests || r.Totals.Cost != cost || r.DailyUsed != daily ||
			!slices.Equal(got, models) {
			t.Errorf("at %v, %s: %+v", e.clock.Now(), p, r)
		}
	}
	check(ledger.Day, 1, 100, 100, "b")
	check(ledger.Month, 1, 100, 100, "b")
	check(ledger.Total, 3, 111, 100, "a", "b")
	e.clock.Set(before)
	check(ledger.Day, 1, 10, 10, "a")
	check(ledger.Month, 2, 11, 10, "a")
	check(ledger.Total, 3, 111, 10, "a", "b")
}

func testLedger(t *testing.T, e *env) {
	acct := e.account(usd, account.Limits{})
	var want []account.Settlement
	for i := range 5 {
		st := account.Settlement{Usage: usage.Usage{Input: int64(i), Output: 2, CacheWrite5m: 3, CacheRead: 4},
			RequestID: fmt.Sprint("r", i), AccountID: acct, KeyID: "key_abc", Priced: "claude:x",
			Cost:      5,
			Estimated: i%2 == 0, Status: 200, Endpoint: "primary", Stream: i%2 == 1,
			StartedAt: start.Add(time.Duration(i) * time.Second), EndedAt: start.Add(time.Duration(i)*time.Second + 1500*time.Millisecond),
		}
		e.mustAdmit(acct, st.RequestID, 10)
		e.settle(st)
		want = append(want, st)
	}
	var got []ledger.Entry
	after, pages := "", 0
	for {
		page, next, err := e.s.Ledger(e.ctx, acct, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		got = append(got, page...)
		if next == "" {
			break
		}
		after = next
	}
	if pages != 3 || len(got) != 5 {
		t.Fatalf("%d entries in %d pages", len(got), pages)
	}
	for i, g := range got {
		if g.ID == "" || !settlementEqual(g.Settlement, want[i]) {
			t.Errorf("entry %d\n got %+v\nwant %+v", i, g.Settlement, want[i])
		}
	}
	// A full last page says there is nothing after it only on the next call.
	page, next, err := e.s.Ledger(e.ctx, acct, got[3].ID, 1)
	if err != nil || len(page) != 1 || next != "" {
		t.Fatalf("last page %v, %q, %v", page, next, err)
	}
}

func settlementEqual(a, b account.Settlement) bool {
	a.StartedAt, b.StartedAt = a.StartedAt.UTC(), b.StartedAt.UTC()
	a.EndedAt, b.EndedAt = a.EndedAt.UTC(), b.EndedAt.UTC()
	return a == b
}

// testConcurrency admits and settles from many goroutines against a balance
// that covers about a quarter of them, each costing at most its hold.
func testConcurrency(t *testing.T, e *env) {
	const (
		workers  = 8
		requests = 25 // per worker
		hold     = 1000
	)
	initial := int64(workers * requests * hold / 4)
	acct := e.account(initial, account.Limits{})
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		admitted int
		charged  int64
		negative bool
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range requests {
				req := fmt.Sprintf("w%d-%d", w, i)
				d, err := e.s.Admit(e.ctx, &account.Admission{RequestID: req, AccountID: acct, Hold: hold})
				if err != nil {
					t.Error(err)
					return
				}
				if d.Outcome != account.Admitted {
					continue
				}
				cost, status := 1+rng.Int64N(hold), 200
				if rng.IntN(10) == 0 {
					status = 500
				}
				st := account.Settlement{Usage: usage.Usage{Input: 1}, RequestID: req, AccountID: acct, Priced: "m", Cost: cost, Status: status}
				if _, err := e.s.Settle(e.ctx, st); err != nil {
					t.Error(err)
					return
				}
				b, err := e.s.Balance(e.ctx, acct)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				admitted++
				if status == 200 {
					charged += cost
				}
				negative = negative || b < 0
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	final := e.balance(acct)
	if negative || final < 0 {
		t.Errorf("balance went below zero (final %d)", final)
	}
	var ledgerCost, ok2xx int64
	l := e.ledger(acct)
	for _, le := range l {
		ledgerCost += le.Cost
		if le.Status == 200 {
			ok2xx++
		}
	}
	total := e.usage(acct, ledger.Total).Totals
	if len(l) != admitted || ledgerCost != charged || initial-final != ledgerCost ||
		total.Cost != ledgerCost || total.Requests != ok2xx {
		t.Errorf("admitted %d, ledger %d entries costing %d, charged %d, balance change %d, counted %d requests costing %d",
			admitted, len(l), ledgerCost, charged, initial-final, total.Requests, total.Cost)
	}
	if admitted < workers*requests/4 || admitted == workers*requests {
		t.Errorf("admitted %d of %d", admitted, workers*requests)
	}
	if n, a := e.holds(acct); n != 0 || a != 0 {
		t.Errorf("holds %d, %d left", n, a)
	}
}

// A batch of settlements of several accounts applies each exactly once, as
// one by one would: duplicates inside the batch and replays of settled ids
// change nothing, and an unknown account fails only its own entries.
func testSettleBatch(t *testing.T, e *env) {
	a1, a2 := e.account(1000, account.Limits{}), e.account(1000, account.Limits{})
	for i, acct := range []string{a1, a1, a2, a1} {
		e.mustAdmit(acct, "r"+strconv.Itoa(i), 100)
	}
	st := func(acct string, i int, cost int64) account.Settlement {
		return account.Settlement{RequestID: "r" + strconv.Itoa(i), AccountID: acct, KeyID: "key_" + acct[5:9], Priced: "m",
			Usage: usage.Usage{Input: 10, Output: 5}, Cost: cost, Status: 200, EndedAt: start.Add(time.Duration(i) * time.Second)}
	}
	batch := []account.Settlement{st(a1, 0, 30), st(a1, 1, 40), st(a2, 2, 50), st(a1, 3, 60), st(a1, 1, 999),
		st("acct_0000000000000000", 9, 1)}
	batch[3].Status = 500
	res := e.s.SettleBatch(e.ctx, batch)
	want := []bool{true, true, true, true, false}
	for i, w := range want {
		if res[i].Err != nil || res[i].Applied != w {
			t.Fatalf("result %d: %+v, want applied %v", i, res[i], w)
		}
	}
	wantErr(t, res[5].Err, ErrNotFound)
	if b := e.balance(a1); b != 1000-70 {
		t.Fatalf("balance of a1 %d, want 930", b)
	}
	if b := e.balance(a2); b != 950 {
		t.Fatalf("balance of a2 %d, want 950", b)
	}
	if u := e.usage(a1, ledger.Day); u.Totals != (ledger.Counters{Requests: 2, Usage: usage.Usage{Input: 20, Output: 10}, Cost: 70}) || u.DailyUsed != 70 {
		t.Fatalf("usage of a1 %+v", u)
	}
	if l := e.ledger(a1); len(l) != 3 || l[0].RequestID != "r0" || l[2].RequestID != "r3" || l[2].Cost != 0 {
		t.Fatalf("ledger of a1 %+v", l)
	}
	for _, acct := range []string{a1, a2} {
		if n, a := e.holds(acct); n != 0 || a != 0 {
			t.Fatalf("holds of %s: %d, %d", acct, n, a)
		}
	}
	// A replay of the whole batch applies nothing.
	for i, r := range e.s.SettleBatch(e.ctx, batch[:5]) {
		if r.Err != nil || r.Applied {
			t.Fatalf("replayed result %d: %+v", i, r)
		}
	}
	if b := e.balance(a1); b != 930 {
		t.Fatalf("balance after replay %d", b)
	}
}

// A batch of many accounts' settlements (more than one script call holds,
// on a cluster in many slots) applies each once, and an account whose
// script part fails (its holds are not a hash) fails only its own entries.
func testSettleBatchAccounts(t *testing.T, e *env) {
	const accounts, each = 40, 5 // 200 requests: more than one call's
	var ids []string
	for a := range accounts {
		acct := e.account(1000, account.Limits{})
		ids = append(ids, acct)
		for i := range each {
			e.mustAdmit(acct, fmt.Sprintf("r%d_%d", a, i), 100)
		}
	}
	// Interleaved, as replies end.
	var batch []account.Settlement
	for i := range each {
		for a, acct := range ids {
			batch = append(batch, account.Settlement{RequestID: fmt.Sprintf("r%d_%d", a, i), AccountID: acct, KeyID: "key_x", Priced: "m",
				Usage: usage.Usage{Output: 5}, Cost: int64(10 + i), Status: 200})
		}
	}
	broken := ids[7]
	if err := e.rdb.Del(e.ctx, acctKey(broken, "holds")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(e.ctx, acctKey(broken, "holds"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		for i, r := range e.s.SettleBatch(e.ctx, batch) {
			switch {
			case batch[i].AccountID == broken:
				if r.Err == nil || r.Applied {
					t.Fatalf("round %d: %s of the broken account: %+v", round, batch[i].RequestID, r)
				}
			case r.Err != nil || r.Applied != (round == 0):
				t.Fatalf("round %d: %s: %+v", round, batch[i].RequestID, r)
			}
		}
	}
	for _, acct := range ids {
		if acct == broken {
			continue
		}
		if b, l := e.balance(acct), e.ledger(acct); b != 1000-(10+11+12+13+14) || len(l) != each {
			t.Fatalf("%s: balance %d, %d ledger entries", acct, b, len(l))
		}
		if n, _ := e.holds(acct); n != 0 {
			t.Fatalf("%s: %d holds left", acct, n)
		}
	}
	if b, l := e.balance(broken), e.ledger(broken); b != 1000 || len(l) != 0 {
		t.Fatalf("broken account: balance %d, %d ledger entries", b, len(l))
	}
	// A server that lost its scripts (a restart, a failover) is sent the
	// script again.
	acct := e.account(1000, account.Limits{})
	e.mustAdmit(acct, "after_flush", 100)
	if err := e.rdb.ScriptFlush(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	r := e.s.SettleBatch(e.ctx, []account.Settlement{{RequestID: "after_flush", AccountID: acct, Priced: "m", Cost: 10, Status: 200}})
	if r[0].Err != nil || !r[0].Applied || e.balance(acct) != 990 {
		t.Fatalf("after SCRIPT FLUSH: %+v, balance %d", r[0], e.balance(acct))
	}
}

// A settlement that arrives after its request was swept is reconciled: the
// difference from the sweep's charge is posted once, of either sign, capped
// at the hold; the ledger, the balance and the counters agree throughout.
func testSettleAfterSweep(t *testing.T, e *env) {
	acct := e.account(10_000, account.Limits{})
	const model = "m"
	ckpt := func(cost, out int64) *account.Checkpoint {
		return &account.Checkpoint{Status: 200, Priced: model, Usage: usage.Usage{Output: out}, Cost: cost}
	}
	// r1: swept at 100 (10 tokens), really 350 (35 tokens): +250.
	// r2: swept at 300 (30 tokens), really 120 (12 tokens): -180.
	// r3: swept at 100, really claims 900 for a hold of 400: capped at 400.
	// r4: swept before any checkpoint (499, nothing), really 200: +200 and
	//     one request.
	// r5: swept at 100 (10 output tokens), really 100 for 30 input tokens
	//     and no output: the cost unchanged, left out of the entry, and
	//     -10 output, a kind the settlement does not have.
	e.mustAdmit(acct, "r1", 400)
	e.mustAdmit(acct, "r2", 400)
	e.mustAdmit(acct, "r3", 400)
	e.mustAdmit(acct, "r4", 400)
	e.mustAdmit(acct, "r5", 400)
	if _, err := e.s.RenewHolds(e.ctx, []account.Renewal{
		{AccountID: acct, RequestID: "r1", Checkpoint: ckpt(100, 10)},
		{AccountID: acct, RequestID: "r2", Checkpoint: ckpt(300, 30)},
		{AccountID: acct, RequestID: "r3", Checkpoint: ckpt(100, 10)},
		{AccountID: acct, RequestID: "r5", Checkpoint: ckpt(100, 10)},
	}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(holdTTL + time.Second)
	if r := e.sweep(acct); len(r.Interrupted) != 5 {
		t.Fatalf("swept %+v", r)
	}
	if b := e.balance(acct); b != 10_000-600 {
		t.Fatalf("balance after the sweep %d", b)
	}
	real := func(id string, cost, out int64) account.Settlement {
		return account.Settlement{RequestID: id, AccountID: acct, Priced: model, Status: 200, Cost: cost, Usage: usage.Usage{Output: out}}
	}
	r5 := real("r5", 100, 0)
	r5.Usage.Input = 30
	sts := []account.Settlement{real("r1", 350, 35), real("r2", 120, 12), real("r3", 900, 90), real("r4", 200, 20), r5}
	for round := range 2 {
		res := e.s.SettleBatch(e.ctx, sts)
		for i, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			if r.Applied != (round == 0) || r.Reconciled != (round == 0) {
				t.Fatalf("round %d, %s: %+v", round, sts[i].RequestID, r)
			}
		}
	}
	want := int64(350 + 120 + 400 + 200 + 100)
	if b := e.balance(acct); b != 10_000-want {
		t.Fatalf("balance %d, want %d", b, 10_000-want)
	}
	l := e.ledger(acct)
	var cost, out, in int64
	diffs := map[string]int64{}
	for _, le := range l {
		cost += le.Cost
		out += le.Usage.Output
		in += le.Usage.Input
		if le.Reconciled && le.RequestID == "r5" && (le.Usage != usage.Usage{Input: 30, Output: -10}) {
			t.Errorf("r5 reconciled with usage %+v, want 30 in, -10 out", le.Usage)
		}
		if le.Reconciled {
			if le.Interrupted {
				t.Errorf("%s: reconciled entry flagged interrupted", le.RequestID)
			}
			diffs[le.RequestID] = le.Cost
		}
	}
	if len(l) != 10 || cost != want || out != 35+12+90+20 || in != 30 {
		t.Fatalf("%d ledger entries, cost %d, output %d", len(l), cost, out)
	}
	if d := (map[string]int64{"r1": 250, "r2": -180, "r3": 300, "r4": 200, "r5": 0}); !maps.Equal(diffs, d) {
		t.Fatalf("reconciled %v, want %v", diffs, d)
	}
	u := e.usage(acct, ledger.Total)
	if u.Totals.Cost != want || u.Totals.Requests != 5 || u.Totals.Usage.Output != out || u.Totals.Usage.Input != in {
		t.Fatalf("counters %+v", u.Totals)
	}
	// The sweep's records are gone with their reconciliation.
	if n, _ := e.rdb.Exists(e.ctx, acctKey(acct, "swept:r1"), acctKey(acct, "swept:r4")).Result(); n != 0 {
		t.Fatalf("%d swept records left", n)
	}
}

// Money is exact at every size or refused, and a refusal writes nothing:
// a top-up beyond the bound leaves its idempotency key unused.
func testMoneyBounds(t *testing.T, e *env) {
	acct := e.account(100, account.Limits{})
	if _, _, err := e.s.TopUp(e.ctx, acct, 1<<63-1, "k1"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("top-up of 2^63-1: %v", err)
	}
	if b, applied, err := e.s.TopUp(e.ctx, acct, 5, "k1"); err != nil || !applied || b != 105 {
		t.Fatalf("the key of a refused top-up was consumed: %d %v %v", b, applied, err)
	}
	big := e.account(MaxNanoUSD-10, account.Limits{})
	if _, _, err := e.s.TopUp(e.ctx, big, 11, "k2"); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a top-up past the bound: %v", err)
	}
	if b, applied, err := e.s.TopUp(e.ctx, big, 10, "k2"); err != nil || !applied || b != MaxNanoUSD {
		t.Fatalf("a top-up to the bound: %d %v %v", b, applied, err)
	}
	if _, err := e.s.CreateAccount(e.ctx, "x", MaxNanoUSD+1, account.Limits{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("an account above the bound: %v", err)
	}
	if err := e.s.SetLimits(e.ctx, acct, account.Limits{DailyNanoUSD: MaxNanoUSD + 1}); err == nil {
		t.Fatal("a limit above the bound accepted")
	}
	if err := CheckSettlement(account.Settlement{RequestID: "r", AccountID: acct, Cost: MaxNanoUSD + 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a cost above the bound: %v", err)
	}
	// Costs of a batch adding up beyond 2^52 are exact: the balance moves
	// by exactly their sum and the ledger and counters agree.
	const c = 1<<51 + 1
	rich := e.account(MaxNanoUSD, account.Limits{})
	var sts []account.Settlement
	for i := range 3 {
		id := "big" + strconv.Itoa(i)
		e.mustAdmit(rich, id, c)
		sts = append(sts, account.Settlement{RequestID: id, AccountID: rich, Priced: "m", Status: 200, Cost: c})
	}
	// A fourth hold would take the held amount past the balance.
	if d := e.admit(rich, "big3", c); d.Outcome != account.InsufficientBalance {
		t.Fatalf("a fourth hold: %+v", d)
	}
	for _, r := range e.s.SettleBatch(e.ctx, sts) {
		if r.Err != nil || !r.Applied {
			t.Fatalf("settle: %+v", r)
		}
	}
	if b := e.balance(rich); b != MaxNanoUSD-3*c {
		t.Fatalf("balance %d, want %d", b, int64(MaxNanoUSD-3*c))
	}
	var sum int64
	for _, le := range e.ledger(rich) {
		sum += le.Cost
	}
	if u := e.usage(rich, ledger.Total); sum != 3*c || u.Totals.Cost != 3*c {
		t.Fatalf("ledger %d, counters %d, want %d", sum, u.Totals.Cost, int64(3*c))
	}
}
