package extproc

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/leases"
	"github.com/modelgateway/gateway/internal/store"
)

// With leases on (the default), most requests are admitted from a lease,
// with no Redis round trip on their critical path, and records and
// settlements go in batches: under a load of many requests, at most two
// round trips per request in all, renewals included.
func TestRoundTripsPerLeasedRequest(t *testing.T) {
	r := newRig(t)
	m := leases.New(r.st, r.st, leases.Options{Interval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	r.srv.admitter = m
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go m.Run(ctx)
	// The first requests go to the store and ask for a lease; wait for one
	// admitted from it.
	for deadline := time.Now().Add(10 * time.Second); ; {
		before := r.trips.critical.Load()
		r.request(t)
		if r.trips.critical.Load() == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no request admitted from a lease")
		}
	}
	if err := r.srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 300
	before, criticalBefore := r.trips.n.Load(), r.trips.critical.Load()
	for range n {
		r.request(t)
	}
	if err := r.srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	m.Close(ctx) // what is left to record, and the lease returned
	// A lease sized for the rate seen so far runs out now and then: the
	// request it no longer covers goes to the store (and asks for more).
	// How often depends on the rate the machine allows (a tenth of the
	// requests on a loaded one), so the bound is what "most" says.
	if got := r.trips.critical.Load() - criticalBefore; got >= n/2 {
		t.Errorf("%d Redis round trips on the critical paths of %d requests, want most admitted from a lease", got, n)
	}
	got := r.trips.n.Load() - before
	t.Logf("%d Redis round trips for %d leased requests: %.3f per request", got, n, float64(got)/n)
	if got > 2*n {
		t.Errorf("%d Redis round trips for %d leased requests, want at most %d", got, n, 2*n)
	}
	rep, err := r.st.Usage(ctx, r.acct, store.Total)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Requests < n {
		t.Fatalf("usage counts %d requests, want at least %d", rep.Totals.Requests, n)
	}
}
