package leases

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// window sums an account's token window: settled and held tokens.
func window(t *testing.T, rdb *redis.Client, acct string) (settled, held int64) {
	t.Helper()
	v, err := rdb.HGet(context.Background(), "gw:{acct:"+acct+"}:acct", "tw").Result()
	if err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	f := strings.Fields(v)
	for i := 0; i+2 < len(f); i += 3 {
		s, _ := strconv.ParseInt(f[i+1], 10, 64)
		h, _ := strconv.ParseInt(f[i+2], 10, 64)
		settled, held = settled+s, held+h
	}
	return settled, held
}

// An account with a tokens-per-minute limit: its lease holds tokens; a
// request from the lease needs its token bound of them, until their
// bucket ends; its settlement counts what it used in place of its bound;
// Close takes the free tokens out of the window.
func TestAdmitFromLeaseWithTokenLimit(t *testing.T) {
	r := newRig(t)
	rdb, m, c := r.rdb, r.m, r.clock
	acct := r.limited(account.Limits{TPM: 80_000})
	const hold, bound = 10_000_000, 1000
	admit := func() account.Decision {
		t.Helper()
		return r.admitTokens(acct, hold, bound)
	}
	admit() // by the script; asks for a lease
	m.Renew(r.ctx, false)
	// Tokens: twice the one bound seen, at least DefaultMinTokenBounds.
	if _, held := window(t, rdb, acct); held != bound+2*bound {
		t.Fatalf("%d tokens held, want the script's %d and the lease's %d", held, bound, 2*bound)
	}
	sts := []account.Settlement{r.leased(acct, hold, bound), r.leased(acct, hold, bound)}
	for i := range sts {
		sts[i].Usage = usage.Usage{Input: 100}
	}
	if d := admit(); d.Lease.ID != "" {
		t.Fatalf("admitted from the lease beyond its tokens: %+v", d)
	}
	// One settles before its record is sent, the other after.
	m.Settled(sts[0].Lease)
	r.settle(sts[0])
	m.flush(r.ctx)
	r.settle(sts[1])
	if settled, held := window(t, rdb, acct); settled != 200 || held != 2*bound {
		t.Fatalf("window: %d settled, %d held; want the two leased requests' 200 used, the script's two bounds held", settled, held)
	}
	// Renewed: tokens again (twice the 4 bounds of the interval), usable
	// until their bucket ends, not after.
	m.Renew(r.ctx, true)
	if d := admit(); d.Lease.ID == "" {
		t.Fatalf("not admitted from the renewed lease: %+v", d)
	}
	c.Advance(15 * time.Second)
	if d := admit(); d.Lease.ID != "" {
		t.Fatalf("admitted from tokens past their bucket: %+v", d)
	}
	m.Close(r.ctx)
	if _, held := window(t, rdb, acct); held != 4*bound {
		t.Fatalf("%d tokens held after Close, want the 4 open requests' bounds", held)
	}
}

// Two sidecars' managers and the store's script race for one account's
// tokens per minute with requests that do not end: the window never
// counts more than the limit, and once the leases are returned it holds
// exactly the admitted requests' bounds.
func TestTokenLimitRaceTwoSidecars(t *testing.T) {
	const limit, bound = 120, 1000
	raceTwoSidecars(t, account.Limits{TPM: limit * bound}, bound, func(l *lease) { l.bounds = 50 * bound }, func(r *race) {
		_, held := window(t, r.rdb, r.acct)
		if n := r.admitted; n > limit || held != n*bound {
			t.Fatalf("%d admitted, %d tokens held: want at most %d, each bound held once", n, held, limit)
		}
		r.earlyRefusals(t, limit)
	})
}
