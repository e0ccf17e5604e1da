// Package console serves the gateway's web consoles and the data API they
// read:
//
//   - the data API under /v1/usage/ (a daily spend series, ledger pages, a
//     month's ledger as CSV), authenticated like GET /v1/usage, on the
//     sidecar's control server and routed by Envoy on the public listener;
//   - the customer page at /console/ on the same server: a static page whose
//     script signs in with a credential kept in the browser's session
//     storage and reads the data API;
//   - the operator console (Operator), on its own loopback listener, signed
//     in with the admin token and acting through the admin service.
package console

import (
	"context"
	"encoding/csv"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/control"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// SettlementWaiter waits until the replies this sidecar has released for an
// account have been settled.
type SettlementWaiter interface {
	WaitSettled(ctx context.Context, accountID string) error
}

// readPolicy is GET /v1/usage's: both kinds of credential read their
// account's data, also while the account is suspended.
var readPolicy = auth.Policy{Kinds: []account.KeyKind{account.ModelKey, account.ReadOnlyToken}, AllowSuspended: true}

// APIStore is what the data API reads of the gateway's store
// (internal/store implements it).
type APIStore interface {
	DailyUsage(ctx context.Context, accountID string, days int) ([]ledger.DayCounters, error)
	LedgerBetween(ctx context.Context, accountID string, from, to time.Time, after string, limit int) ([]ledger.Entry, string, error)
	ListKeys(ctx context.Context, accountID string) ([]account.Key, error)
	RecentLedger(ctx context.Context, accountID, before string, limit int) ([]ledger.Entry, string, error)
}

// APIOptions configure the data API and the customer page.
type APIOptions struct {
	Store APIStore
	Keys  auth.Authenticator
	// Settled, when set, makes a read wait (at most SettleWait) for the
	// settlements of replies this sidecar has already released.
	Settled    SettlementWaiter
	SettleWait time.Duration // default 2s
	// SSO makes the customer page offer single sign-on (Customer serves
	// it).
	SSO    bool
	Logger *slog.Logger
	Now    func() time.Time
}

// Paths of the data API.
const (
	PathDaily     = "/v1/usage/daily"
	PathLedger    = "/v1/usage/ledger"
	PathLedgerCSV = "/v1/usage/ledger.csv"
)

// Ledger page sizes of the data API.
const (
	defaultLedgerPage = 50
	maxLedgerPage     = 500
	csvPage           = 1000
)

// Mount adds the data API (under /v1/usage/) and the customer page (under
// /console/) to mux.
func Mount(mux Mux, o APIOptions) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.SettleWait <= 0 {
		o.SettleWait = 2 * time.Second
	}
	a := &api{o: o}
	mux.HandleFunc(PathDaily, a.read(a.daily))
	mux.HandleFunc(PathLedger, a.read(a.ledger))
	mux.HandleFunc(PathLedgerCSV, a.read(a.ledgerCSV))
	mux.HandleFunc("/v1/usage/", func(w http.ResponseWriter, r *http.Request) {
		control.WriteError(w, http.StatusNotFound, "not_found", "no such path")
	})
	mountCustomer(mux, o.SSO)
}

type api struct{ o APIOptions }

// read authenticates a GET of the data API and calls h with the caller's
// account, once its released replies are settled.
func (a *api) read(h func(w http.ResponseWriter, r *http.Request, q url.Values, accountID string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			control.WriteError(w, http.StatusMethodNotAllowed, "method_not_allowed", "the data API is read-only; use GET")
			return
		}
		key, ok := control.Caller(w, r, a.o.Keys, a.o.Now(), readPolicy, a.o.Logger)
		if !ok {
			return
		}
		q, err := url.ParseQuery(r.URL.RawQuery) // refuses ';' as a separator
		if err != nil {
			control.WriteError(w, http.StatusBadRequest, "invalid_request_error", "malformed query")
			return
		}
		if a.o.Settled != nil {
			// Bounded: past the bound the read answers with what the store
			// has.
			ctx, cancel := context.WithTimeout(r.Context(), a.o.SettleWait)
			a.o.Settled.WaitSettled(ctx, key.AccountID)
			cancel()
		}
		h(w, r, q, key.AccountID)
	}
}

// storeFailed answers a failed store read.
func (a *api) storeFailed(w http.ResponseWriter, op, accountID string, err error) {
	a.o.Logger.Error("console api: read failed", "op", op, "account", accountID, "err", err)
	w.Header().Set("Retry-After", "1")
	control.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry shortly")
}

// only checks that q has no parameters but the allowed ones, each at most
// once.
func only(q url.Values, allowed ...string) error {
	for k, v := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return fmt.Errorf("unknown query parameter %q", k)
		}
		if len(v) != 1 {
			return fmt.Errorf("query parameter %q must be given once", k)
		}
	}
	return nil
}

// Daily is the record of GET /v1/usage/daily.
type Daily struct {
	Currency string `json:"currency"`
	Days     []Day  `json:"days"`
}

// Day is one UTC day of the series.
type Day struct {
	Date     string  `json:"date"` // YYYY-MM-DD
	Requests int64   `json:"requests"`
	CostUSD  float64 `json:"cost_usd"`
	control.Quantities
}

func (a *api) daily(w http.ResponseWriter, r *http.Request, q url.Values, accountID string) {
	if err := only(q, "days"); err != nil {
		control.WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	days := store.MaxSeriesDays
	if v := q.Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > store.MaxSeriesDays {
			control.WriteError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("days must be 1 to %d", store.MaxSeriesDays))
			return
		}
		days = n
	}
	series, err := a.o.Store.DailyUsage(r.Context(), accountID, days)
	if err != nil {
		a.storeFailed(w, "daily", accountID, err)
		return
	}
	out := Daily{Currency: "USD", Days: make([]Day, len(series))}
	for i, d := range series {
		out.Days[i] = Day{
			Date: d.Day.Format(time.DateOnly), Requests: d.Requests, CostUSD: pricing.USD(d.Cost),
			Quantities: control.QuantitiesOf(d.Usage),
		}
	}
	control.WriteJSON(w, http.StatusOK, out)
}

// LedgerPage is the record of GET /v1/usage/ledger: entries newest first.
type LedgerPage struct {
	Entries []LedgerEntry `json:"entries"`
	// NextCursor, passed as cursor, reads the page of older entries; ""
	// when there is none.
	NextCursor string `json:"next_cursor"`
}

// LedgerEntry is one settled request as the data API shows it.
type LedgerEntry struct {
	ID        string `json:"id"`
	RequestID string `json:"request_id"`
	AccountID string `json:"account_id"`
	StartTime string `json:"start_time"`
	EndTime   string `json:"end_time"`
	KeyID     string `json:"key_id"`
	KeyLabel  string `json:"key_label"`
	// ProjectID is the project the request counted against; "" for the
	// default project.
	ProjectID      string `json:"project_id"`
	Model          string `json:"model"`
	ModelRequested string `json:"model_requested"`
	ModelReported  string `json:"model_reported"`
	Status         int    `json:"status"`
	Stream         bool   `json:"stream"`
	Estimated      bool   `json:"estimated"`
	Interrupted    bool   `json:"interrupted"`
	FallbackPrice  bool   `json:"fallback_price"`
	Capped         bool   `json:"capped"`
	Reconciled     bool   `json:"reconciled"`
	Endpoint       string `json:"endpoint"`
	// VendorKey names the vendor key that served ("default" for
	// credential_env, "" when unknown), never its secret; Transport is ""
	// for HTTP, "websocket" for the Responses API's WebSocket transport.
	VendorKey   string `json:"vendor_key"`
	Transport   string `json:"transport"`
	ServiceTier string `json:"service_tier"`
	TierUnknown bool   `json:"tier_unknown"`
	// RegionalProcessing is the regional processing priced ("" for none),
	// with its uplift in parts per million.
	RegionalProcessing   string `json:"regional_processing"`
	RegionalUpliftPPM    int64  `json:"regional_uplift_ppm"`
	LongContextThreshold int64  `json:"long_context_threshold"`
	control.Quantities
	// Prices are the unit prices applied, by priced usage kind, in
	// nano-USD per million units.
	Prices      map[string]int64 `json:"prices_nano_usd_per_million"`
	CostUSD     float64          `json:"cost_usd"`
	CostNanoUSD int64            `json:"cost_nano_usd"`
}

func (a *api) ledger(w http.ResponseWriter, r *http.Request, q url.Values, accountID string) {
	if err := only(q, "limit", "cursor"); err != nil {
		control.WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	limit := defaultLedgerPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLedgerPage {
			control.WriteError(w, http.StatusBadRequest, "invalid_request_error", fmt.Sprintf("limit must be 1 to %d", maxLedgerPage))
			return
		}
		limit = n
	}
	cursor := q.Get("cursor")
	if cursor != "" && !entryID(cursor) {
		control.WriteError(w, http.StatusBadRequest, "invalid_request_error", "malformed cursor")
		return
	}
	entries, next, err := a.o.Store.RecentLedger(r.Context(), accountID, cursor, limit)
	if err != nil {
		a.storeFailed(w, "ledger", accountID, err)
		return
	}
	labels, err := a.labels(r.Context(), accountID)
	if err != nil {
		a.storeFailed(w, "ledger", accountID, err)
		return
	}
	out := LedgerPage{Entries: make([]LedgerEntry, len(entries)), NextCursor: next}
	for i, e := range entries {
		out.Entries[i] = newLedgerEntry(e, labels[e.KeyID])
	}
	control.WriteJSON(w, http.StatusOK, out)
}

// labels maps the account's key ids to their labels.
func (a *api) labels(ctx context.Context, accountID string) (map[string]string, error) {
	keys, err := a.o.Store.ListKeys(ctx, accountID)
	if err != nil {
		return nil, err
	}
	m := make(map[string]string, len(keys))
	for _, k := range keys {
		m[k.ID] = k.Label
	}
	return m, nil
}

func newLedgerEntry(e ledger.Entry, label string) LedgerEntry {
	prices := map[string]int64{}
	for _, k := range usage.Kinds {
		if k.Priced() {
			prices[k.Name] = k.Of(e.Rates)
		}
	}
	return LedgerEntry{
		ID: e.ID, RequestID: e.RequestID, AccountID: e.AccountID, StartTime: timeString(e.StartedAt), EndTime: timeString(e.EndedAt),
		KeyID: e.KeyID, KeyLabel: label, ProjectID: e.ProjectID,
		Model: string(e.Priced), ModelRequested: string(e.Requested), ModelReported: string(e.Reported),
		Status: e.Status, Stream: e.Stream, Estimated: e.Estimated, Interrupted: e.Interrupted,
		FallbackPrice: e.Fallback, Capped: e.Capped, Reconciled: e.Reconciled, Endpoint: e.Endpoint,
		VendorKey: e.VendorKey, Transport: e.Transport,
		ServiceTier: e.ServiceTier, TierUnknown: e.TierUnknown, RegionalProcessing: e.Region, RegionalUpliftPPM: e.Uplift,
		LongContextThreshold: e.LongContext,
		Quantities:           control.QuantitiesOf(e.Usage), Prices: prices, CostUSD: pricing.USD(e.Cost), CostNanoUSD: e.Cost,
	}
}

// csvColumn is one column of GET /v1/usage/ledger.csv: its header and its
// cell of an entry (with the entry's key label).
type csvColumn struct {
	name string
	cell func(e ledger.Entry, label string) string
}

// csvColumns are the CSV's columns, from which its header and each row are
// made: the ledger entry's fields, then each usage kind's quantity and unit
// price (nano-USD per million units), then the cost. Text cells go through
// csvText; numbers, booleans and times are written as the gateway writes
// them.
var csvColumns = func() []csvColumn {
	text := func(name string, f func(e ledger.Entry) string) csvColumn {
		return csvColumn{name, func(e ledger.Entry, _ string) string { return csvText(f(e)) }}
	}
	plain := func(name string, f func(e ledger.Entry) string) csvColumn {
		return csvColumn{name, func(e ledger.Entry, _ string) string { return f(e) }}
	}
	flag := func(name string, f func(e ledger.Entry) bool) csvColumn {
		return plain(name, func(e ledger.Entry) string { return strconv.FormatBool(f(e)) })
	}
	num := func(name string, f func(e ledger.Entry) int64) csvColumn {
		return plain(name, func(e ledger.Entry) string { return strconv.FormatInt(f(e), 10) })
	}
	cols := []csvColumn{
		text("id", func(e ledger.Entry) string { return e.ID }),
		text("request_id", func(e ledger.Entry) string { return e.RequestID }),
		text("account_id", func(e ledger.Entry) string { return e.AccountID }),
		plain("start_time", func(e ledger.Entry) string { return timeString(e.StartedAt) }),
		plain("end_time", func(e ledger.Entry) string { return timeString(e.EndedAt) }),
		text("key_id", func(e ledger.Entry) string { return e.KeyID }),
		{"key_label", func(_ ledger.Entry, label string) string { return csvText(label) }},
		text("model", func(e ledger.Entry) string { return string(e.Priced) }),
		text("model_requested", func(e ledger.Entry) string { return string(e.Requested) }),
		text("model_reported", func(e ledger.Entry) string { return string(e.Reported) }),
		num("status", func(e ledger.Entry) int64 { return int64(e.Status) }),
		flag("stream", func(e ledger.Entry) bool { return e.Stream }),
		flag("estimated", func(e ledger.Entry) bool { return e.Estimated }),
		flag("interrupted", func(e ledger.Entry) bool { return e.Interrupted }),
		flag("fallback_price", func(e ledger.Entry) bool { return e.Fallback }),
		flag("capped", func(e ledger.Entry) bool { return e.Capped }),
		flag("reconciled", func(e ledger.Entry) bool { return e.Reconciled }),
		text("endpoint", func(e ledger.Entry) string { return e.Endpoint }),
		text("vendor_key", func(e ledger.Entry) string { return e.VendorKey }),
		text("transport", func(e ledger.Entry) string { return e.Transport }),
		text("service_tier", func(e ledger.Entry) string { return e.ServiceTier }),
		flag("tier_unknown", func(e ledger.Entry) bool { return e.TierUnknown }),
		text("regional_processing", func(e ledger.Entry) string { return e.Region }),
		num("regional_uplift_ppm", func(e ledger.Entry) int64 { return e.Uplift }),
		num("long_context_threshold", func(e ledger.Entry) int64 { return e.LongContext }),
	}
	for _, k := range usage.Kinds {
		cols = append(cols, num(k.Name, func(e ledger.Entry) int64 { return k.Of(e.Usage) }))
	}
	for _, k := range usage.Kinds {
		if k.Priced() {
			cols = append(cols, num("price_"+k.Name, func(e ledger.Entry) int64 { return k.Of(e.Rates) }))
		}
	}
	return append(cols,
		num("cost_nano_usd", func(e ledger.Entry) int64 { return e.Cost }),
		plain("cost_usd", func(e ledger.Entry) string { return pricing.FormatUSD(e.Cost) }),
		// Last: added after the other columns, so that a reader by position
		// keeps working.
		text("project_id", func(e ledger.Entry) string { return e.ProjectID }))
}()

// CSVHeader is the header row of GET /v1/usage/ledger.csv.
func CSVHeader() []string {
	h := make([]string, len(csvColumns))
	for i, c := range csvColumns {
		h[i] = c.name
	}
	return h
}

// csvRow is an entry's CSV row.
func csvRow(e ledger.Entry, label string) []string {
	row := make([]string, len(csvColumns))
	for i, c := range csvColumns {
		row[i] = c.cell(e, label)
	}
	return row
}

// csvText defends a text cell of the CSV against formula injection: a
// spreadsheet opening the file runs a cell that starts with =, +, -, @,
// tab or CR as a formula (=HYPERLINK(…), +cmd|…), so such a cell gets a
// leading ' and is shown as text. Only text goes through it (model names,
// labels, ids: strings from clients, vendors and operators); the numbers
// the gateway writes, a negative cost among them, stay numbers. The JSON
// exports are exact and never pass through here.
func csvText(s string) string {
	if s != "" && strings.IndexByte("=+-@\t\r", s[0]) >= 0 {
		return "'" + s
	}
	return s
}

// ledgerCSV writes the ledger entries recorded in one UTC month (the month
// parameter, YYYY-MM; default the current one), oldest first, page by page.
func (a *api) ledgerCSV(w http.ResponseWriter, r *http.Request, q url.Values, accountID string) {
	if err := only(q, "month"); err != nil {
		control.WriteError(w, http.StatusBadRequest, "invalid_request_error", err.Error())
		return
	}
	now := a.o.Now().UTC()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	if v := q.Get("month"); v != "" {
		t, err := time.Parse("2006-01", v)
		if err != nil {
			control.WriteError(w, http.StatusBadRequest, "invalid_request_error", "month must be YYYY-MM")
			return
		}
		from = t
	}
	to := from.AddDate(0, 1, 0)
	labels, err := a.labels(r.Context(), accountID)
	if err != nil {
		a.storeFailed(w, "ledger csv", accountID, err)
		return
	}
	// The first page is read before the status is sent, so that a store
	// that is down gets a 503 rather than a cut file.
	entries, next, err := a.o.Store.LedgerBetween(r.Context(), accountID, from, to, "", csvPage)
	if err != nil {
		a.storeFailed(w, "ledger csv", accountID, err)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="ledger-%s.csv"`, from.Format("2006-01")))
	cw := csv.NewWriter(w)
	cw.Write(CSVHeader())
	for {
		for _, e := range entries {
			cw.Write(csvRow(e, labels[e.KeyID]))
		}
		if next == "" {
			break
		}
		entries, next, err = a.o.Store.LedgerBetween(r.Context(), accountID, from, to, next, csvPage)
		if err != nil {
			// The status is sent: cutting the body tells the client the
			// file is incomplete.
			a.o.Logger.Error("console api: ledger csv cut short", "account", accountID, "err", err)
			cw.Flush()
			panic(http.ErrAbortHandler)
		}
	}
	cw.Flush()
}

// timeString formats t as RFC 3339 in UTC with milliseconds; "" for the
// zero time.
func timeString(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// entryID reports whether s is a stream entry id, MS-SEQ.
func entryID(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok || len(s) > 64 {
		return false
	}
	_, e1 := strconv.ParseUint(ms, 10, 64)
	_, e2 := strconv.ParseUint(seq, 10, 64)
	return e1 == nil && e2 == nil
}
