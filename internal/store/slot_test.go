package store

import (
	"testing"

	"github.com/modelgateway/gateway/internal/account"
)

// The hash slots are the cluster's: the specification's check value and
// slots CLUSTER KEYSLOT gives.
func TestHashSlot(t *testing.T) {
	for tag, want := range map[string]int{"123456789": 0x31c3, "foo": 12182, "bar": 5061, "": 0} {
		if got := hashSlot(tag); got != want {
			t.Errorf("hashSlot(%q) = %d, want %d", tag, got, want)
		}
	}
}

// settleArgsPerRequest is the ARGV of a charged settlement with every field set,
// and settleKeysMax the KEYS of requests that share nothing.
func TestSettleArgsPerRequest(t *testing.T) {
	st := filledSettlement()
	st.AccountID, st.KeyID, st.Lease.ID = "acct_1", "key_1", "lease_1"
	st.Status = 200 // charged: its cost is a counter and a ledger field
	_, args := New(nil, Options{}).settleCall(nil, nil, []account.Settlement{st})
	if got := len(args) - 9; got != settleArgsPerRequest {
		t.Fatalf("a settlement takes %d ARGV, settleArgsPerRequest is %d", got, settleArgsPerRequest)
	}
	other := st
	other.RequestID, other.KeyID, other.ProjectID, other.Lease.ID = "req_2", "key_2", "proj_2", "lease_2"
	keys, _ := New(nil, Options{}).settleCall(nil, nil, []account.Settlement{st, other})
	if len(keys) != settleKeysMax(2) {
		t.Fatalf("two requests that share nothing take %d KEYS, settleKeysMax says %d", len(keys), settleKeysMax(2))
	}
}
