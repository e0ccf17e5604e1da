// Package control serves the gateway's own HTTP endpoints, reached through
// Envoy: GET /health for anyone, GET /v1/usage for an account's credentials,
// and GET /metrics for Prometheus.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
)

// UsageReader reads an account's usage.
type UsageReader interface {
	Usage(ctx context.Context, accountID string, p store.Period) (store.UsageReport, error)
	Ping(ctx context.Context) error
}

// KeyLookup resolves a secret to its stored key.
type KeyLookup interface {
	Lookup(ctx context.Context, secret string) (store.Key, error)
}

// EndpointReporter tells which endpoint currently serves each upstream
// ("primary" or "reserve").
type EndpointReporter interface {
	Endpoints() map[string]string
}

// Options configure the control handler.
type Options struct {
	Region    string
	Upstreams []string
	Store     UsageReader
	Keys      KeyLookup
	// Serving reports whether the processor is serving.
	Serving   func() bool
	Endpoints EndpointReporter // optional
	Metrics   http.Handler     // optional
	Logger    *slog.Logger     // optional
	Now       func() time.Time // optional
}

// Handler serves the control endpoints.
type Handler struct {
	o   Options
	mux *http.ServeMux

	// The store probe is cached briefly: /health is polled by monitoring and
	// must stay cheap, and one ping per interval answers every poll.
	mu        sync.Mutex
	probedAt  time.Time
	probeErr  error
	probeTTL  time.Duration
	probeTime time.Duration
}

// New returns the control handler.
func New(o Options) *Handler {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Serving == nil {
		o.Serving = func() bool { return true }
	}
	h := &Handler{o: o, mux: http.NewServeMux(), probeTTL: 500 * time.Millisecond, probeTime: time.Second}
	h.mux.HandleFunc("/health", h.health)
	h.mux.HandleFunc("/v1/usage", h.usage)
	if o.Metrics != nil {
		h.mux.Handle("/metrics", o.Metrics)
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint")
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Health is the health record; README.md's API reference documents each
// field.
type Health struct {
	Status    string            `json:"status"`
	Region    string            `json:"region"`
	Upstreams []string          `json:"upstreams"`
	TS        string            `json:"ts"`
	Endpoints map[string]string `json:"endpoints,omitempty"`
	Problems  []string          `json:"problems,omitempty"`
}

func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return
	}
	rec := Health{
		Status:    "ok",
		Region:    h.o.Region,
		Upstreams: h.o.Upstreams,
		TS:        h.o.Now().UTC().Format(time.RFC3339),
	}
	if rec.Upstreams == nil {
		rec.Upstreams = []string{}
	}
	if h.o.Endpoints != nil {
		rec.Endpoints = h.o.Endpoints.Endpoints()
	}
	if err := h.probe(r.Context()); err != nil {
		rec.Problems = append(rec.Problems, "store unreachable")
	}
	if !h.o.Serving() {
		rec.Problems = append(rec.Problems, "processor not serving")
	}
	code := http.StatusOK
	if len(rec.Problems) > 0 {
		rec.Status, code = "unavailable", http.StatusServiceUnavailable
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, code, rec)
}

func (h *Handler) probe(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.o.Now()
	if !h.probedAt.IsZero() && now.Sub(h.probedAt) < h.probeTTL && !now.Before(h.probedAt) {
		return h.probeErr
	}
	ctx, cancel := context.WithTimeout(ctx, h.probeTime)
	defer cancel()
	h.probeErr = h.o.Store.Ping(ctx)
	h.probedAt = now
	return h.probeErr
}

// Usage is the usage record; README.md's API reference documents each field.
type Usage struct {
	BalanceUSD float64      `json:"balance_usd"`
	Currency   string       `json:"currency"`
	Period     string       `json:"period"`
	Limits     UsageLimits  `json:"limits"`
	Usage      UsageTotals  `json:"usage"`
	ByModel    []ModelUsage `json:"by_model"`
}

// UsageLimits are the account's limits and its spend against the daily one.
type UsageLimits struct {
	DailyUSD      float64 `json:"daily_usd"`
	DailyUsedUSD  float64 `json:"daily_used_usd"`
	WindowMinutes int64   `json:"window_minutes"`
	RPM           int64   `json:"rpm"`
}

// UsageTotals aggregate the period.
type UsageTotals struct {
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CacheTokens  int64   `json:"cache_tokens"`
	Requests     int64   `json:"requests"`
	CostUSD      float64 `json:"cost_usd"`
}

// ModelUsage is one model's share of the period.
type ModelUsage struct {
	Model        string  `json:"model"`
	Requests     int64   `json:"requests"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	CostUSD      float64 `json:"cost_usd"`
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET /v1/usage is read-only; use GET")
		return
	}
	secret, err := auth.Parse(r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
	if err != nil {
		writeError(w, http.StatusUnauthorized, "authentication_error", err.Error())
		return
	}
	if auth.Kind(secret) == "" {
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid token")
		return
	}
	period := store.Day
	if q := r.URL.Query(); q.Has("period") {
		switch p := store.Period(q.Get("period")); p {
		case store.Day, store.Month, store.Total:
			period = p
		default:
			writeError(w, http.StatusBadRequest, "invalid_request_error", "period must be one of day, month, total")
			return
		}
	}
	key, err := h.o.Keys.Lookup(r.Context(), secret)
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusUnauthorized, "authentication_error", "invalid token")
		return
	case err != nil:
		h.o.Logger.Error("usage: key lookup failed", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry shortly")
		return
	}
	if p := auth.Problem(key, h.o.Now()); p != "" {
		writeError(w, http.StatusUnauthorized, "authentication_error", p)
		return
	}
	rep, err := h.o.Store.Usage(r.Context(), key.AccountID, period)
	if err != nil {
		h.o.Logger.Error("usage: read failed", "err", err, "account", key.AccountID)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry shortly")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, NewUsage(rep))
}

// NewUsage converts a store report to the wire record. USD amounts are the
// integer nano-USD ledger divided once, so they are exact to 1e-9 USD and
// never accumulate rounding.
func NewUsage(rep store.UsageReport) Usage {
	u := Usage{
		BalanceUSD: pricing.USD(rep.Balance),
		Currency:   "USD",
		Period:     string(rep.Period),
		Limits: UsageLimits{
			DailyUSD:      pricing.USD(rep.Limits.DailyNanoUSD),
			DailyUsedUSD:  pricing.USD(rep.DailyUsed),
			WindowMinutes: rep.Limits.WindowMinutes,
			RPM:           rep.Limits.RPM,
		},
		Usage: UsageTotals{
			InputTokens:  rep.Totals.Input,
			OutputTokens: rep.Totals.Output,
			CacheTokens:  rep.Totals.CacheWrite + rep.Totals.CacheRead,
			Requests:     rep.Totals.Requests,
			CostUSD:      pricing.USD(rep.Totals.Cost),
		},
		ByModel: make([]ModelUsage, 0, len(rep.ByModel)),
	}
	for _, m := range rep.ByModel {
		u.ByModel = append(u.ByModel, ModelUsage{
			Model: m.Model, Requests: m.Requests, InputTokens: m.Input, OutputTokens: m.Output,
			CostUSD: pricing.USD(m.Cost),
		})
	}
	return u
}

// ErrorBody is the one error shape of the control endpoints:
// {"error":{"type":"...","message":"..."}}.
type ErrorBody struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, code int, typ, msg string) {
	var e ErrorBody
	e.Error.Type, e.Error.Message = typ, msg
	writeJSON(w, code, e)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":{"type":"api_error","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
