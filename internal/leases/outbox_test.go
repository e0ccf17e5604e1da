package leases

import (
	"path/filepath"
	"testing"

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
	r.m = New(r.st, r.st, Options{Now: r.clock.Now, Outbox: box})
	r.m.Resend(left)
	return box
}

// A leased request is in the outbox from its admission until Redis holds
// it (its record sent) or has its settlement (Release after Settled).
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
	r.m.Release(kept)
	if box.Kept() != 0 {
		t.Fatalf("%d kept after the settlement was applied", box.Kept())
	}
}

// What a sidecar killed before sending its records left in the outbox is
// sent by the next one: each request is then held in Redis, for the
// sweeper, and its entry is dropped.
func TestResendRecordsWhatAPreviousRunLeft(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t)
	box := r.withOutbox(dir, 16)
	acct := r.account(1000 * usd)
	const hold = 10_000_000
	r.admit(acct, hold)
	r.m.Renew(r.ctx, false)
	r.leased(acct, hold, 0)
	r.leased(acct, hold, 0)
	// The process dies: nothing is sent, the outbox is left as it is.
	box.Close()
	if n, _, err := r.st.OpenHolds(r.ctx, acct); err != nil || n != 1 {
		t.Fatalf("%d holds before the resend (%v), want the script's only", n, err)
	}

	box, left, _, err := outbox.Open(filepath.Join(dir, "outbox"), 16)
	if err != nil {
		t.Fatal(err)
	}
	defer box.Close()
	next := New(r.st, r.st, Options{Now: r.clock.Now, Outbox: box})
	if n := next.Resend(left); n != 2 || len(left) != 2 {
		t.Fatalf("resent %d of %d entries, want 2", n, len(left))
	}
	next.flush(r.ctx)
	if n, _, err := r.st.OpenHolds(r.ctx, acct); err != nil || n != 3 {
		t.Fatalf("%d holds after the resend (%v), want the two leased requests held too", n, err)
	}
	if box.Kept() != 0 {
		t.Fatalf("%d entries kept after their records were sent", box.Kept())
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
	if n, _, _ := r.st.OpenHolds(r.ctx, acct); n != 2 || r.m.Unkept.Load() != 1 || box.Kept() != 1 {
		t.Fatalf("%d holds, %d unkept, %d kept; want the second request recorded at once", n, r.m.Unkept.Load(), box.Kept())
	}
}
