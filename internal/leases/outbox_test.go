package leases

import (
	"path/filepath"
	"testing"

	"github.com/modelgateway/gateway/internal/account"

	"github.com/modelgateway/gateway/internal/outbox"
)

// withOutbox gives the rig's manager an outbox of slots entries in dir.
func (r *rig) withOutbox(dir string, slots int) *outbox.Outbox {
	r.t.Helper()
	box, left, _, err := outbox.Open(filepath.Join(dir, "outbox"), slots)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { box.Close() })
	if len(left) != 0 {
		r.t.Fatalf("a new outbox holds %d entries", len(left))
	}
	r.m = New(r.st, r.st, Options{Now: r.clock.Now, Outbox: box})
	return box
}

// A leased request is in the outbox from its admission until Redis holds
// it (its record sent), or until Settled hands its entry to the settler.
func TestOutboxKeepsALeasedRequestUntilRedisHasIt(t *testing.T) {
	r := newRig(t)
	box := r.withOutbox(t.TempDir(), 16)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	r.admit(acct, hold) // by the script; it asks for the lease
	r.m.Renew(r.ctx, false)
	if box.Kept() != 0 {
		t.Fatalf("%d kept for a request the script admitted (Redis holds it)", box.Kept())
	}
	recorded := r.leased(acct, hold, 0)
	settled := r.leased(acct, hold, 0)
	if box.Kept() != 2 {
		t.Fatalf("%d kept after two leased admissions, want 2", box.Kept())
	}
	kept := r.m.Settled(settled.Lease)
	if kept == 0 || box.Kept() != 2 {
		t.Fatalf("settled: entry %d, %d kept; the entry must stay until the settlement is applied", kept, box.Kept())
	}
	r.m.flush(r.ctx)
	if box.Kept() != 1 {
		t.Fatalf("%d kept after the records were sent, want only the settled request's", box.Kept())
	}
	r.settle(recorded, settled)
	box.Drop(kept) // as the settler does, its settlement kept or applied
	if box.Kept() != 0 {
		t.Fatalf("%d kept after the settlement was applied", box.Kept())
	}
}

// What a sidecar killed before sending its records left in the outbox
// reads back as the records it would have sent, and sending them holds
// each request in Redis, for the sweeper.
func TestAKilledRunLeavesItsRecords(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t)
	box := r.withOutbox(dir, 16)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	a := r.leased(acct, hold, 0)
	b := r.leased(acct, hold, 0)
	// The process dies: nothing is sent, the outbox is left as it is.
	box.Close()

	box, left, _, err := outbox.Open(filepath.Join(dir, "outbox"), 16)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	var recs []account.LeasedRequest
	for _, e := range left {
		kind, rec, _, err := outbox.Decode(e)
		if err != nil || kind != outbox.KindRecord {
			t.Fatalf("entry %d: kind %q, %v", e.Slot, kind, err)
		}
		recs = append(recs, rec)
	}
	ids := map[string]account.LeaseRef{}
	for _, rec := range recs {
		ids[rec.Admission.RequestID] = rec.Lease
	}
	if len(ids) != 2 || ids[a.RequestID] != a.Lease || ids[b.RequestID] != b.Lease {
		t.Fatalf("left records %v, want %s and %s with their leases", ids, a.RequestID, b.RequestID)
	}
	if err := r.st.RecordLeased(r.ctx, recs); err != nil {
		t.Fatal(err)
	}
	if n, _, err := r.st.OpenHolds(r.ctx, acct); err != nil || n != 3 {
		t.Fatalf("%d holds after sending them (%v), want the two leased requests held too", n, err)
	}
}

// A leased request the outbox has no room for is recorded before Admit
// returns, so that Redis holds it before it is forwarded.
func TestFullOutboxRecordsAtOnce(t *testing.T) {
	r := newRig(t)
	box := r.withOutbox(t.TempDir(), 1)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	r.leased(acct, hold, 0) // takes the one slot
	if n, _, _ := r.st.OpenHolds(r.ctx, acct); n != 1 {
		t.Fatalf("%d holds; the kept request must wait for its round", n)
	}
	r.leased(acct, hold, 0)
	if n, _, _ := r.st.OpenHolds(r.ctx, acct); n != 2 || box.Refused() != 1 || box.Kept() != 1 {
		t.Fatalf("%d holds, %d refused, %d kept; want the second request recorded at once", n, box.Refused(), box.Kept())
	}
}
