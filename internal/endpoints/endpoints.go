// Package endpoints tells which endpoint serves each upstream, primary or
// reserve, by reading Envoy's admin interface. Envoy makes the failover
// decisions (health checks, outlier ejection, priority spill); this package
// only reports them, for GET /health and the metrics.
package endpoints

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Endpoint names, matching the endpoint metadata Envoy's bootstrap sets.
const (
	Primary = "primary"
	Reserve = "reserve"
	// None: neither endpoint is usable (both failed health checks or were
	// ejected); requests to the upstream fail.
	None = "none"
	// Unknown: Envoy's admin interface could not be read.
	Unknown = "unknown"
)

// states are every value an upstream's endpoint can take, for the gauge.
var states = []string{Primary, Reserve, None, Unknown}

// Watcher polls Envoy's /clusters and remembers the endpoint serving each upstream.
type Watcher struct {
	adminURL  string
	upstreams []string
	client    *http.Client
	log       *slog.Logger
	gauge     *prometheus.GaugeVec
	switches  *prometheus.CounterVec
	onReserve *prometheus.CounterVec
	now       func() time.Time

	mu        sync.RWMutex
	endpoints map[string]string
	since     time.Time // last set, for the time on the reserve
}

// NewWatcher watches the named upstreams (Envoy clusters) through the admin
// interface at adminURL (http://host:port). reg may be nil.
func NewWatcher(adminURL string, upstreams []string, reg prometheus.Registerer, log *slog.Logger) *Watcher {
	w := &Watcher{
		adminURL:  adminURL,
		upstreams: upstreams,
		client:    &http.Client{Timeout: 2 * time.Second},
		log:       log,
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_endpoint_in_use",
			Help: "1 for the endpoint (primary or reserve) that serves each upstream.",
		}, []string{"upstream", "endpoint"}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_endpoint_switches_total",
			Help: "Changes of the endpoint serving each upstream, by the endpoint switched to (primary, reserve, none).",
		}, []string{"upstream", "to"}),
		onReserve: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_endpoint_reserve_seconds_total",
			Help: "Seconds each upstream was served by its reserve endpoint.",
		}, []string{"upstream"}),
		now:       time.Now,
		endpoints: make(map[string]string),
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	for _, u := range upstreams {
		w.endpoints[u] = Unknown
		// Every series exists from the first scrape, so alerts and rates
		// work before the first failover.
		for _, st := range states {
			v := 0.0
			if st == Unknown {
				v = 1
			}
			w.gauge.WithLabelValues(u, st).Set(v)
		}
		for _, to := range []string{Primary, Reserve, None} {
			w.switches.WithLabelValues(u, to)
		}
		w.onReserve.WithLabelValues(u)
	}
	if reg != nil {
		reg.MustRegister(w.gauge, w.switches, w.onReserve)
	}
	return w
}

// Endpoints returns a copy of the current endpoint of each upstream.
func (w *Watcher) Endpoints() map[string]string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	m := make(map[string]string, len(w.endpoints))
	for k, v := range w.endpoints {
		m[k] = v
	}
	return m
}

// Run polls every interval until ctx ends.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := w.Poll(ctx); err != nil && ctx.Err() == nil {
			w.log.Debug("envoy admin poll failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads Envoy's clusters once.
func (w *Watcher) Poll(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", w.adminURL+"/clusters?format=json", nil)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		w.set(nil)
		return fmt.Errorf("envoy admin: %w", err)
	}
	defer resp.Body.Close()
	var cs clusters
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		return fmt.Errorf("envoy admin: decode /clusters: %w", err)
	}
	w.set(Decide(cs, w.upstreams))
	return nil
}

func (w *Watcher) set(m map[string]string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	elapsed := 0.0
	if !w.since.IsZero() && now.After(w.since) {
		elapsed = now.Sub(w.since).Seconds()
	}
	w.since = now
	for _, u := range w.upstreams {
		r := m[u]
		if r == "" {
			r = Unknown
		}
		prev := w.endpoints[u]
		if prev == Reserve {
			w.onReserve.WithLabelValues(u).Add(elapsed)
		}
		// Losing sight of Envoy is not a switch, and neither is the first
		// sight of a healthy primary at start; anything else is.
		if r != prev && r != Unknown && (prev != Unknown || r != Primary) {
			w.switches.WithLabelValues(u, r).Inc()
			w.log.Warn("endpoint switch", "upstream", u, "from", prev, "to", r)
		}
		w.endpoints[u] = r
		for _, name := range states {
			v := 0.0
			if name == r {
				v = 1
			}
			w.gauge.WithLabelValues(u, name).Set(v)
		}
	}
}

// clusters is the part of Envoy's /clusters?format=json we read.
type clusters struct {
	ClusterStatuses []struct {
		Name         string `json:"name"`
		HostStatuses []struct {
			Priority     int `json:"priority"`
			HealthStatus struct {
				FailedActiveHealthCheck   bool   `json:"failed_active_health_check"`
				FailedOutlierCheck        bool   `json:"failed_outlier_check"`
				FailedActiveDegradedCheck bool   `json:"failed_active_degraded_check"`
				PendingActiveHC           bool   `json:"pending_active_hc"`
				EDSHealthStatus           string `json:"eds_health_status"`
			} `json:"health_status"`
		} `json:"host_statuses"`
	} `json:"cluster_statuses"`
}

// Decide names the endpoint serving each upstream: the primary while any of its
// priority-0 hosts is healthy (with one primary host, Envoy moves all traffic
// to priority 1 as soon as that host is unhealthy), else the reserve.
func Decide(cs clusters, upstreams []string) map[string]string {
	out := make(map[string]string, len(upstreams))
	for _, c := range cs.ClusterStatuses {
		healthy := map[int]bool{}
		for _, h := range c.HostStatuses {
			hs := h.HealthStatus
			ok := !hs.FailedActiveHealthCheck && !hs.FailedOutlierCheck && !hs.FailedActiveDegradedCheck &&
				!hs.PendingActiveHC && (hs.EDSHealthStatus == "" || hs.EDSHealthStatus == "HEALTHY")
			healthy[h.Priority] = healthy[h.Priority] || ok
		}
		switch {
		case healthy[0]:
			out[c.Name] = Primary
		case healthy[1]:
			out[c.Name] = Reserve
		default:
			// Nothing healthy: Envoy's panic mode still spreads traffic over
			// both endpoints, but neither is known to answer.
			out[c.Name] = None
		}
	}
	return out
}
