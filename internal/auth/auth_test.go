package auth

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
)

func TestParse(t *testing.T) {
	const k = "cr_abcdefghijklmnop"
	tests := []struct {
		xapi, auth string
		want       string
		err        error
	}{
		{xapi: k, want: k},
		{auth: "Bearer " + k, want: k},
		{auth: "bearer  " + k + " ", want: k},
		{xapi: k, auth: "Bearer " + k, want: k},
		{err: ErrMissing},
		{xapi: k, auth: "Bearer cr_other_key_1234", err: ErrConflicting},
		{auth: "Basic Zm9vOmJhcg==", err: ErrMalformed},
		{auth: "Bearer", err: ErrMalformed},
		{xapi: "short", err: ErrMalformed},
		{xapi: "cr_has space inside", err: ErrMalformed},
		{xapi: "cr_\xff\xfe_not_utf8_key", err: ErrMalformed},
	}
	for _, tt := range tests {
		got, err := Parse(tt.xapi, tt.auth)
		if !errors.Is(err, tt.err) || got != tt.want {
			t.Errorf("Parse(%q, %q) = %q, %v; want %q, %v", tt.xapi, tt.auth, got, err, tt.want, tt.err)
		}
	}
}

func TestKind(t *testing.T) {
	if Kind("cr_x") != account.ModelKey || Kind("ro_x") != account.ReadOnlyToken || Kind("sk-x") != "" {
		t.Fatal("Kind does not follow the prefixes")
	}
}

type fakeSource struct {
	keys  map[[32]byte]account.Key
	calls int
	err   error
}

func (f *fakeSource) LookupKey(_ context.Context, h [32]byte) (account.Key, error) {
	f.calls++
	if f.err != nil {
		return account.Key{}, f.err
	}
	k, ok := f.keys[h]
	if !ok {
		return account.Key{}, store.ErrNotFound
	}
	return k, nil
}

func TestCacheHitsMissesAndExpiry(t *testing.T) {
	src := &fakeSource{keys: map[[32]byte]account.Key{store.HashSecret("cr_known_secret"): {ID: "k1"}}}
	c := NewCache(src, time.Second)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		k, err := c.Lookup(ctx, "cr_known_secret")
		if err != nil || k.ID != "k1" {
			t.Fatalf("Lookup = %+v, %v", k, err)
		}
		if _, err := c.Lookup(ctx, "cr_unknown_secret"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown key: err = %v", err)
		}
	}
	if src.calls != 2 {
		t.Fatalf("store called %d times, want 2 (one per distinct secret)", src.calls)
	}
	now = now.Add(time.Second)
	c.Lookup(ctx, "cr_known_secret")
	if src.calls != 3 {
		t.Fatalf("after the TTL the store must be asked again; calls = %d", src.calls)
	}
}

func TestCacheDoesNotCacheStoreErrors(t *testing.T) {
	src := &fakeSource{err: errors.New("redis down")}
	c := NewCache(src, time.Minute)
	for i := 0; i < 2; i++ {
		if _, err := c.Lookup(context.Background(), "cr_known_secret"); err == nil || errors.Is(err, store.ErrNotFound) {
			t.Fatalf("err = %v, want the store error", err)
		}
	}
	if src.calls != 2 {
		t.Fatalf("calls = %d, want 2", src.calls)
	}
}

func TestCacheBounded(t *testing.T) {
	src := &fakeSource{}
	c := NewCache(src, time.Minute)
	c.max = 10
	for i := 0; i < 100; i++ {
		c.Lookup(context.Background(), "cr_random_"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	if n := len(c.entries); n > 10 {
		t.Fatalf("cache holds %d entries, bound is 10", n)
	}
}

func TestProblem(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if p := Problem(account.Key{}, now); p != "" {
		t.Fatalf("fresh key: %q", p)
	}
	if p := Problem(account.Key{RevokedAt: now}, now); p == "" {
		t.Fatal("revoked key accepted")
	}
	if p := Problem(account.Key{ExpiresAt: now.Add(-time.Second)}, now); p == "" || !strings.Contains(p, "expired") {
		t.Fatalf("expired key: %q", p)
	}
	if p := Problem(account.Key{ExpiresAt: now.Add(time.Second)}, now); p != "" {
		t.Fatalf("key in its grace period refused: %q", p)
	}
}

func TestParseHeadersRefusesRepeats(t *testing.T) {
	const k = "cr_abcdefghijklmnop"
	for _, h := range []Headers{
		{XAPIKey: []string{k, k}},
		{Authorization: []string{"Bearer " + k, "Bearer " + k}},
		{XAPIKey: []string{k + ", " + k}},
		{Authorization: []string{"Bearer " + k + ",Bearer " + k}},
	} {
		if _, err := ParseHeaders(h); !errors.Is(err, ErrRepeated) {
			t.Errorf("ParseHeaders(%+v) = %v, want ErrRepeated", h, err)
		}
	}
	if got, err := ParseHeaders(Headers{XAPIKey: []string{k}, Authorization: []string{"Bearer " + k}}); err != nil || got != k {
		t.Fatalf("the same key twice: %q, %v", got, err)
	}
}

func TestAuthenticate(t *testing.T) {
	now := time.Now()
	keys := map[string]account.Key{
		"cr_goodgoodgood": {ID: "k1", AccountID: "a", Kind: account.ModelKey},
		"ro_goodgoodgood": {ID: "k2", AccountID: "a", Kind: account.ReadOnlyToken},
		"cr_suspendedkey": {ID: "k3", AccountID: "b", Kind: account.ModelKey, AccountSuspended: true},
		"cr_revokedkey12": {ID: "k4", AccountID: "a", Kind: account.ModelKey, RevokedAt: now.Add(-time.Minute)},
	}
	src := &fakeSource{keys: map[[32]byte]account.Key{}}
	for s, k := range keys {
		src.keys[store.HashSecret(s)] = k
	}
	c := NewCache(src, time.Nanosecond)
	model := Policy{Kinds: []account.KeyKind{account.ModelKey}}
	usage := Policy{Kinds: []account.KeyKind{account.ModelKey, account.ReadOnlyToken}, AllowSuspended: true}
	for _, tt := range []struct {
		secret string
		p      Policy
		want   Reason // 0: accepted
	}{
		{"cr_goodgoodgood", model, 0},
		{"ro_goodgoodgood", model, WrongKind},
		{"ro_goodgoodgood", usage, 0},
		{"cr_suspendedkey", model, Suspended},
		{"cr_suspendedkey", usage, 0},
		{"cr_revokedkey12", model, Unauthenticated},
		{"cr_unknownkey12", model, Unauthenticated},
		{"sk_notourkind12", usage, Unauthenticated},
	} {
		_, err := c.Authenticate(context.Background(), Headers{XAPIKey: []string{tt.secret}}, now, tt.p)
		var ae *Error
		switch {
		case tt.want == 0 && err != nil:
			t.Errorf("%s: %v, want accepted", tt.secret, err)
		case tt.want != 0 && (!errors.As(err, &ae) || ae.Reason != tt.want):
			t.Errorf("%s: %v, want reason %d", tt.secret, err, tt.want)
		}
	}
	src.err = errors.New("down")
	_, err := c.Authenticate(context.Background(), Headers{XAPIKey: []string{"cr_otherkey1234"}}, now, model)
	var ae *Error
	if !errors.As(err, &ae) || ae.Reason != Unavailable {
		t.Fatalf("store down: %v", err)
	}
}
