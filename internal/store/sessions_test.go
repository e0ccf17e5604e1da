package store

import (
	"strconv"
	"testing"
	"time"
)

// A console session is read by every store client, kept alive by use for
// its idle time, never past its lifetime, and gone once ended.
func testSessions(t *testing.T, e *env) {
	const idle, lifetime = 10 * time.Minute, 30 * time.Minute
	created := strconv.FormatInt(e.clock.Now().UnixMilli(), 10)
	put := func(key string) {
		t.Helper()
		if err := e.s.PutSession(e.ctx, key, map[string]string{"actor": "sso:ann", "created": created}, idle); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(key string) map[string]string {
		t.Helper()
		m, err := e.s.TouchSession(e.ctx, key, idle, lifetime)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	put("op:aa")
	if m := touch("op:aa"); m["actor"] != "sso:ann" || m["created"] != created {
		t.Fatalf("session read %v", m)
	}
	if ttl := e.rdb.PTTL(e.ctx, "gw:console:op:aa").Val(); ttl <= 0 || ttl > idle {
		t.Fatalf("TTL %v, want within the idle time", ttl)
	}
	// Past its lifetime (the clock is the caller's): gone, and deleted.
	e.clock.Advance(lifetime)
	if m := touch("op:aa"); m != nil {
		t.Fatalf("session past its lifetime read %v", m)
	}
	if n := e.rdb.Exists(e.ctx, "gw:console:op:aa").Val(); n != 0 {
		t.Fatal("a session past its lifetime is kept")
	}
	// Near its lifetime, its TTL is what is left of it.
	created = strconv.FormatInt(e.clock.Now().UnixMilli(), 10)
	put("cust:bb")
	e.clock.Advance(lifetime - time.Minute)
	if touch("cust:bb") == nil {
		t.Fatal("a live session not read")
	}
	if ttl := e.rdb.PTTL(e.ctx, "gw:console:cust:bb").Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("TTL %v, want at most the minute left of its lifetime", ttl)
	}
	if err := e.s.EndSession(e.ctx, "cust:bb"); err != nil {
		t.Fatal(err)
	}
	if m := touch("cust:bb"); m != nil {
		t.Fatalf("an ended session read %v", m)
	}
	if m := touch("op:none"); m != nil {
		t.Fatalf("no session read as %v", m)
	}
	for _, bad := range []string{"", "op:A", "op:a b", "op:{x}"} {
		if e.s.PutSession(e.ctx, bad, map[string]string{"created": created}, idle) == nil {
			t.Errorf("session key %q accepted", bad)
		}
	}
}
