package e2e

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
	"github.com/modelgateway/gateway/test/launch"
)

// The continuous run, on 1-minute windows, with two sidecars on one
// Redis: one runs it (the lease), keeping each window. Usage billed to a
// key outside the gateway, in a window already kept, shows when the
// windows are run again from the start: that window's row is unexplained
// by exactly that much, and alerts reconcile.drift once; every other
// window's kept result is the same, byte for byte. Redis down for a
// while (the runner's looks fail), the runner killed and restarted, and
// the windows run once more: the same results, and no alert again.
func TestReconcileContinuous(t *testing.T) {
	const secret = "whsec-reconcile-7e2a"
	recv := newWebhookReceiver(t, secret)
	recv.failing = "none"
	conf := func(c *config.Config) {
		c.Reconcile = config.Reconcile{BucketWidth: "1m", ReportingDelay: config.Duration(time.Second),
			Interval: config.Duration(200 * time.Millisecond), Lookback: config.Duration(4 * time.Minute), DriftUSD: 0.000001}
		c.Alerts.Webhooks = []config.Webhook{{URL: recv.srv.URL, SecretEnv: "GATEWAY_WEBHOOK_SECRET"}}
	}
	env := []string{"GATEWAY_WEBHOOK_SECRET=" + secret}
	// Redis with persistence, as in production, so that it can go down
	// and come back with what it held.
	rs := redistest.NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	a := reconcileStackWith(t, launch.Options{SidecarEnv: env, RedisAddr: rs.Addr}, conf)
	b := reconcileStackWith(t, launch.Options{SidecarEnv: env, RedisAddr: rs.Addr}, conf)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: a.RedisAddr})
	defer rdb.Close()

	var runner, other *launch.Stack
	eventually.That(t, 30*time.Second, "one sidecar to reconcile the lookback's windows", func() (bool, string) {
		wa, wb := metricValue(t, a, "gateway_reconcile_windows_total"), metricValue(t, b, "gateway_reconcile_windows_total")
		switch {
		case wa >= 3 && wb == 0:
			runner, other = a, b
		case wb >= 3 && wa == 0:
			runner, other = b, a
		}
		return runner != nil, fmt.Sprintf("a ran %v windows, b %v", wa, wb)
	})
	now := time.Now()
	before, err := runner.Store.ReconcileWindows(ctx, "1m", now.Add(-10*time.Minute), now)
	if err != nil || len(before) < 3 {
		t.Fatalf("%d windows kept (%v)", len(before), err)
	}
	var first time.Time
	for start := range before {
		if first.IsZero() || start.Before(first) {
			first = start
		}
	}
	drifted := first.Add(time.Minute)
	if _, ok := before[drifted]; !ok {
		t.Fatalf("no window kept at %s: %v", drifted, before)
	}
	direct := usage.Usage{Input: 1000, Output: 7}
	runner.Primary.AddUsageAt(config.FormatMessages, launch.PoolSecret("alpha", "k2"), alphaModel, drifted.Add(10*time.Second),
		map[string]int64{"input_tokens": direct.Input, "output_tokens": direct.Output})

	// Every window again, from the lookback.
	runAgain := func() {
		t.Helper()
		if err := rdb.Del(ctx, "gw:{reconcile}:cursor:1m").Err(); err != nil {
			t.Fatal(err)
		}
	}
	runAgain()
	var ev alerts.Event
	select {
	case ev = <-recv.got:
	case <-time.After(30 * time.Second):
		t.Fatal("no reconcile.drift within 30s")
	}
	wantCost := catalogueCost(t, runner, "alpha", direct)
	if ev.Type != alerts.ReconcileDrift || ev.Data["upstream"] != "alpha" || ev.Data["vendor_key"] != "k2" ||
		ev.Data["window_start"] != drifted.UTC().Format(time.RFC3339) || ev.Data["bucket_width"] != "1m" ||
		ev.Data["unexplained_tokens"] != float64(reconcile.Tokens(direct)) || ev.Data["unexplained_nano_usd"] != float64(wantCost) || ev.AccountID != "" {
		t.Errorf("event %+v; want reconcile.drift of alpha k2 at %s, %d tokens, %d nano-USD", ev, drifted.UTC().Format(time.RFC3339), reconcile.Tokens(direct), wantCost)
	}
	var after map[time.Time][]byte
	eventually.That(t, 20*time.Second, "the windows run again", func() (bool, string) {
		end := metricValue(t, runner, "gateway_reconcile_last_window_end_timestamp_seconds")
		after, err = runner.Store.ReconcileWindows(ctx, "1m", now.Add(-10*time.Minute), now)
		return err == nil && end >= float64(drifted.Add(2*time.Minute).Unix()), fmt.Sprintf("last window ended at %v (%v)", time.Unix(int64(end), 0), err)
	})
	for start, b := range before {
		if start.Equal(drifted) {
			continue
		}
		if !bytes.Equal(after[start], b) {
			t.Errorf("window %s ran again differently:\n%s\nfirst:\n%s", start, after[start], b)
		}
	}
	ws, err := reconcile.Kept(ctx, runner.Store, vendorusage.Minute, drifted, drifted.Add(time.Minute))
	if err != nil || len(ws) != 1 {
		t.Fatalf("%d windows at %s (%v)", len(ws), drifted, err)
	}
	for _, r := range ws[0].Rows {
		want := reconcile.Difference{}
		if r.Upstream == "alpha" && r.VendorKey == "k2" {
			want = reconcile.Difference{Usage: direct, Cost: wantCost}
		}
		if r.Unexplained != want {
			t.Errorf("%s %s: unexplained %+v; want %+v", r.Upstream, r.VendorKey, r.Unexplained, want)
		}
	}

	// Redis goes away, then comes back; the runner is killed and
	// restarted (its lease is its own again), and the windows run once
	// more: the drift was alerted already.
	rs.Stop()
	eventually.True(t, 20*time.Second, "the runner to see Redis down", func() bool {
		return metricValue(t, runner, "gateway_store_up") == 0
	})
	rs.Start()
	eventually.True(t, 20*time.Second, "the runner to see Redis back", func() bool {
		return metricValue(t, runner, "gateway_store_up") == 1
	})
	runner.Sidecar.Signal(syscall.SIGKILL)
	if !runner.Sidecar.Wait(10 * time.Second) {
		t.Fatal("sidecar survived SIGKILL")
	}
	if err := runner.StartSidecar(); err != nil {
		t.Fatal(err)
	}
	runAgain()
	eventually.That(t, 30*time.Second, "the restarted runner to run the windows again", func() (bool, string) {
		end := metricValue(t, runner, "gateway_reconcile_last_window_end_timestamp_seconds")
		return end >= float64(drifted.Add(2*time.Minute).Unix()), fmt.Sprintf("last window ended at %v", time.Unix(int64(end), 0))
	})
	again, err := runner.Store.ReconcileWindows(ctx, "1m", now.Add(-10*time.Minute), now)
	if err != nil {
		t.Fatal(err)
	}
	for start, b := range after {
		if !bytes.Equal(again[start], b) {
			t.Errorf("window %s after the outage and restart:\n%s\nbefore:\n%s", start, again[start], b)
		}
	}
	for _, s := range []*launch.Stack{runner, other} {
		if n := metricValue(t, s, `gateway_alerts_total{type="reconcile.drift"}`); n != 0 {
			t.Errorf("reconcile.drift published %v more times", n)
		}
	}
	if n := metricValue(t, other, "gateway_reconcile_windows_total"); n != 0 {
		t.Errorf("the other sidecar ran %v windows while the runner held the lease", n)
	}
}
