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
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/internal/config"
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

// Upstream is an upstream as the watcher reads it: its name and the Envoy
// cluster that serves it.
type Upstream struct {
	Name    string
	Cluster string
	// Members are a pool's clusters (one per key and endpoint) by the
	// priority of their endpoint: Cluster is then an aggregate, which has
	// no hosts of its own, and the upstream's endpoint is decided from its
	// members' hosts.
	Members map[string]int
}

// Upstreams lists c's upstreams with their clusters
// (upstreams[].envoy_cluster, default the name).
func Upstreams(c *config.Config) []Upstream {
	us := make([]Upstream, len(c.Upstreams))
	for i, u := range c.Upstreams {
		us[i] = Upstream{Name: u.Name, Cluster: u.EnvoyCluster}
		if us[i].Cluster == "" {
			us[i].Cluster = u.Name
		}
		if u.Pooled() {
			us[i].Members = map[string]int{}
			for _, k := range u.VendorKeys {
				for p, ep := range []string{Primary, Reserve}[:len(u.Endpoints())] {
					us[i].Members[config.MemberCluster(us[i].Cluster, k.Name, ep)] = p
				}
			}
		}
	}
	return us
}

// Watcher polls Envoy's /clusters and remembers the endpoint serving each upstream.
type Watcher struct {
	adminURL  string
	upstreams []string
	clusters  map[string]string // upstream → Envoy cluster
	members   map[string]map[string]int
	client    *http.Client
	log       *slog.Logger
	gauge     *prometheus.GaugeVec
	switches  *prometheus.CounterVec
	onReserve *prometheus.CounterVec
	now       func() time.Time

	mu        sync.RWMutex
	endpoints map[string]string
	// problems say, in one line, why an upstream's endpoint is unknown:
	// no cluster of its name, or Envoy's admin not answering.
	problems map[string]string
	since    time.Time // last set, for the time on the reserve

	// metadataChecked are the clusters whose hosts' endpoint metadata was
	// checked (RequireEndpointMetadata); nil: no check. Poll's alone.
	metadataChecked map[string]bool
}

// NewWatcher watches the upstreams' Envoy clusters through the admin
// interface at adminURL (http://host:port). reg may be nil.
func NewWatcher(adminURL string, upstreams []Upstream, reg prometheus.Registerer, log *slog.Logger) *Watcher {
	w := &Watcher{
		adminURL: adminURL,
		clusters: make(map[string]string, len(upstreams)),
		members:  make(map[string]map[string]int),
		problems: make(map[string]string),
		client:   &http.Client{Timeout: 2 * time.Second},
		log:      log,
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
	for _, up := range upstreams {
		u := up.Name
		w.upstreams = append(w.upstreams, u)
		w.clusters[u] = up.Cluster
		if up.Members != nil {
			w.members[up.Cluster] = up.Members
		}
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

// Problem is the one-line cause of an upstream's unknown endpoint, or ""
// when there is none (its state is known, or not read yet).
func (w *Watcher) Problem(upstream string) string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.problems[upstream]
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
		w.setProblems(nil, fmt.Sprintf("Envoy's admin interface at %s (listeners.envoy_admin) is not answering", w.adminURL))
		return fmt.Errorf("envoy admin: %w", err)
	}
	defer resp.Body.Close()
	var cs clusters
	if err := json.NewDecoder(resp.Body).Decode(&cs); err != nil {
		w.setProblems(nil, fmt.Sprintf("Envoy's admin interface at %s (listeners.envoy_admin) answers no /clusters", w.adminURL))
		return fmt.Errorf("envoy admin: decode /clusters: %w", err)
	}
	w.mergeMembers(&cs)
	byCluster := Decide(cs, w.clusterNames())
	m := make(map[string]string, len(w.upstreams))
	for _, u := range w.upstreams {
		if ep, ok := byCluster[w.clusters[u]]; ok {
			m[u] = ep
		}
	}
	w.set(m)
	w.setProblems(m, "")
	if w.metadataChecked != nil {
		if err := w.checkMetadata(ctx, &cs); err != nil {
			w.log.Debug("endpoint metadata not checked", "err", err)
		}
	}
	return nil
}

// mergeMembers replaces each pool's aggregate in cs by one cluster of its
// name holding its members' hosts, each at its endpoint's priority: the
// primary while any key's primary host is healthy.
func (w *Watcher) mergeMembers(cs *clusters) {
	if len(w.members) == 0 {
		return
	}
	merged := map[string]int{}
	for i := range cs.ClusterStatuses {
		c := &cs.ClusterStatuses[i]
		if _, ok := w.members[c.Name]; ok {
			merged[c.Name] = i
			c.HostStatuses = nil
		}
	}
	for _, c := range cs.ClusterStatuses {
		for agg, ms := range w.members {
			p, ok := ms[c.Name]
			i, present := merged[agg]
			if !ok || !present {
				continue
			}
			for _, h := range c.HostStatuses {
				h.Priority = p
				cs.ClusterStatuses[i].HostStatuses = append(cs.ClusterStatuses[i].HostStatuses, h)
			}
		}
	}
}

func (w *Watcher) clusterNames() []string {
	names := make([]string, 0, len(w.upstreams))
	for _, u := range w.upstreams {
		names = append(names, w.clusters[u])
	}
	return names
}

// setProblems records why each upstream missing from found has no known
// endpoint: all, for cause, when cause is set (Envoy unreadable); else
// the missing cluster. A new cause is logged once, as it appears: at
// start, a sidecar attached to an Envoy without the cluster says so.
func (w *Watcher) setProblems(found map[string]string, cause string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, u := range w.upstreams {
		p := ""
		switch {
		case cause != "":
			p = cause
		case found[u] == "":
			c := w.clusters[u]
			if c == u {
				p = fmt.Sprintf("no Envoy cluster for upstream %s: expected cluster named %s, or set upstreams[].envoy_cluster", u, c)
			} else {
				p = fmt.Sprintf("no Envoy cluster for upstream %s: expected cluster named %s (upstreams[].envoy_cluster)", u, c)
			}
		}
		if prev := w.problems[u]; p != prev {
			switch {
			case p != "" && cause != "":
				// Usual for a moment at start: Envoy starts after the sidecar.
				w.log.Warn(p, "upstream", u)
			case p != "":
				w.log.Error(p, "upstream", u)
			default:
				w.log.Info("endpoint state known", "upstream", u, "cluster", w.clusters[u])
			}
		}
		if p == "" {
			delete(w.problems, u)
		} else {
			w.problems[u] = p
		}
	}
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

// Decide names the endpoint serving each of the named clusters present in
// cs (absent clusters are not in the result): the primary while any of its
// priority-0 hosts is healthy (with one primary host, Envoy moves all traffic
// to priority 1 as soon as that host is unhealthy), else the reserve.
func Decide(cs clusters, names []string) map[string]string {
	out := make(map[string]string, len(names))
	for _, c := range cs.ClusterStatuses {
		if !slices.Contains(names, c.Name) {
			continue
		}
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
