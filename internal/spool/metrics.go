package spool

import "github.com/prometheus/client_golang/prometheus"

// metrics are the spool's Prometheus series.
type metrics struct {
	depth    prometheus.GaugeFunc
	bytes    prometheus.GaugeFunc
	spooled  prometheus.Counter
	replayed *prometheus.CounterVec
	errors   *prometheus.CounterVec
}

// newMetrics creates the series, reading depth and size from the journal
// at scrape time (j may be nil: no spool), and registers them with reg (if
// not nil).
func newMetrics(reg prometheus.Registerer, j *journal) *metrics {
	depth := func() float64 {
		if j == nil {
			return 0
		}
		n, _ := j.depth()
		return float64(n)
	}
	size := func() float64 {
		if j == nil {
			return 0
		}
		_, b := j.depth()
		return float64(b)
	}
	m := &metrics{
		depth: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_spool_depth", Help: "Settlements waiting in the local spool for the store to come back.",
		}, depth),
		bytes: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_spool_bytes", Help: "Size of the spool file in bytes; appends fail when it reaches the limit.",
		}, size),
		spooled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_spooled_total", Help: "Settlements written to the spool because the store could not be reached.",
		}),
		replayed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_spool_replayed_total",
			Help: "Spooled settlements taken out of the spool, by result: applied, duplicate (already settled) or dropped (the account no longer exists).",
		}, []string{"result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_spool_errors_total",
			Help: "Spool failures, by reason: full and write (a settlement was lost), corrupt (damaged records set aside at start), replay (a replay pass stopped on a store error), compact.",
		}, []string{"reason"}),
	}
	for _, r := range []string{"applied", "duplicate", "dropped"} {
		m.replayed.WithLabelValues(r)
	}
	for _, r := range []string{"full", "write", "corrupt", "replay", "compact"} {
		m.errors.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.depth, m.bytes, m.spooled, m.replayed, m.errors)
	}
	return m
}
