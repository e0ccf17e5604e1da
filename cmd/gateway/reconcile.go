package main

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

// reconcileTimeout bounds one report page through the relay.
const reconcileTimeout = 30 * time.Second

// newReconciler reconciles the upstreams that have an admin key, reading
// their reports through the relay; nil when none has one.
func newReconciler(c *config.Config, st *store.Store, prices pricing.Book) *reconcile.Runner {
	r := &reconcile.Runner{
		Relay:    "http://" + c.Listeners.Relay,
		Client:   &http.Client{Timeout: reconcileTimeout},
		Ledger:   st,
		Settling: c.Limits.MaxRequestDuration.D(),
	}
	for _, u := range c.Upstreams {
		if u.AdminCredentialEnv == "" {
			continue
		}
		keys := map[string]string{}
		for _, k := range u.Keys() {
			keys[k.Name] = k.VendorKeyID
		}
		table := prices[u.Name]
		r.Upstreams = append(r.Upstreams, reconcile.Upstream{
			Name: u.Name, Format: u.Format, Keys: keys,
			Serves: func(model string) bool {
				_, ok := table.Lookup(model)
				return ok
			},
			Price: func(model string, use usage.Usage) int64 {
				m, ok := table.Lookup(model)
				if !ok {
					return 0
				}
				return m.Price(use, "", "").Cost
			},
			Costs: true,
		})
	}
	if len(r.Upstreams) == 0 {
		return nil
	}
	return r
}

// abandonedQueue bounds the abandoned attempts waiting for the store: a
// store outage drops the excess (logged), never blocks Envoy's log.
const abandonedQueue = 4096

// abandonedRecorder writes the attempts Envoy abandoned to the store, off
// Envoy's log stream.
type abandonedRecorder struct {
	st  *store.Store
	log *slog.Logger
	ch  chan account.AbandonedAttempt
}

func newAbandonedRecorder(st *store.Store, log *slog.Logger) *abandonedRecorder {
	r := &abandonedRecorder{st: st, log: log, ch: make(chan account.AbandonedAttempt, abandonedQueue)}
	go r.run()
	return r
}

// Record queues a; it never blocks.
func (r *abandonedRecorder) Record(a account.AbandonedAttempt) {
	select {
	case r.ch <- a:
	default:
		r.log.Warn("abandoned attempt not recorded: the queue to the store is full", "upstream", a.Upstream, "vendor_key", a.VendorKey, "reason", a.Reason)
	}
}

func (r *abandonedRecorder) run() {
	for a := range r.ch {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.st.RecordAbandoned(ctx, a); err != nil {
			r.log.Warn("abandoned attempt not recorded", "upstream", a.Upstream, "vendor_key", a.VendorKey, "reason", a.Reason, "err", err)
		}
		cancel()
	}
}

// reconcileMetrics are the gateway_reconcile_* series, set by the sidecar
// running the continuous reconciliation.
type reconcileMetrics struct {
	tokens, usd, bill *prometheus.GaugeVec
	windows           prometheus.Counter
	last              prometheus.Gauge
}

func newReconcileMetrics(reg prometheus.Registerer) *reconcileMetrics {
	m := &reconcileMetrics{
		tokens: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_reconcile_unexplained_tokens", Help: "Tokens the vendor's usage report counts beyond the ledger and its explained differences (either sign), in the last window reconciled, by upstream and vendor key.",
		}, []string{"upstream", "vendor_key", "vendor_key_id"}),
		usd: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_reconcile_unexplained_usd", Help: "The unexplained tokens at the catalogue's prices, in USD, in the last window reconciled, by upstream and vendor key.",
		}, []string{"upstream", "vendor_key", "vendor_key_id"}),
		bill: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_reconcile_unexplained_bill_usd", Help: "The vendor's cost report of the last UTC day reconciled whole less its usage at the ledger's prices, in USD, by upstream.",
		}, []string{"upstream"}),
		windows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_reconcile_windows_total", Help: "Windows the continuous reconciliation ran on this sidecar (a window run again after a stop counts again).",
		}),
		last: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_reconcile_last_window_end_timestamp_seconds", Help: "End of the last window reconciled on this sidecar, Unix seconds; 0 before the first.",
		}),
	}
	reg.MustRegister(m.tokens, m.usd, m.bill, m.windows, m.last)
	return m
}

// keyDrift is a vendor key's unexplained difference in one window.
type keyDrift struct {
	upstream, name, id string
	tokens, nanoUSD    int64
}

// drifts sums each vendor key's unexplained differences in a window.
func drifts(rep reconcile.Report) []keyDrift {
	var out []keyDrift
	at := map[[2]string]int{}
	for _, r := range rep.Rows {
		k := [2]string{r.Upstream, r.VendorKeyID + "\x00" + r.VendorKey}
		i, ok := at[k]
		if !ok {
			i = len(out)
			at[k] = i
			out = append(out, keyDrift{upstream: r.Upstream, name: r.VendorKey, id: r.VendorKeyID})
		}
		out[i].tokens += reconcile.Tokens(r.Unexplained.Usage)
		out[i].nanoUSD += r.Unexplained.Cost
	}
	return out
}

// startContinuous runs the continuous reconciliation until ctx ends, on
// whichever sidecar holds its lease; nil runner: no upstream has an admin
// key.
func startContinuous(ctx context.Context, c *config.Config, r *reconcile.Runner, st *store.Store, reg prometheus.Registerer, watcher *alerts.Watcher, log *slog.Logger) {
	if r == nil {
		return
	}
	m := newReconcileMetrics(reg)
	host, _ := os.Hostname()
	rc := c.Reconcile
	width := vendorusage.Width(rc.BucketWidth)
	run := &reconcile.Continuous{
		Runner: r, State: st, Width: width,
		Delay: rc.ReportingDelay.D(), Interval: rc.Interval.D(), Lookback: rc.Lookback.D(),
		// The host and control listener name the sidecar across its
		// restarts: a restarted runner takes its lease back at once.
		Holder: host + "/" + c.Listeners.Control,
		Logger: log, Now: time.Now,
		OnWindow: func(ctx context.Context, start time.Time, rep reconcile.Report) {
			m.tokens.Reset()
			m.usd.Reset()
			for _, d := range drifts(rep) {
				m.tokens.WithLabelValues(d.upstream, d.name, d.id).Set(float64(d.tokens))
				m.usd.WithLabelValues(d.upstream, d.name, d.id).Set(pricing.USD(d.nanoUSD))
				over := (rc.DriftUSD > 0 && abs(d.nanoUSD) > pricing.NanoUSD(rc.DriftUSD)) || (rc.DriftTokens > 0 && abs(d.tokens) > rc.DriftTokens)
				if over {
					log.Warn("reconcile: unexplained usage over the drift threshold", "upstream", d.upstream, "vendor_key", d.name, "vendor_key_id", d.id,
						"window_start", start, "tokens", d.tokens, "nano_usd", d.nanoUSD)
					watcher.ReconcileDrift(ctx, d.upstream, d.name, d.id, start, string(width), d.tokens, d.nanoUSD)
				}
			}
			for _, cr := range rep.Costs {
				m.bill.WithLabelValues(cr.Upstream).Set(pricing.USD(cr.Unexplained))
				if rc.DriftUSD > 0 && abs(cr.Unexplained) > pricing.NanoUSD(rc.DriftUSD) {
					log.Warn("reconcile: the vendor's bill differs from its usage at the ledger's prices", "upstream", cr.Upstream,
						"day", cr.Start, "billed_nano_usd", cr.Billed, "priced_nano_usd", cr.Priced)
					watcher.ReconcileDrift(ctx, cr.Upstream, "", "", cr.Start, string(vendorusage.Day), 0, cr.Unexplained)
				}
			}
			m.windows.Inc()
			m.last.Set(float64(start.Add(width.Duration()).Unix()))
		},
	}
	go run.Run(ctx)
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
