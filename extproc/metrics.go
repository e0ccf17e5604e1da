package extproc

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// Metrics are the processor's Prometheus series.
type Metrics struct {
	requests       *prometheus.CounterVec
	tokens         *prometheus.CounterVec
	cost           *prometheus.CounterVec
	rejections     *prometheus.CounterVec
	limitRefusals  *prometheus.CounterVec
	storeErrors    *prometheus.CounterVec
	estimated      *prometheus.CounterVec
	admitSeconds   prometheus.Histogram
	settleSeconds  prometheus.Histogram
	expiredHolds   prometheus.Counter
	inflight       prometheus.Gauge
	streams        prometheus.Gauge
	sockets        prometheus.Gauge
	socketRefusals prometheus.Counter
	socketCuts     prometheus.Counter
	leaseCuts      prometheus.Counter
	capped         *prometheus.CounterVec
	dearerModel    *prometheus.CounterVec
	vendorRefusals *prometheus.CounterVec
	earlyRefusals  *prometheus.CounterVec

	concurrencyWaits       *prometheus.CounterVec
	concurrencyWaitSeconds prometheus.Histogram
	concurrencyWaiters     prometheus.Gauge

	vendorKeyRequests  *prometheus.CounterVec
	vendorKeyLimited   *prometheus.CounterVec
	abandonedAttempts  *prometheus.CounterVec
	vendorKeyCooldowns *prometheus.CounterVec
	vendorKeyState     *prometheus.GaugeVec
	vendorKeyRefusals  *prometheus.CounterVec
	vendorKeyBarred    *prometheus.CounterVec
	poolShareRefusals  *prometheus.CounterVec

	seriesMu sync.Mutex                 // observe's, over series and what they hold
	series   map[[2]string]*modelSeries // by upstream and model
}

// NewMetrics creates the series and registers them with reg (if not nil).
// upstreams name the configured upstreams, whose labelled series start at
// zero.
func NewMetrics(reg prometheus.Registerer, upstreams ...string) *Metrics {
	latency := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total", Help: "Metered requests settled, by upstream, model, status and endpoint.",
		}, []string{"upstream", "model", "status", "endpoint"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_tokens_total", Help: "Usage billed, by upstream, model and kind (the usage kinds: " + kindNames() + "; reasoning is part of output).",
		}, []string{"upstream", "model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_cost_usd_total", Help: "Cost billed in USD, by upstream and model.",
		}, []string{"upstream", "model"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rejections_total", Help: "Requests answered by the gateway itself, by upstream and reason.",
		}, []string{"upstream", "reason"}),
		limitRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_limit_refusals_total", Help: "Requests refused by a limit or the balance at admission, by level (account, key) and kind (rpm, tpm, concurrency, daily, monthly, total, balance).",
		}, []string{"level", "kind"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_store_errors_total", Help: "Failed store operations, by operation.",
		}, []string{"op"}),
		estimated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_estimated_settlements_total", Help: "Settlements whose usage was partly estimated, by upstream.",
		}, []string{"upstream"}),
		admitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_admission_seconds", Help: "Time of one admission step in the store.", Buckets: latency,
		}),
		settleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_settlement_seconds", Help: "Time of one settlement step in the store.", Buckets: latency,
		}),
		expiredHolds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_expired_holds_total", Help: "Requests whose sidecar stopped renewing their hold (it died), settled as interrupted by this sidecar's sweeper.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_inflight_requests", Help: "Model requests being processed (one ext_proc stream each).",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_inflight_streams", Help: "Admitted streaming (SSE) requests not yet settled.",
		}),
		capped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_usage_capped_total", Help: "Replies whose reported usage exceeded what the request allowed (max_tokens × n for output, the model's context window for input) and was capped, by upstream.",
		}, []string{"upstream"}),
		dearerModel: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_model_mismatches_total", Help: "Replies naming a catalogue model that prices above the one requested, settled at the dearer price, by upstream.",
		}, []string{"upstream"}),
		concurrencyWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_concurrency_waits_total", Help: "Requests over a concurrency limit whose key lets them wait for a slot, by how the wait ended: admitted, timeout (429), cancelled (the client left), refused (by another limit or the store), full (too many waiters on this sidecar: 429 at once).",
		}, []string{"outcome"}),
		concurrencyWaitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_concurrency_wait_seconds", Help: "Time requests waited for a concurrency slot, whatever the outcome.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 20, 30, 60},
		}),
		concurrencyWaiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_concurrency_waiters", Help: "Requests waiting for a concurrency slot now.",
		}),
		socketRefusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_socket_refusals_total", Help: "Responses API WebSocket upgrades refused because their key held limits.sockets_per_key open sockets on this sidecar.",
		}),
		socketCuts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_socket_cuts_total", Help: "Responses API WebSockets closed (1008) for more pings and refused messages than limits.socket_pings_per_second.",
		}),
		sockets: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gateway_open_sockets", Help: "Responses API WebSocket connections open now (their responses count in gateway_inflight_streams).",
		}),
		leaseCuts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_lease_cuts_total", Help: "Requests cut short because their hold could not be renewed before its lease ended (the store unreachable).",
		}),
	}
	m.newVendorKeyMetrics()
	m.newRefusalMetrics()
	m.zero(upstreams)
	if reg != nil {
		reg.MustRegister(m.requests, m.tokens, m.cost, m.rejections, m.limitRefusals, m.storeErrors, m.estimated,
			m.admitSeconds, m.settleSeconds, m.expiredHolds, m.inflight, m.streams, m.sockets, m.socketRefusals, m.leaseCuts, m.capped, m.dearerModel,
			m.concurrencyWaits, m.concurrencyWaitSeconds, m.concurrencyWaiters,
			m.vendorKeyRequests, m.vendorKeyLimited, m.vendorKeyCooldowns, m.vendorKeyState, m.vendorKeyRefusals, m.vendorKeyBarred, m.poolShareRefusals)
		reg.MustRegister(m.socketCuts, m.vendorRefusals, m.earlyRefusals, m.abandonedAttempts)
	}
	return m
}

// newVendorKeyMetrics makes the gateway_vendor_key_* series of key pools.
func (m *Metrics) newVendorKeyMetrics() {
	m.vendorKeyRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_vendor_key_requests_total", Help: "Metered replies by the vendor key (its name) that served them, by upstream and key.",
	}, []string{"upstream", "key"})
	m.vendorKeyLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_vendor_key_rate_limited_total", Help: "Attempts a vendor answered 429 or 529 on a pooled key (Envoy retried them on another key), by upstream and key.",
	}, []string{"upstream", "key"})
	m.vendorKeyCooldowns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_vendor_key_cooldowns_total", Help: "Cool-downs of a pooled vendor key (429, 529 or a quota error), by upstream and key.",
	}, []string{"upstream", "key"})
	m.vendorKeyState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_vendor_key_state", Help: "1 for the state (active, cooling, disabled) of each pooled vendor key, by upstream and key.",
	}, []string{"upstream", "key", "state"})
	m.vendorKeyRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_vendor_refusals_total", Help: "Attempts a vendor refused on a pooled key, by upstream and whom the blame table charged: key, request or unsure.",
	}, []string{"upstream", "blame"})
	m.vendorKeyBarred = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_pool_account_refusals_total", Help: "Requests the gateway refused (429) because their account keeps drawing refusals on a pool's healthy keys, by upstream.",
	}, []string{"upstream"})
	m.abandonedAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_abandoned_attempts_total", Help: "Attempts Envoy abandoned (a first-byte timeout or reset, a 429 or 5xx) and retried or failed, which the vendor may bill, by upstream, vendor key and reason; each is an operator-side ledger entry charged to no customer.",
	}, []string{"upstream", "key", "reason"})
	m.poolShareRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_pool_share_refusals_total", Help: "Requests the gateway refused (429) because the pool's vendor capacity ran low and their account had sent more than its share, by upstream.",
	}, []string{"upstream"})
}

// newRefusalMetrics makes the series of refusals that cost no body: the
// vendor's refusals replaced, the limits answered at the headers.
func (m *Metrics) newRefusalMetrics() {
	m.vendorRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_vendor_credential_refusals_total", Help: "Vendor 401 and 403 replies (a refusal of the gateway's own vendor credential) whose body the gateway replaced with its own error, by upstream.",
	}, []string{"upstream"})
	m.earlyRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_header_refusals_total", Help: "Requests refused at their headers, before their body was read, by kind: a limit that refused the key or account moments before (rpm, tpm), a budget or balance spent, a concurrency limit full (also counted in gateway_limit_refusals_total), or a suspended account.",
	}, []string{"kind"})
}

// zero makes the known label values' series, at zero, so that alerts on
// them work before the first error.
func (m *Metrics) zero(upstreams []string) {
	for _, o := range waitOutcomes {
		m.concurrencyWaits.WithLabelValues(string(o))
	}
	for _, op := range []string{"lookup", "admit", "settle", "owner", "bind"} {
		m.storeErrors.WithLabelValues(op)
	}
	for _, u := range upstreams {
		for _, r := range format.Reasons() {
			m.rejections.WithLabelValues(u, r)
		}
		m.estimated.WithLabelValues(u)
		m.capped.WithLabelValues(u)
		m.dearerModel.WithLabelValues(u)
		m.vendorRefusals.WithLabelValues(u)
	}
	for _, o := range earlyOutcomes {
		m.earlyRefusals.WithLabelValues(o.String())
	}
	m.earlyRefusals.WithLabelValues(suspendedKind)
	for _, level := range []account.Level{account.AccountLevel, account.KeyLevel, account.ProjectLevel} {
		for _, o := range []account.Outcome{account.RateLimited, account.TokenLimited, account.ConcurrencyLimited,
			account.DailyLimited, account.MonthlyLimited, account.TotalLimited, account.InsufficientBalance} {
			if o == account.InsufficientBalance && level != account.AccountLevel || o == account.TotalLimited && level == account.AccountLevel {
				continue // no such limit
			}
			m.limitRefusals.WithLabelValues(level.String(), o.String())
		}
	}
}

// InitVendorKeys creates the series of an upstream's vendor keys at zero,
// each key active.
func (m *Metrics) InitVendorKeys(upstream string, keys []string) {
	for _, b := range []string{keypool.BlameKey, keypool.BlameRequest, keypool.BlameUnsure} {
		m.vendorKeyRefusals.WithLabelValues(upstream, b)
	}
	m.vendorKeyBarred.WithLabelValues(upstream)
	m.poolShareRefusals.WithLabelValues(upstream)
	for _, k := range keys {
		m.vendorKeyRequests.WithLabelValues(upstream, k)
		m.vendorKeyLimited.WithLabelValues(upstream, k)
		m.vendorKeyCooldowns.WithLabelValues(upstream, k)
		for _, st := range keypool.States {
			v := 0.0
			if st == keypool.Active {
				v = 1
			}
			m.vendorKeyState.WithLabelValues(upstream, k, st).Set(v)
		}
	}
}

// ObserveInterrupted counts one request settled by the hold sweeper.
func (m *Metrics) ObserveInterrupted() { m.expiredHolds.Inc() }

// InitModels creates the per-model series of an upstream at zero, so that
// rates and ratios over them work from the first scrape: requests by every
// status class and endpoint, tokens by kind, and cost.
func (m *Metrics) InitModels(upstream string, models []string) {
	for _, model := range models {
		for _, st := range []string{"2xx", "4xx", "5xx", "other"} {
			for _, ep := range []string{"primary", "reserve", "none"} {
				m.requests.WithLabelValues(upstream, model, st, ep)
			}
		}
		for _, kind := range []string{"input", "output", "cache_write_5m", "cache_read"} {
			m.tokens.WithLabelValues(upstream, model, kind)
		}
		m.cost.WithLabelValues(upstream, model)
	}
}

// kindNames lists the usage kinds' names, comma-separated.
func kindNames() string {
	names := make([]string, len(usage.Kinds))
	for i, k := range usage.Kinds {
		names[i] = k.Name
	}
	return strings.Join(names, ", ")
}

// StoreError counts a failed store operation ("lookup", "admit", "settle")
// seen outside the processor, such as a settlement the spool took because
// the store failed it.
func (m *Metrics) StoreError(op string) { m.storeErrors.WithLabelValues(op).Inc() }

func (m *Metrics) observe(upstream, model string, st account.Settlement) {
	endpoint := st.Endpoint
	if endpoint == "" {
		endpoint = "none" // no endpoint answered (refused before, or Envoy's own reply)
	}
	m.seriesMu.Lock()
	defer m.seriesMu.Unlock()
	ms := m.seriesOf(upstream, model)
	status := [2]string{statusClass(st.Status), endpoint}
	c := ms.requests[status]
	if c == nil {
		c = m.requests.WithLabelValues(upstream, model, status[0], status[1])
		ms.requests[status] = c
	}
	c.Inc()
	if st.Status < 200 || st.Status > 299 {
		return
	}
	for i, k := range usage.Kinds {
		if n := k.Of(st.Usage); n > 0 {
			if ms.tokens[i] == nil {
				ms.tokens[i] = m.tokens.WithLabelValues(upstream, model, k.Name)
			}
			ms.tokens[i].Add(float64(n))
		}
	}
	if ms.cost == nil {
		ms.cost = m.cost.WithLabelValues(upstream, model)
	}
	ms.cost.Add(pricing.USD(st.Cost))
	if st.Estimated {
		m.estimated.WithLabelValues(upstream).Inc()
	}
}

// modelSeries are the settlement series of one upstream's model, found
// once: a settlement then reads a map or two rather than hashing and
// checking the labels of each of its four or five series. They are
// children the vectors hold anyway, so the map holds no more than they do.
type modelSeries struct {
	requests map[[2]string]prometheus.Counter // by status class and endpoint
	tokens   []prometheus.Counter             // by usage kind (usage.Kinds)
	cost     prometheus.Counter               // made by the first 2xx
}

// seriesOf is the model's series, made on its first settlement; under
// m.seriesMu.
func (m *Metrics) seriesOf(upstream, model string) *modelSeries {
	k := [2]string{upstream, model}
	ms := m.series[k]
	if ms == nil {
		if m.series == nil {
			m.series = map[[2]string]*modelSeries{}
		}
		ms = &modelSeries{requests: map[[2]string]prometheus.Counter{}, tokens: make([]prometheus.Counter, len(usage.Kinds))}
		m.series[k] = ms
	}
	return ms
}

func statusClass(code int) string {
	switch {
	case code >= 200 && code < 300:
		return "2xx"
	case code >= 400 && code < 500:
		return "4xx"
	case code >= 500:
		return "5xx"
	}
	return "other"
}
