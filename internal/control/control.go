// Package control serves the gateway's own HTTP endpoints, reached through
// Envoy: GET /health for anyone, GET /v1/usage for an account's credentials,
// and GET /metrics for Prometheus; and, on the sidecar's port only, GET
// /livez and GET /readyz for the orchestrator.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// UsageReader reads an account's usage.
type UsageReader interface {
	Usage(ctx context.Context, accountID string, p ledger.Period) (ledger.UsageReport, error)
	KeyStates(ctx context.Context, accountID string, keyIDs ...string) ([]ledger.KeyState, error)
	ListKeys(ctx context.Context, accountID string) ([]account.Key, error)
	ListProjects(ctx context.Context, accountID string) ([]account.Project, error)
	ProjectStates(ctx context.Context, accountID string, ids ...string) ([]ledger.KeyState, error)
	Ping(ctx context.Context) error
}

// usagePolicy: both kinds of credential read usage, also while the account
// is suspended.
var usagePolicy = auth.Policy{Kinds: []account.KeyKind{account.ModelKey, account.ReadOnlyToken}, AllowSuspended: true}

// SettlementWaiter waits until the replies this sidecar has released for an
// account have been settled.
type SettlementWaiter interface {
	WaitSettled(ctx context.Context, accountID string) error
}

// EndpointReporter tells which endpoint currently serves each upstream:
// "primary", "reserve", "none" (no usable endpoint) or "unknown" (Envoy's
// admin interface could not be read).
type EndpointReporter interface {
	Endpoints() map[string]string
}

// problemReporter is an EndpointReporter that also says, in one line, why
// an upstream's endpoint is unknown (the watcher: no Envoy cluster of its
// name, Envoy's admin not answering), so that /health and /readyz name the
// missing piece instead of waiting for good.
type problemReporter interface {
	Problem(upstream string) string
}

// unknownEndpoint is the problem line of an upstream whose endpoint is
// unknown.
func (h *Handler) unknownEndpoint(upstream string) string {
	if pr, ok := h.o.Endpoints.(problemReporter); ok {
		if p := pr.Problem(upstream); p != "" {
			return p
		}
	}
	return fmt.Sprintf("upstream %s: endpoint state not yet known", upstream)
}

// Options configure the control handler.
type Options struct {
	Region    string
	Upstreams []string
	Store     UsageReader
	Keys      auth.Authenticator
	// Settled, when set, makes a usage read wait (at most UsageWait) for
	// the settlements of replies this sidecar has already released, so
	// that a read after a reply ends includes it.
	Settled   SettlementWaiter
	UsageWait time.Duration // default 2s
	// Serving reports whether the processor is serving.
	Serving   func() bool
	Endpoints EndpointReporter // optional
	// EndpointsLearned: the Envoy in front may have no admin interface the
	// sidecar can read (a control plane's, under the reduced contract): an
	// upstream whose endpoint is unknown is no problem for /health or
	// /readyz, since each reply names the endpoint that served it.
	EndpointsLearned bool
	// VendorKeys, when set, reports each pooled upstream's vendor keys by
	// name and state (never a secret: the sidecar has none).
	VendorKeys func() map[string][]keypool.KeyState
	Metrics    http.Handler     // optional
	Logger     *slog.Logger     // optional
	Now        func() time.Time // optional
	// Probe checks the store for /health and /readyz; nil builds one on
	// Store.Ping.
	Probe *StoreProbe
}

// Handler serves the control endpoints.
type Handler struct {
	o   Options
	mux *http.ServeMux
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
	if o.UsageWait <= 0 {
		o.UsageWait = 2 * time.Second
	}
	if o.Probe == nil {
		// The probe is cached briefly: /health is polled by monitoring and
		// must stay cheap, and one ping per interval answers every poll.
		o.Probe = NewStoreProbe(o.Store.Ping, ProbeOptions{Now: o.Now})
	}
	h := &Handler{o: o, mux: http.NewServeMux()}
	h.mux.HandleFunc("/health", h.health)
	h.mux.HandleFunc("/livez", h.livez)
	h.mux.HandleFunc("/readyz", h.readyz)
	h.mux.HandleFunc("/v1/usage", h.usage)
	if o.Metrics != nil {
		h.mux.Handle("/metrics", o.Metrics)
	}
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "not_found", "no such path")
	})
	return h
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Health is the health record; docs/clients.md's API reference documents each
// field (endpoints and problems included).
type Health struct {
	Status    string            `json:"status"`
	Region    string            `json:"region"`
	Upstreams []string          `json:"upstreams"`
	TS        string            `json:"ts"`
	Endpoints map[string]string `json:"endpoints,omitempty"`
	Problems  []string          `json:"problems,omitempty"`
	// VendorKeys are each pooled upstream's keys: name, state (active,
	// cooling, disabled), until when and the vendor's status that set it.
	VendorKeys map[string][]keypool.KeyState `json:"vendor_keys,omitempty"`
}

// Health statuses.
const (
	StatusOK          = "ok"
	StatusUnavailable = "unavailable"
)

// health answers the whole truth: ok while every upstream has a usable
// endpoint (primary or reserve), the store answers and the processor serves;
// 503 naming each problem otherwise. It never waits on the store longer than
// the probe's timeout.
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	if !getOrHead(w, r) {
		return
	}
	rec := Health{
		Status:    StatusOK,
		Region:    h.o.Region,
		Upstreams: h.o.Upstreams,
		TS:        h.o.Now().UTC().Format(time.RFC3339),
	}
	if rec.Upstreams == nil {
		rec.Upstreams = []string{}
	}
	if h.o.Endpoints != nil {
		rec.Endpoints = h.o.Endpoints.Endpoints()
		for _, u := range h.o.Upstreams {
			switch rec.Endpoints[u] {
			case endpointNone:
				rec.Problems = append(rec.Problems, fmt.Sprintf("upstream %s: no usable endpoint (primary and reserve both unhealthy)", u))
			case endpointUnknown:
				// Before the first read of Envoy's state (or with Envoy's
				// admin unreadable) nothing says a request would be served,
				// unless replies name their endpoint (EndpointsLearned).
				if !h.o.EndpointsLearned {
					rec.Problems = append(rec.Problems, h.unknownEndpoint(u))
				}
			}
		}
	}
	if h.o.VendorKeys != nil {
		rec.VendorKeys = h.o.VendorKeys()
		for _, u := range h.o.Upstreams {
			keys := rec.VendorKeys[u]
			if len(keys) > 0 && !slices.ContainsFunc(keys, func(k keypool.KeyState) bool { return k.State != keypool.Disabled }) {
				rec.Problems = append(rec.Problems, fmt.Sprintf("upstream %s: the vendor refused every key of its pool", u))
			}
		}
	}
	if err := h.o.Probe.Check(r.Context()); err != nil {
		rec.Problems = append(rec.Problems, "store: "+storeProblem(err))
	}
	if !h.o.Serving() {
		rec.Problems = append(rec.Problems, "processor not serving")
	}
	code := http.StatusOK
	if len(rec.Problems) > 0 {
		rec.Status, code = StatusUnavailable, http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, code, rec)
}

// endpointNone is what the endpoint reporter says of an upstream with no
// usable endpoint, endpointUnknown of one whose state it has not read.
const (
	endpointNone    = "none"
	endpointUnknown = "unknown"
)

// storeProblem says what is wrong with the store, naming the Redis Cluster
// masters that are down (addresses only: no credentials are part of them).
func storeProblem(err error) string {
	problem := "unreachable"
	if errors.Is(err, ErrStoreSlow) || errors.Is(err, context.DeadlineExceeded) {
		problem = "not answering"
	}
	if down, ok := errors.AsType[*store.ShardsDown](err); ok {
		return fmt.Sprintf("shard %s %s", strings.Join(down.Addrs, ", "), problem)
	}
	return problem
}

// Probe records of /livez and /readyz.
type probeRecord struct {
	Status   string   `json:"status"`
	Problems []string `json:"problems,omitempty"`
}

// livez is the liveness probe: 200 while the process can answer HTTP at
// all. Nothing outside the process (store, vendors) makes it fail, so an
// outage elsewhere never gets healthy pods restarted.
func (h *Handler) livez(w http.ResponseWriter, r *http.Request) {
	if !getOrHead(w, r) {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusOK, probeRecord{Status: StatusOK})
}

// readyz is the readiness probe: 200 while this pod can take model traffic
// (the processor serves and the store answers). Upstream endpoints are left
// out on purpose: every pod shares them, so taking pods out of a Service
// cannot help when a vendor is down.
func (h *Handler) readyz(w http.ResponseWriter, r *http.Request) {
	if !getOrHead(w, r) {
		return
	}
	rec := probeRecord{Status: StatusOK}
	if !h.o.Serving() {
		rec.Problems = append(rec.Problems, "processor not serving")
	}
	// Not ready before the endpoints' state is known: at start, requests
	// would get 503 no_healthy_upstream. A known outage of both endpoints
	// is left to /health: every pod shares it.
	if h.o.Endpoints != nil && !h.o.EndpointsLearned {
		for _, u := range h.o.Upstreams {
			if h.o.Endpoints.Endpoints()[u] == endpointUnknown {
				rec.Problems = append(rec.Problems, h.unknownEndpoint(u))
			}
		}
	}
	if err := h.o.Probe.Check(r.Context()); err != nil {
		rec.Problems = append(rec.Problems, "store: "+storeProblem(err))
	}
	code := http.StatusOK
	if len(rec.Problems) > 0 {
		rec.Status, code = StatusUnavailable, http.StatusServiceUnavailable
		w.Header().Set("Retry-After", "1")
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, code, rec)
}

func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "use GET")
		return false
	}
	return true
}

// Usage is the usage record; docs/clients.md's API reference documents each field.
type Usage struct {
	BalanceUSD float64      `json:"balance_usd"`
	Currency   string       `json:"currency"`
	Period     string       `json:"period"`
	Limits     UsageLimits  `json:"limits"`
	Usage      UsageTotals  `json:"usage"`
	ByModel    []ModelUsage `json:"by_model"`
	// Key is the calling cr_ key's own limits and spend; absent for a ro_
	// token.
	Key *KeyUsage `json:"key,omitempty"`
	// ByKey is each model key's share of the period; only a ro_ token
	// (the account's reader) sees it.
	ByKey []KeyShare `json:"by_key,omitempty"`
	// Projects is each project's limits and share of the period, the
	// default project first: every project for a ro_ token, the key's own
	// for a cr_ key.
	Projects []ProjectShare `json:"projects"`
}

// ProjectShare is one project's limits and share of the period. The
// default project has no limits of its own (Limits absent); its spend is
// the account's less the other projects'.
type ProjectShare struct {
	ID       string          `json:"id"`
	Name     string          `json:"name"`
	Requests int64           `json:"requests"`
	CostUSD  float64         `json:"cost_usd"`
	Limits   *KeyUsageLimits `json:"limits,omitempty"`
}

// UsageLimits are the account's limits and what is used of each. Spend is
// settled spend; admission also counts what open requests hold.
type UsageLimits struct {
	DailyUSD      float64 `json:"daily_usd"`
	DailyUsedUSD  float64 `json:"daily_used_usd"`
	WindowMinutes int64   `json:"window_minutes"`
	RPM           int64   `json:"rpm"`
	// LeasedUSD is what the sidecars' escrow leases hold of the balance
	// (docs/billing.md, Leases): neither spent nor spendable elsewhere.
	LeasedUSD float64 `json:"leased_usd"`
	LevelLimits
}

// LevelLimits are the limits the spec's record did not have, the same for
// an account and a key: 0 means none.
type LevelLimits struct {
	MonthlyUSD     float64 `json:"monthly_usd"`
	MonthlyUsedUSD float64 `json:"monthly_used_usd"`
	TPM            int64   `json:"tpm"`
	MinuteTokens   int64   `json:"tokens_this_minute"`
	Concurrency    int64   `json:"concurrency"`
	InFlight       int64   `json:"in_flight"`
	HeldUSD        float64 `json:"held_usd"`
}

// KeyUsage is one key's own limits and spend.
type KeyUsage struct {
	ID     string         `json:"id"`
	Label  string         `json:"label"`
	Limits KeyUsageLimits `json:"limits"`
	// Requests and CostUSD are the key's billed replies and spend in the
	// period.
	Requests int64   `json:"requests"`
	CostUSD  float64 `json:"cost_usd"`
}

// KeyUsageLimits are a key's limits and what is used of each.
type KeyUsageLimits struct {
	DailyUSD      float64 `json:"daily_usd"`
	DailyUsedUSD  float64 `json:"daily_used_usd"`
	WindowMinutes int64   `json:"window_minutes"`
	RPM           int64   `json:"rpm"`
	LevelLimits
	TotalUSD     float64 `json:"total_usd"`
	TotalUsedUSD float64 `json:"total_used_usd"`
}

// KeyShare is one model key's share of the period.
type KeyShare struct {
	ID       string  `json:"id"`
	Label    string  `json:"label"`
	Requests int64   `json:"requests"`
	CostUSD  float64 `json:"cost_usd"`
}

// UsageTotals aggregate the period. The token fields do not overlap (see
// usage.Usage), except reasoning_tokens, which are part of output_tokens;
// cache_tokens is the sum of cache reads and writes.
type UsageTotals struct {
	Quantities
	CacheTokens int64   `json:"cache_tokens"`
	Requests    int64   `json:"requests"`
	CostUSD     float64 `json:"cost_usd"`
}

// Quantities are the usage kinds, one JSON field each.
type Quantities struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	CacheReadTokens    int64 `json:"cache_read_tokens"`
	CacheWrite5mTokens int64 `json:"cache_write_5m_tokens"`
	CacheWrite1hTokens int64 `json:"cache_write_1h_tokens"`
	AudioInputTokens   int64 `json:"audio_input_tokens"`
	AudioOutputTokens  int64 `json:"audio_output_tokens"`
	ReasoningTokens    int64 `json:"reasoning_tokens"`
	WebSearches        int64 `json:"web_searches"`
	// The responses operation's other built-in tools.
	FileSearches            int64 `json:"file_searches"`
	CodeInterpreterSessions int64 `json:"code_interpreter_sessions"`
	ImageGenerations        int64 `json:"image_generations"`
	// Input audio billed by duration (whole seconds), not tokens.
	AudioSeconds int64 `json:"audio_seconds"`
	// Image generation's image tokens, and images priced per image.
	ImageInputTokens  int64 `json:"image_input_tokens"`
	ImageOutputTokens int64 `json:"image_output_tokens"`
	Images            int64 `json:"images"`
}

// QuantitiesOf returns u's quantities, every kind in the field its JSON
// name (usage.Kind.Column) names.
func QuantitiesOf(u usage.Usage) Quantities {
	var q Quantities
	v := reflect.ValueOf(&q).Elem()
	for i, k := range usage.Kinds {
		if f := quantityFields[i]; f >= 0 {
			v.Field(f).SetInt(k.Of(u))
		}
	}
	return q
}

// quantityFields are, by kind, the index of Quantities' field whose JSON
// name is the kind's Column (-1 for none, which a test refuses).
var quantityFields = func() []int {
	t := reflect.TypeFor[Quantities]()
	out := make([]int, len(usage.Kinds))
	for i, k := range usage.Kinds {
		out[i] = -1
		for f := range t.NumField() {
			if t.Field(f).Tag.Get("json") == k.Column() {
				out[i] = f
			}
		}
	}
	return out
}()

// ModelUsage is one priced model's share of the period: a dated snapshot and
// the name it is a snapshot of are one row.
type ModelUsage struct {
	Model    string `json:"model"`
	Requests int64  `json:"requests"`
	Quantities
	CostUSD float64 `json:"cost_usd"`
}

func (h *Handler) usage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET /v1/usage is read-only; use GET")
		return
	}
	key, ok := Caller(w, r, h.o.Keys, h.o.Now(), usagePolicy, h.o.Logger)
	if !ok {
		return
	}
	period, err := parsePeriod(r.URL.RawQuery)
	if err != nil {
		WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	if h.o.Settled != nil {
		// Bounded: a store that is down must not hold the read; past the
		// bound the read answers with what the store has.
		ctx, cancel := context.WithTimeout(r.Context(), h.o.UsageWait)
		h.o.Settled.WaitSettled(ctx, key.AccountID)
		cancel()
	}
	rep, err := h.o.Store.Usage(r.Context(), key.AccountID, period)
	if err != nil {
		h.o.Logger.Error("usage: read failed", "err", err, "account", key.AccountID)
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry shortly")
		return
	}
	u := NewUsage(rep)
	err = h.addKeys(r.Context(), &u, key, period)
	if err == nil {
		u.Projects, err = Projects(r.Context(), h.o.Store, rep, key, period)
	}
	if err != nil {
		h.o.Logger.Error("usage: key read failed", "err", err, "account", key.AccountID)
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry shortly")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	WriteJSON(w, http.StatusOK, u)
}

// addKeys adds what the credential may see of keys: a model key its own
// limits and spend, a read-only token each model key's share.
func (h *Handler) addKeys(ctx context.Context, u *Usage, key account.Key, p ledger.Period) error {
	if key.Kind == account.ModelKey {
		ks, err := h.o.Store.KeyStates(ctx, key.AccountID, key.ID)
		if err != nil {
			return err
		}
		u.Key = newKeyUsage(key, ks[0], p)
		return nil
	}
	keys, err := h.o.Store.ListKeys(ctx, key.AccountID)
	if err != nil {
		return err
	}
	var ids []string
	var model []account.Key
	for _, k := range keys {
		if k.Kind == account.ModelKey {
			ids = append(ids, k.ID)
			model = append(model, k)
		}
	}
	states, err := h.o.Store.KeyStates(ctx, key.AccountID, ids...)
	if err != nil {
		return err
	}
	u.ByKey = make([]KeyShare, len(model))
	for i, k := range model {
		c := states[i].Spent(p)
		u.ByKey[i] = KeyShare{ID: k.ID, Label: k.Label, Requests: c.Requests, CostUSD: pricing.USD(c.Cost)}
	}
	return nil
}

// ProjectReader reads an account's projects and their states.
type ProjectReader interface {
	ListProjects(ctx context.Context, accountID string) ([]account.Project, error)
	ProjectStates(ctx context.Context, accountID string, ids ...string) ([]ledger.KeyState, error)
}

// Projects is the projects breakdown of rep, the account's usage over p, as
// credential key may see it: every project for a read-only token, its own
// for a model key.
func Projects(ctx context.Context, st ProjectReader, rep ledger.UsageReport, key account.Key, p ledger.Period) ([]ProjectShare, error) {
	ps, err := st.ListProjects(ctx, key.AccountID)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(ps))
	for _, pr := range ps[1:] {
		ids = append(ids, pr.ID)
	}
	states, err := st.ProjectStates(ctx, key.AccountID, ids...)
	if err != nil {
		return nil, err
	}
	// The default project's share is what the others leave of the
	// account's.
	def := rep.Totals
	out := make([]ProjectShare, 0, len(ps))
	for i, pr := range ps[1:] {
		c := states[i].Spent(p)
		def.Requests -= c.Requests
		def.Cost -= c.Cost
		l := newKeyUsage(account.Key{Limits: pr.Limits}, states[i], p).Limits
		out = append(out, ProjectShare{ID: pr.ID, Name: pr.Name, Requests: c.Requests, CostUSD: pricing.USD(c.Cost), Limits: &l})
	}
	out = append([]ProjectShare{{ID: ps[0].ID, Name: ps[0].Name, Requests: def.Requests, CostUSD: pricing.USD(def.Cost)}}, out...)
	if key.Kind == account.ModelKey {
		for _, sh := range out {
			if sh.ID == key.Project() {
				return []ProjectShare{sh}, nil
			}
		}
		return []ProjectShare{}, nil
	}
	return out, nil
}

func newKeyUsage(k account.Key, ks ledger.KeyState, p ledger.Period) *KeyUsage {
	l := k.Limits
	c := ks.Spent(p)
	return &KeyUsage{
		ID: k.ID, Label: k.Label, Requests: c.Requests, CostUSD: pricing.USD(c.Cost),
		Limits: KeyUsageLimits{
			DailyUSD: pricing.USD(l.DailyNanoUSD), DailyUsedUSD: pricing.USD(ks.Day.Cost),
			WindowMinutes: l.WindowMinutes, RPM: l.RPM,
			LevelLimits: LevelLimits{
				MonthlyUSD: pricing.USD(l.MonthlyNanoUSD), MonthlyUsedUSD: pricing.USD(ks.Month.Cost),
				TPM: l.TPM, MinuteTokens: ks.MinuteTokens, Concurrency: l.Concurrency,
				InFlight: ks.InFlight, HeldUSD: pricing.USD(ks.Held),
			},
			TotalUSD: pricing.USD(l.TotalNanoUSD), TotalUsedUSD: pricing.USD(ks.Total.Cost),
		},
	}
}

// parsePeriod reads the query of /v1/usage: nothing, or exactly one period
// parameter with one of the listed values. Anything else (a repeated or empty
// period, another parameter, a ';' separator) is refused rather than guessed.
func parsePeriod(rawQuery string) (ledger.Period, error) {
	errPeriod := errors.New("the query must be empty or a single period=day|month|total")
	if rawQuery == "" {
		return ledger.Day, nil
	}
	q, err := url.ParseQuery(rawQuery) // refuses ';' as a separator
	if err != nil || len(q) != 1 || len(q["period"]) != 1 {
		return "", errPeriod
	}
	switch p := ledger.Period(q.Get("period")); p {
	case ledger.Day, ledger.Month, ledger.Total:
		return p, nil
	}
	return "", errPeriod
}

// NewUsage converts a store report to the wire record. USD amounts are the
// integer nano-USD ledger divided once, so they are exact to 1e-9 USD and
// never accumulate rounding.
func NewUsage(rep ledger.UsageReport) Usage {
	u := Usage{
		BalanceUSD: pricing.USD(rep.Balance),
		Currency:   "USD",
		Period:     string(rep.Period),
		Limits: UsageLimits{
			DailyUSD:      pricing.USD(rep.Limits.DailyNanoUSD),
			DailyUsedUSD:  pricing.USD(rep.DailyUsed),
			WindowMinutes: rep.Limits.WindowMinutes,
			RPM:           rep.Limits.RPM,
			LeasedUSD:     pricing.USD(rep.Leased),
			LevelLimits: LevelLimits{
				MonthlyUSD: pricing.USD(rep.Limits.MonthlyNanoUSD), MonthlyUsedUSD: pricing.USD(rep.MonthUsed),
				TPM: rep.Limits.TPM, MinuteTokens: rep.MinuteTokens, Concurrency: rep.Limits.Concurrency,
				InFlight: rep.InFlight, HeldUSD: pricing.USD(rep.Held),
			},
		},
		Usage: UsageTotals{
			Quantities:  QuantitiesOf(rep.Totals.Usage),
			CacheTokens: rep.Totals.Usage.CacheRead + rep.Totals.Usage.CacheWrite5m + rep.Totals.Usage.CacheWrite1h,
			Requests:    rep.Totals.Requests,
			CostUSD:     pricing.USD(rep.Totals.Cost),
		},
		ByModel: make([]ModelUsage, 0, len(rep.ByModel)),
	}
	for _, m := range rep.ByModel {
		u.ByModel = append(u.ByModel, ModelUsage{
			Model: string(m.Model), Requests: m.Requests, Quantities: QuantitiesOf(m.Usage),
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

// Caller authenticates a read of the sidecar's HTTP API (/v1/usage, the
// console's data API) by its x-api-key or bearer credential under p. When it
// refuses, it has written the refusal (401, or 503 with retry-after while the
// store is unreachable) and ok is false.
func Caller(w http.ResponseWriter, r *http.Request, keys auth.Authenticator, now time.Time, p auth.Policy, log *slog.Logger) (key account.Key, ok bool) {
	if k, ok := r.Context().Value(callerKey{}).(account.Key); ok && slices.Contains(p.Kinds, k.Kind) {
		return k, true
	}
	key, err := keys.Authenticate(r.Context(),
		auth.Headers{XAPIKey: r.Header.Values("X-Api-Key"), Authorization: r.Header.Values("Authorization")},
		now, p)
	if err == nil {
		return key, true
	}
	var ae *auth.Error
	if errors.As(err, &ae) && ae.Reason == auth.Unavailable {
		log.Error("key lookup failed", "path", r.URL.Path, "err", ae.Err)
		w.Header().Set("Retry-After", "1")
		WriteError(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry shortly")
		return account.Key{}, false
	}
	msg := "invalid token"
	if ae != nil && ae.Reason == auth.Unauthenticated && ae.Message != "invalid API key" {
		msg = ae.Message
	}
	WriteError(w, http.StatusUnauthorized, "authentication_error", msg)
	return account.Key{}, false
}

type callerKey struct{}

// WithCaller returns ctx carrying key as a caller already authenticated by
// other means: a console's single sign-on session reads these APIs as a
// read-only token of its account would. Caller takes it when p accepts its
// kind.
func WithCaller(ctx context.Context, key account.Key) context.Context {
	return context.WithValue(ctx, callerKey{}, key)
}

// WriteError writes an error body of the sidecar's HTTP API.
func WriteError(w http.ResponseWriter, code int, typ, msg string) {
	var e ErrorBody
	e.Error.Type, e.Error.Message = typ, msg
	WriteJSON(w, code, e)
}

// WriteJSON writes v as a JSON reply of the sidecar's HTTP API.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":{"type":"api_error","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}
