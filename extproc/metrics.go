package extproc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
)

// Metrics are the processor's Prometheus series.
type Metrics struct {
	requests      *prometheus.CounterVec
	tokens        *prometheus.CounterVec
	cost          *prometheus.CounterVec
	rejections    *prometheus.CounterVec
	storeErrors   *prometheus.CounterVec
	estimated     *prometheus.CounterVec
	admitSeconds  prometheus.Histogram
	settleSeconds prometheus.Histogram
	expiredHolds  prometheus.Counter
}

// NewMetrics creates the series and registers them with reg (if not nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	latency := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_requests_total", Help: "Metered requests settled, by upstream, model, status and endpoint.",
		}, []string{"upstream", "model", "status", "endpoint"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_tokens_total", Help: "Tokens billed, by upstream, model and kind (input, output, cache_write, cache_read).",
		}, []string{"upstream", "model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_cost_usd_total", Help: "Cost billed in USD, by upstream and model.",
		}, []string{"upstream", "model"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_rejections_total", Help: "Requests answered by the gateway itself, by upstream and reason.",
		}, []string{"upstream", "reason"}),
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
	}
	// Known label values start at zero, so alerts on them work before the
	// first error.
	for _, op := range []string{"lookup", "admit", "settle"} {
		m.storeErrors.WithLabelValues(op)
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.tokens, m.cost, m.rejections, m.storeErrors, m.estimated,
			m.admitSeconds, m.settleSeconds, m.expiredHolds)
	}
	return m
}

// ObserveInterrupted counts one request settled by the hold sweeper.
func (m *Metrics) ObserveInterrupted() { m.expiredHolds.Inc() }

func (m *Metrics) observe(upstream, model string, st store.Settlement) {
	m.requests.WithLabelValues(upstream, model, statusClass(st.Status), st.Endpoint).Inc()
	if st.Status < 200 || st.Status > 299 {
		return
	}
	for _, t := range [...]struct {
		kind string
		n    int64
	}{{"input", st.Input}, {"output", st.Output}, {"cache_write", st.CacheWrite}, {"cache_read", st.CacheRead}} {
		if t.n > 0 {
			m.tokens.WithLabelValues(upstream, model, t.kind).Add(float64(t.n))
		}
	}
	m.cost.WithLabelValues(upstream, model).Add(pricing.USD(st.Cost))
	if st.Estimated {
		m.estimated.WithLabelValues(upstream).Inc()
	}
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

func rejectionReason(k format.ErrorKind) string {
	switch k {
	case format.Unauthenticated:
		return "unauthenticated"
	case format.PermissionDenied:
		return "forbidden"
	case format.NotFound:
		return "not_found"
	case format.InvalidRequest, format.ModelNotFound:
		return "invalid_request"
	case format.BillingExhausted:
		return "balance"
	case format.RateLimited:
		return "rate_limit"
	case format.DailyLimit:
		return "daily_limit"
	case format.Unavailable:
		return "unavailable"
	case format.TooLarge:
		return "too_large"
	}
	return "other"
}
