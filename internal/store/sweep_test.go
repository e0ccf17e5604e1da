package store

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
)

// A request whose sidecar died after the reply started but before its first
// full checkpoint (the one the renewer stored says only "200 from the
// primary") is settled by the sweep under the model it was priced as, with
// the name the client sent kept as the requested one: an alias never gets a
// usage row of its own.
func TestSweepWithoutCheckpointUsesPricedModel(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	e := newEnv(t, rdb)
	acct := e.account(1_000_000, account.Limits{})
	a := account.Admission{RequestID: "r1", AccountID: acct, KeyID: "key_1", Priced: "claude-sonnet-4-5-20250929", Requested: "sonnet", Hold: 500}
	if d, err := e.s.Admit(e.ctx, &a); err != nil || d.Outcome != account.Admitted {
		t.Fatalf("admit: %+v %v", d, err)
	}
	ck := account.Checkpoint{Status: 200, Endpoint: "primary"}
	if _, err := e.s.RenewHolds(e.ctx, []account.Renewal{{AccountID: acct, RequestID: "r1", Checkpoint: &ck}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(holdTTL + 1)
	r := e.sweep(acct)
	if len(r.Interrupted) != 1 {
		t.Fatalf("swept %+v", r)
	}
	if st := r.Interrupted[0]; st.Priced != a.Priced || st.Requested != a.Requested {
		t.Fatalf("swept as priced %q, requested %q; want %q, %q", st.Priced, st.Requested, a.Priced, a.Requested)
	}
	rows := e.usage(acct, ledger.Total).ByModel
	if len(rows) != 1 || rows[0].Model != a.Priced || rows[0].Requests != 1 {
		t.Fatalf("usage by model %+v, want one request under %s", rows, a.Priced)
	}
}
