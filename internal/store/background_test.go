package store

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// A parked response is handed to one claimer per period, and found by its
// account until it is unparked.
func TestParkAndClaim(t *testing.T) {
	mr := miniredis.RunT(t)
	s := New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), Options{})
	ctx := context.Background()
	t0 := time.UnixMilli(1_000_000)
	p := account.Parked{ResponseID: "resp_1", Upstream: "beta", Settlement: account.Settlement{RequestID: "req_1", AccountID: "acct_a", Requested: "m"}}
	if err := s.Park(ctx, p, t0); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Parked(ctx, "acct_a", "resp_1")
	if err != nil || !ok || got.Settlement.RequestID != "req_1" || got.Upstream != "beta" {
		t.Fatalf("Parked: %+v %v %v", got, ok, err)
	}
	if _, ok, _ := s.Parked(ctx, "acct_b", "resp_1"); ok {
		t.Fatal("another account finds the parked response")
	}
	if refs, _ := s.ClaimDue(ctx, t0.Add(-time.Millisecond), t0.Add(time.Second), 10); len(refs) != 0 {
		t.Fatalf("claimed before due: %v", refs)
	}
	refs, err := s.ClaimDue(ctx, t0, t0.Add(time.Second), 10)
	if err != nil || len(refs) != 1 || refs[0] != (account.BackgroundRef{AccountID: "acct_a", ResponseID: "resp_1"}) {
		t.Fatalf("ClaimDue: %v %v", refs, err)
	}
	// A second claimer in the same period gets nothing; after it, again.
	if refs, _ := s.ClaimDue(ctx, t0.Add(500*time.Millisecond), t0.Add(2*time.Second), 10); len(refs) != 0 {
		t.Fatalf("claimed twice in one period: %v", refs)
	}
	if refs, _ := s.ClaimDue(ctx, t0.Add(time.Second), t0.Add(2*time.Second), 10); len(refs) != 1 {
		t.Fatalf("not claimed again when due: %v", refs)
	}
	if err := s.Unpark(ctx, "acct_a", "resp_1"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Parked(ctx, "acct_a", "resp_1"); ok {
		t.Fatal("still parked")
	}
	if refs, _ := s.ClaimDue(ctx, t0.Add(time.Hour), t0.Add(2*time.Hour), 10); len(refs) != 0 {
		t.Fatalf("unparked yet claimed: %v", refs)
	}
}

// Ownership records: the first owner stays.
func TestBindResponse(t *testing.T) {
	mr := miniredis.RunT(t)
	s := New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), Options{})
	ctx := context.Background()
	if o, err := s.ResponseOwner(ctx, "resp_1"); o != "" || err != nil {
		t.Fatalf("owner of an unknown id: %q %v", o, err)
	}
	s.Bind(ctx, account.Binding{Account: "acct_a", IDs: []string{"resp_1"}})
	s.Bind(ctx, account.Binding{Account: "acct_b", IDs: []string{"resp_1"}})
	if o, _ := s.ResponseOwner(ctx, "resp_1"); o != "acct_a" {
		t.Fatalf("owner %q", o)
	}
	if ttl := mr.TTL("gw:resp:resp_1"); ttl != DefaultResponseTTL {
		t.Fatalf("ttl %v", ttl)
	}
}

// Items of a stored response are bound in one round trip, each to its
// first owner, and read back as responses are.
func TestBindItems(t *testing.T) {
	mr := miniredis.RunT(t)
	s := New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), Options{})
	ctx := context.Background()
	if err := s.Bind(ctx, account.Binding{Account: "acct_a", IDs: nil}); err != nil {
		t.Fatal(err)
	}
	if err := s.Bind(ctx, account.Binding{Account: "acct_a", IDs: []string{"msg_1", "rs_1"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Bind(ctx, account.Binding{Account: "acct_b", IDs: []string{"rs_1", "fc_1"}}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"msg_1": "acct_a", "rs_1": "acct_a", "fc_1": "acct_b", "msg_2": ""} {
		if o, err := s.ResponseOwner(ctx, id); o != want || err != nil {
			t.Errorf("owner of %s: %q %v, want %q", id, o, err, want)
		}
	}
	if ttl := mr.TTL("gw:resp:msg_1"); ttl != DefaultResponseTTL {
		t.Fatalf("ttl %v", ttl)
	}
	// Many read at once, in one round trip, unknown ones "".
	owners, _, err := s.ResponseOwners(ctx, []string{"msg_2", "fc_1", "msg_1"})
	if err != nil || !slices.Equal(owners, []string{"", "acct_b", "acct_a"}) {
		t.Fatalf("owners %q, %v", owners, err)
	}
}

// A binding's vendor key is kept beside its owner, with its lifetime, and
// first write wins for it as for the owner; a binding without one reads "".
func TestBindKeepsTheCreatingKey(t *testing.T) {
	mr := miniredis.RunT(t)
	s := New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), Options{})
	ctx := context.Background()
	if err := s.Bind(ctx, account.Binding{Account: "acct_a", Key: "k2", IDs: []string{"resp_1", "msg_1"}}, account.Binding{Account: "acct_a", IDs: []string{"resp_2"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Bind(ctx, account.Binding{Account: "acct_b", Key: "k1", IDs: []string{"resp_1"}}); err != nil {
		t.Fatal(err)
	}
	owners, keys, err := s.ResponseOwners(ctx, []string{"resp_1", "msg_1", "resp_2", "resp_3"})
	if err != nil || !slices.Equal(owners, []string{"acct_a", "acct_a", "acct_a", ""}) || !slices.Equal(keys, []string{"k2", "k2", "", ""}) {
		t.Fatalf("owners %q keys %q, %v", owners, keys, err)
	}
	if ttl := mr.TTL("gw:respkey:resp_1"); ttl != DefaultResponseTTL {
		t.Fatalf("ttl %v", ttl)
	}
}
