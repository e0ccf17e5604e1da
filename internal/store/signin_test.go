package store

import (
	"testing"
	"time"
)

// Sign-in attempts: at most PerAddr per window from one address and
// PerCredential against one credential; a refused attempt counts nowhere
// and hears when the oldest counted one leaves the window.
func testSignInAttempts(t *testing.T, e *env) {
	l := SignInLimits{Window: time.Minute, PerAddr: 3, PerCredential: 5}
	attempt := func(addr, cred string) (bool, time.Duration) {
		t.Helper()
		ok, wait, err := e.s.SignInAttempt(e.ctx, addr, cred, l)
		if err != nil {
			t.Fatal(err)
		}
		return ok, wait
	}
	t0 := e.clock.Now()
	for i := range 3 {
		if ok, _ := attempt("192.0.2.1", "c1"); !ok {
			t.Fatalf("attempt %d refused", i)
		}
		e.clock.Advance(10 * time.Second)
	}
	// The address is spent: refused until its first attempt is a minute old.
	if ok, wait := attempt("192.0.2.1", "c1"); ok || wait != t0.Add(time.Minute).Sub(e.clock.Now()) {
		t.Fatalf("fourth from one address: %v, wait %v", ok, wait)
	}
	// Another address against the same credential: 2 more fit (5 in all).
	for i := range 2 {
		if ok, _ := attempt("2001:db8::1", "c1"); !ok {
			t.Fatalf("other address, attempt %d refused", i)
		}
	}
	if ok, wait := attempt("2001:db8::2", "c1"); ok || wait != t0.Add(time.Minute).Sub(e.clock.Now()) {
		t.Fatalf("sixth against one credential: %v, wait %v", ok, wait)
	}
	// Another credential from a fresh address is counted apart.
	if ok, _ := attempt("2001:db8::2", "c2"); !ok {
		t.Fatal("another credential refused")
	}
	// A minute after the first attempt, one more fits at both.
	e.clock.Set(t0.Add(time.Minute))
	if ok, _ := attempt("192.0.2.1", "c1"); !ok {
		t.Fatal("refused after the oldest attempt left the window")
	}
	if ok, _ := attempt("192.0.2.1", "c1"); ok {
		t.Fatal("a second attempt fitted where one had left")
	}
	// Refused attempts were not counted: the refusals above took no room.
	e.clock.Set(t0.Add(time.Minute + 20*time.Second))
	if ok, _ := attempt("192.0.2.1", "c1"); !ok {
		t.Fatal("refused attempts were counted")
	}
	// Keys expire with the window: nothing is kept for idle addresses.
	if ttl := e.rdb.PTTL(e.ctx, "gw:{signin}:addr:2001:db8::1").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("ttl %v", ttl)
	}
}
