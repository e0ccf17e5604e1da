package main

import (
	"testing"

	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/usage"
)

// A key's drift is the sum of its rows' unexplained differences, models
// and signs together; explained differences are not drift.
func TestDrifts(t *testing.T) {
	rep := reconcile.Report{Rows: []reconcile.Row{
		{Upstream: "alpha", VendorKey: "k1", VendorKeyID: "id1", Model: "m", Unexplained: reconcile.Difference{Usage: usage.Usage{Input: 10, Output: 2}, Cost: 30}},
		{Upstream: "alpha", VendorKey: "k1", VendorKeyID: "id1", Model: "n", Unexplained: reconcile.Difference{Usage: usage.Usage{Input: -4}, Cost: -8}},
		{Upstream: "alpha", VendorKey: "k2", VendorKeyID: "id2", Model: "m", Explained: map[string]reconcile.Difference{reconcile.AbandonedAttempts: {Usage: usage.Usage{Input: 9}, Cost: 9}}},
		{Upstream: "beta", VendorKey: "k1", VendorKeyID: "idb", Model: "m", Unexplained: reconcile.Difference{Usage: usage.Usage{Output: 1}, Cost: 5}},
	}}
	got := drifts(rep)
	want := []keyDrift{{"alpha", "k1", "id1", 8, 22}, {"alpha", "k2", "id2", 0, 0}, {"beta", "k1", "idb", 1, 5}}
	if len(got) != len(want) {
		t.Fatalf("%+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("drift %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
