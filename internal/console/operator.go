package console

import (
	"cmp"
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

//go:embed templates/operator
var operatorFiles embed.FS

// operatorPages are the operator console's templates: each page with the
// shared layout.
var operatorPages = func() map[string]*template.Template {
	pages := map[string]*template.Template{}
	for _, p := range []string{"signin", "signedin", "accounts", "account", "secret", "models", "vendorkeys", "reconcile", "error"} {
		pages[p] = template.Must(template.New("").Funcs(funcs).ParseFS(operatorFiles,
			"templates/operator/layout.html", "templates/operator/"+p+".html"))
	}
	return pages
}()

// Defaults of SessionOptions, and the sign-in limits.
const (
	DefaultSessionIdle     = 30 * time.Minute
	DefaultSessionLifetime = 12 * time.Hour
	// Sign-in attempts per minute, from one client address and against one
	// credential (the admin token), counted in Redis across sidecars.
	signInsPerAddr       = 5
	signInsPerCredential = 30
)

// SessionCookie names the operator console's session cookie.
const SessionCookie = "gateway_console"

// OperatorStore is what the operator console reads of the gateway's
// store beyond the admin API, and where it counts sign-in attempts
// (internal/store implements it).
type OperatorStore interface {
	RecentAudit(ctx context.Context, before string, limit int) ([]audit.Entry, string, error)
	RecentLedger(ctx context.Context, accountID, before string, limit int) ([]ledger.Entry, string, error)
	SignInAttempt(ctx context.Context, addr, credential string, l store.SignInLimits) (ok bool, retryAfter time.Duration, err error)
	Usage(ctx context.Context, accountID string, p ledger.Period) (ledger.UsageReport, error)
}

// OperatorOptions configure the operator console.
type OperatorOptions struct {
	// Admin is the admin service every action goes through, as gatewayctl's
	// do: validation and the audit trail are the same.
	Admin *admin.Service
	// Store serves the reads the admin API has no call for: spend per
	// period, the ledger and audit trail newest first.
	Store OperatorStore
	Auth  Authenticator
	// Prices are the upstreams' price tables (reloaded in place); Upstreams
	// orders them.
	Prices    pricing.Book
	Upstreams []string
	// VendorKeys, when set, reports each pooled upstream's vendor keys by
	// name and state (the sidecar never has their secrets).
	VendorKeys func() map[string][]keypool.KeyState
	// SSO, when set, offers single sign-on beside the admin token; its
	// people get roles.Operator or roles.Support.
	SSO *SSO
	// Reconciliations, when set, reads the continuous reconciliation's
	// kept windows (nil: no upstream has an admin key).
	Reconciliations Reconciliations
	SessionOptions
	Logger *slog.Logger
	Now    func() time.Time
}

// Operator is the operator console's HTTP handler.
type Operator struct {
	o        OperatorOptions
	mux      *routeMux
	sessions *sessions
}

// NewOperator returns the operator console.
func NewOperator(o OperatorOptions) *Operator {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	op := &Operator{
		o:        o,
		mux:      newRouteMux(),
		sessions: newSessions("op", &o.SessionOptions, o.Now, o.Logger),
	}
	m := op.mux
	m.Handle("GET /static/", staticHandler("/static/"))
	m.HandleFunc("GET /signin", op.signInPage)
	m.HandleFunc("POST /signin", op.signIn)
	m.HandleFunc("GET /sso/login", op.ssoLogin)
	m.HandleFunc("GET /sso/callback", op.ssoCallback)
	m.HandleFunc("POST /signout", op.action(op.signOut))
	m.HandleFunc("GET /{$}", op.page(op.accounts))
	m.HandleFunc("GET /models", op.page(op.models))
	m.HandleFunc("GET /vendor-keys", op.page(op.vendorKeys))
	m.HandleFunc("GET /reconcile", op.page(op.reconciliation))
	m.HandleFunc("GET /accounts/{id}", op.page(op.account))
	m.HandleFunc("POST /accounts", op.action(op.createAccount))
	m.HandleFunc("POST /accounts/{id}/topup", op.action(op.topUp))
	m.HandleFunc("POST /accounts/{id}/suspend", op.action(op.suspend(true)))
	m.HandleFunc("POST /accounts/{id}/resume", op.action(op.suspend(false)))
	m.HandleFunc("POST /accounts/{id}/limits", op.action(op.setLimits))
	m.HandleFunc("POST /accounts/{id}/keys", op.action(op.createKey))
	m.HandleFunc("POST /accounts/{id}/keys/{key}/rotate", op.action(op.rotateKey))
	m.HandleFunc("POST /accounts/{id}/keys/{key}/revoke", op.action(op.revokeKey))
	m.HandleFunc("POST /accounts/{id}/keys/{key}/limits", op.action(op.setKeyLimits))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		op.render(w, r, http.StatusNotFound, "error", nil, view{Title: "Not found", Message: "There is no such page."})
	})
	return op
}

func (op *Operator) ServeHTTP(w http.ResponseWriter, r *http.Request) { op.mux.ServeHTTP(w, r) }

// view is what every page's template gets.
type view struct {
	Title   string
	Actor   string
	SSO     bool // the sign-in page offers single sign-on
	CSRF    string
	Flash   string
	Message string
	Data    any
	id      *Identity // the signed-in person; nil on the sign-in pages
}

// Can reports whether the signed-in person may use the operator route
// named by pattern: a page shows a change's form only to those the route
// allows (the route refuses the others besides).
func (v view) Can(pattern string) bool {
	return v.id != nil && allowed(operatorRoutes, pattern, v.id)
}

func (op *Operator) render(w http.ResponseWriter, r *http.Request, code int, page string, s *session, v view) {
	if s != nil {
		v.Actor, v.CSRF, v.id = s.Actor, s.csrf, &s.Identity
		if v.Flash == "" {
			v.Flash = op.takeFlash(w, r)
		}
	}
	if err := render(w, code, operatorPages[page], "layout", v); err != nil {
		op.o.Logger.Error("console: template failed", "page", page, "err", err)
	}
}

func (op *Operator) session(r *http.Request) *session {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return nil
	}
	return op.sessions.get(r.Context(), c.Value)
}

// page serves a signed-in GET; others are sent to the sign-in page.
func (op *Operator) page(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := op.session(r)
		if s == nil {
			http.Redirect(w, r, "/signin", http.StatusSeeOther)
			return
		}
		if !allowed(operatorRoutes, r.Pattern, &s.Identity) {
			op.forbidden(w, r, s)
			return
		}
		h(w, r, s)
	}
}

// action serves a signed-in POST: it must come from this origin and carry
// the session's CSRF token.
func (op *Operator) action(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		s := op.session(r)
		if s == nil {
			op.render(w, r, http.StatusUnauthorized, "error", nil, view{Title: "Signed out", Message: "Your session has ended; sign in again."})
			return
		}
		if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) != 1 {
			op.o.Logger.Warn("console: action refused: missing or wrong CSRF token", "path", r.URL.Path, "actor", s.Actor)
			op.render(w, r, http.StatusForbidden, "error", s, view{Title: "Refused", Message: "The form's security token is missing or wrong. Reload the page and try again."})
			return
		}
		if !allowed(operatorRoutes, r.Pattern, &s.Identity) {
			op.o.Admin.Refused(op.ctx(r, s), r.Pattern, r.PathValue("id"), r.PathValue("key"))
			op.forbidden(w, r, s)
			return
		}
		h(w, r, s)
	}
}

// sameOrigin refuses a request a browser marks as sent from another origin:
// by Sec-Fetch-Site where the browser sends it, else by Origin. A client
// that sends neither is not a browser a forged form could drive.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// ctx names the operator as the actor of admin calls, for the audit trail.
func (op *Operator) ctx(r *http.Request, s *session) context.Context {
	return admin.WithOrigin(admin.WithActor(r.Context(), "console:"+s.Actor), clientAddr(r))
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (op *Operator) signInPage(w http.ResponseWriter, r *http.Request) {
	if op.session(r) != nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	op.render(w, r, http.StatusOK, "signin", nil, view{Title: "Sign in", SSO: op.o.SSO != nil})
}

func (op *Operator) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if !sameOrigin(r) {
		op.render(w, r, http.StatusForbidden, "signin", nil, view{Title: "Sign in", Message: "Sign in from this console's own page."})
		return
	}
	cred := "console"
	if n, ok := op.o.Auth.(credentialNamer); ok {
		cred = n.Credential(r)
	}
	ok, wait, err := op.o.Store.SignInAttempt(r.Context(), clientAddr(r), cred, store.SignInLimits{
		Window: time.Minute, PerAddr: signInsPerAddr, PerCredential: signInsPerCredential,
	})
	if err != nil {
		// Closed: without the shared count, one sidecar cannot tell how
		// many guesses the others took.
		op.o.Logger.Error("console: sign-in limit unavailable", "client", clientAddr(r), "err", err)
		op.render(w, r, http.StatusServiceUnavailable, "signin", nil, view{Title: "Sign in", Message: "The gateway's store is unavailable; try again shortly."})
		return
	}
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		op.o.Logger.Warn("console: sign-in attempts over the limit", "client", clientAddr(r))
		op.render(w, r, http.StatusTooManyRequests, "signin", nil, view{Title: "Sign in", Message: "Too many sign-in attempts; wait a minute and try again."})
		return
	}
	id, err := op.o.Auth.Authenticate(r)
	if err != nil {
		op.o.Logger.Warn("console: sign-in refused", "client", clientAddr(r))
		op.render(w, r, http.StatusUnauthorized, "signin", nil, view{Title: "Sign in", Message: "That token is not the admin token."})
		return
	}
	if op.StartSession(w, r, id) {
		http.Redirect(w, r, "/", http.StatusSeeOther)
	}
}

// StartSession signs id in: it sets the session cookie on w. When the
// store cannot keep the session, it answers w itself (503) and reports
// false.
func (op *Operator) StartSession(w http.ResponseWriter, r *http.Request, id Identity) bool {
	return op.startSession(w, r, id, "") != nil
}

func (op *Operator) startSession(w http.ResponseWriter, r *http.Request, id Identity, idToken string) *session {
	value, ses, err := op.sessions.start(r.Context(), id, idToken)
	if err != nil {
		op.o.Logger.Error("console: starting a session failed", "err", err)
		op.render(w, r, http.StatusServiceUnavailable, "signin", nil, view{Title: "Sign in", Message: "The store is unavailable; try again shortly."})
		return nil
	}
	http.SetCookie(w, &http.Cookie{
		Name: SessionCookie, Value: value, Path: "/", HttpOnly: true, Secure: op.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(op.o.SessionLifetime.Seconds()),
	})
	op.o.Logger.Info("console: signed in", "actor", id.Actor, "roles", id.Roles, "client", clientAddr(r))
	return ses
}

// secure reports whether the session cookie must be Secure: as the
// single sign-on's state cookie is when one is configured (its https
// redirect URL says browsers reach the console over TLS, perhaps ended by
// a proxy), else when this request came over TLS.
func (op *Operator) secure(r *http.Request) bool {
	if op.o.SSO != nil {
		return op.o.SSO.secure(r)
	}
	return r.TLS != nil
}

func (op *Operator) signOut(w http.ResponseWriter, r *http.Request, s *session) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		op.sessions.end(r.Context(), c.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", HttpOnly: true, Secure: op.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	// The local session has ended; a single sign-on also ends at the
	// provider when it offers RP-initiated logout.
	if op.o.SSO != nil && s.idToken != "" {
		if u := op.o.SSO.LogoutURL(r.Context(), s.idToken, "/signin"); u != "" {
			http.Redirect(w, r, u, http.StatusSeeOther)
			return
		}
	}
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// forbidden answers a signed-in person whose roles do not allow the route.
func (op *Operator) forbidden(w http.ResponseWriter, r *http.Request, s *session) {
	op.o.Logger.Warn("console: refused by role", "path", r.URL.Path, "actor", s.Actor, "roles", s.Roles)
	op.render(w, r, http.StatusForbidden, "error", s, view{Title: "Not allowed", Message: "Your role does not allow this."})
}

func (op *Operator) ssoLogin(w http.ResponseWriter, r *http.Request) {
	if op.o.SSO == nil {
		op.render(w, r, http.StatusNotFound, "error", nil, view{Title: "Not found", Message: "Single sign-on is not configured."})
		return
	}
	if err := op.o.SSO.Begin(w, r); err != nil {
		op.o.Logger.Error("console: single sign-on unavailable", "err", err)
		op.render(w, r, http.StatusServiceUnavailable, "signin", nil, view{Title: "Sign in", SSO: true, Message: "The identity provider is unreachable; try again shortly."})
	}
}

func (op *Operator) ssoCallback(w http.ResponseWriter, r *http.Request) {
	if op.o.SSO == nil {
		op.render(w, r, http.StatusNotFound, "error", nil, view{Title: "Not found", Message: "Single sign-on is not configured."})
		return
	}
	in, err := op.o.SSO.Finish(w, r)
	if err != nil {
		op.o.Logger.Warn("console: single sign-on refused", "client", clientAddr(r), "err", err)
		op.render(w, r, http.StatusForbidden, "signin", nil, view{Title: "Sign in", SSO: true, Message: "Single sign-on was refused."})
		return
	}
	ses := op.startSession(w, r, in.Identity, in.IDToken)
	if ses == nil {
		return
	}
	// A page, not a redirect: the session cookie is SameSite=Strict, and a
	// redirect in the chain the provider started would not send it.
	op.render(w, r, http.StatusOK, "signedin", ses, view{Title: "Signed in"})
}

// failed shows an admin call's error: the service's message for what the
// operator can fix, a generic one for the rest.
func (op *Operator) failed(w http.ResponseWriter, r *http.Request, s *session, err error) {
	code, msg := http.StatusInternalServerError, "The gateway could not do that; see the sidecar's log."
	switch status.Code(err) {
	case codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists:
		code, msg = http.StatusBadRequest, status.Convert(err).Message()
	case codes.NotFound:
		code, msg = http.StatusNotFound, status.Convert(err).Message()
	}
	op.render(w, r, code, "error", s, view{Title: "Not done", Message: msg})
}

// flashCookie carries a notice to the next page, in the browser: the
// page may be served by another sidecar. A notice forged there shows only
// to whoever forged it, escaped as all text is.
const flashCookie = "gateway_flash"

// done redirects to a page with a notice for it.
func (op *Operator) done(w http.ResponseWriter, r *http.Request, _ *session, to, notice string) {
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: url.QueryEscape(notice), Path: "/", HttpOnly: true,
		Secure: op.secure(r), SameSite: http.SameSiteStrictMode, MaxAge: 60})
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// takeFlash returns the notice the last change left for this page, and
// clears it.
func (op *Operator) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil || c.Value == "" {
		return ""
	}
	http.SetCookie(w, &http.Cookie{Name: flashCookie, Value: "", Path: "/", HttpOnly: true, Secure: op.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	msg, _ := url.QueryUnescape(c.Value)
	return msg
}

// accountRow is one account on the accounts page.
type accountRow struct {
	ID, Name  string
	Suspended bool
	Balance   int64
	Today     int64
	Month     int64
	Requests  int64 // this month
}

func (op *Operator) accounts(w http.ResponseWriter, r *http.Request, s *session) {
	list, err := op.o.Admin.ListAccounts(op.ctx(r, s), &adminv1.ListAccountsRequest{})
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	rows := make([]accountRow, 0, len(list.GetAccounts()))
	for _, a := range list.GetAccounts() {
		row := accountRow{ID: a.GetId(), Name: a.GetName(), Suspended: a.GetSuspended(), Balance: a.GetBalanceNanoUsd()}
		month, err := op.o.Store.Usage(r.Context(), a.GetId(), ledger.Month)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			op.failed(w, r, s, err)
			return
		}
		row.Today, row.Month, row.Requests = month.DailyUsed, month.Totals.Cost, month.Totals.Requests
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b accountRow) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID)) })
	top := slices.Clone(rows)
	slices.SortStableFunc(top, func(a, b accountRow) int { return cmp.Compare(b.Month, a.Month) })
	top = slices.DeleteFunc(top, func(a accountRow) bool { return a.Month == 0 })
	top = top[:min(len(top), 10)]
	op.render(w, r, http.StatusOK, "accounts", s, view{Title: "Accounts", Data: struct {
		Accounts, Top []accountRow
	}{rows, top}})
}

// field is one field of a message the console does not know in advance
// (limits, say), for generic display.
type field struct{ Name, Value string }

// fields lists msg's set fields except those named in skip, in declaration
// order. Amounts (names ending in nano_usd) show in USD.
func fields(msg proto.Message, skip ...string) []field {
	if msg == nil {
		return nil
	}
	var out []field
	m := msg.ProtoReflect()
	fds := m.Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		name := string(fd.Name())
		if slices.Contains(skip, name) || !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		var s string
		switch {
		case fd.IsList():
			var parts []string
			for j := 0; j < v.List().Len(); j++ {
				parts = append(parts, fmt.Sprint(v.List().Get(j).Interface()))
			}
			s = strings.Join(parts, ", ")
		case fd.Kind() == protoreflect.MessageKind:
			var parts []string
			for _, f := range fields(v.Message().Interface()) {
				parts = append(parts, f.Name+": "+f.Value)
			}
			s = strings.Join(parts, "; ")
			if s == "" {
				continue // nothing set
			}
		case strings.HasSuffix(name, "nano_usd") && (fd.Kind() == protoreflect.Int64Kind || fd.Kind() == protoreflect.Sint64Kind):
			name = strings.TrimSuffix(name, "_nano_usd") + " (USD)"
			s = "$" + pricing.FormatUSD(v.Int())
		default:
			s = fmt.Sprint(v.Interface())
		}
		out = append(out, field{Name: strings.ReplaceAll(name, "_", " "), Value: s})
	}
	return out
}

// keyRow is one credential on the account page.
type keyRow struct {
	*adminv1.Key
	ReadOnly bool
	State    string
	Extra    []field // fields the console has no column for (per-key limits)
}

func (op *Operator) account(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	ctx := op.ctx(r, s)
	acct, err := op.o.Admin.GetAccount(ctx, &adminv1.GetAccountRequest{AccountId: id})
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	keys, err := op.o.Admin.ListKeys(ctx, &adminv1.ListKeysRequest{AccountId: id})
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	month, err := op.o.Store.Usage(r.Context(), id, ledger.Month)
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	recent, _, err := op.o.Store.RecentLedger(r.Context(), id, "", 50)
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	trail, err := op.accountAudit(r.Context(), id, 50)
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	labels := map[string]string{}
	var rows []keyRow
	for _, k := range keys.GetKeys() {
		labels[k.GetId()] = k.GetLabel()
		rows = append(rows, keyRow{
			Key: k, ReadOnly: k.GetKind() == adminv1.KeyKind_KEY_KIND_READ_ONLY,
			State: strings.ToLower(strings.TrimPrefix(k.GetState().String(), "KEY_STATE_")),
			Extra: fields(k, "id", "account_id", "kind", "label", "prefix", "create_time", "expire_time",
				"last_used_time", "revoke_time", "models", "state"),
		})
	}
	entries := make([]LedgerEntry, len(recent))
	for i, e := range recent {
		entries[i] = newLedgerEntry(e, labels[e.KeyID])
	}
	a := acct.GetAccount()
	op.render(w, r, http.StatusOK, "account", s, view{Title: "Account " + a.GetName(), Data: struct {
		Account   *adminv1.Account
		Limits    []field
		Other     []field
		DailyUsed int64
		Month     ledger.UsageReport
		OpenHolds int64
		Held      int64
		Keys      []keyRow
		Ledger    []LedgerEntry
		Audit     []audit.Entry
		TopUpKey  string
		// The limits the admin API can set, as form fields.
		AccountLimitInputs, KeyLimitInputs []limitInput
	}{
		Account: a, Limits: fields(a.GetLimits()),
		Other:     fields(acct, "account", "daily_used_nano_usd", "open_holds", "held_nano_usd"),
		DailyUsed: acct.GetDailyUsedNanoUsd(), Month: month, OpenHolds: acct.GetOpenHolds(), Held: acct.GetHeldNanoUsd(),
		Keys: rows, Ledger: entries, Audit: trail, TopUpKey: "console-" + randomToken()[:16],
		AccountLimitInputs: limitInputs(&adminv1.SetLimitsRequest{}), KeyLimitInputs: limitInputs(&adminv1.SetKeyLimitsRequest{}),
	}})
}

// accountAudit returns the newest n audit entries of one account, reading
// at most a few pages of the (global) audit trail.
func (op *Operator) accountAudit(ctx context.Context, accountID string, n int) ([]audit.Entry, error) {
	var out []audit.Entry
	before := ""
	for range 5 {
		page, next, err := op.o.Store.RecentAudit(ctx, before, 1000)
		if err != nil {
			return nil, err
		}
		for _, e := range page {
			if e.AccountID == accountID {
				out = append(out, e)
				if len(out) == n {
					return out, nil
				}
			}
		}
		if next == "" {
			break
		}
		before = next
	}
	return out, nil
}

func (op *Operator) createAccount(w http.ResponseWriter, r *http.Request, s *session) {
	req := &adminv1.CreateAccountRequest{Name: r.PostFormValue("name")}
	var err error
	if req.BalanceNanoUsd, err = parseUSD(r.PostFormValue("balance_usd"), true); err != nil {
		op.failed(w, r, s, status.Error(codes.InvalidArgument, "balance: "+err.Error()))
		return
	}
	if v := strings.TrimSpace(r.PostFormValue("daily_usd")); v != "" {
		d, err := parseUSD(v, false)
		if err != nil {
			op.failed(w, r, s, status.Error(codes.InvalidArgument, "daily limit: "+err.Error()))
			return
		}
		req.DailyNanoUsd = &d
	}
	resp, err := op.o.Admin.CreateAccount(op.ctx(r, s), req)
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	op.done(w, r, s, "/accounts/"+url.PathEscape(resp.GetAccount().GetId()), "Account created.")
}

func (op *Operator) topUp(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	amount, err := parseUSD(r.PostFormValue("amount_usd"), false)
	if err != nil {
		op.failed(w, r, s, status.Error(codes.InvalidArgument, "amount: "+err.Error()))
		return
	}
	resp, err := op.o.Admin.TopUp(op.ctx(r, s), &adminv1.TopUpRequest{
		AccountId: id, AmountNanoUsd: amount, IdempotencyKey: strings.TrimSpace(r.PostFormValue("idempotency_key")),
	})
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	notice := "Topped up $" + pricing.FormatUSD(amount) + "; the balance is $" + pricing.FormatUSD(resp.GetBalanceNanoUsd()) + "."
	if !resp.GetApplied() {
		notice = "That idempotency key was used already: nothing was added. The balance is $" + pricing.FormatUSD(resp.GetBalanceNanoUsd()) + "."
	}
	op.done(w, r, s, "/accounts/"+url.PathEscape(id), notice)
}

func (op *Operator) suspend(suspend bool) func(w http.ResponseWriter, r *http.Request, s *session) {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		id, reason := r.PathValue("id"), strings.TrimSpace(r.PostFormValue("reason"))
		var err error
		notice := "Account resumed."
		if suspend {
			_, err = op.o.Admin.SuspendAccount(op.ctx(r, s), &adminv1.SuspendAccountRequest{AccountId: id, Reason: reason})
			notice = "Account suspended: its model requests are refused."
		} else {
			_, err = op.o.Admin.ResumeAccount(op.ctx(r, s), &adminv1.ResumeAccountRequest{AccountId: id, Reason: reason})
		}
		if err != nil {
			op.failed(w, r, s, err)
			return
		}
		op.done(w, r, s, "/accounts/"+url.PathEscape(id), notice)
	}
}

func (op *Operator) setLimits(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	req := &adminv1.SetLimitsRequest{AccountId: id}
	if err := fillLimits(req, r.PostForm); err != nil {
		op.failed(w, r, s, err)
		return
	}
	if _, err := op.o.Admin.SetLimits(op.ctx(r, s), req); err != nil {
		op.failed(w, r, s, err)
		return
	}
	op.done(w, r, s, "/accounts/"+url.PathEscape(id), "Limits changed.")
}

func (op *Operator) setKeyLimits(w http.ResponseWriter, r *http.Request, s *session) {
	id, key := r.PathValue("id"), r.PathValue("key")
	req := &adminv1.SetKeyLimitsRequest{AccountId: id, KeyId: key}
	if err := fillLimits(req, r.PostForm); err != nil {
		op.failed(w, r, s, err)
		return
	}
	if _, err := op.o.Admin.SetKeyLimits(op.ctx(r, s), req); err != nil {
		op.failed(w, r, s, err)
		return
	}
	op.done(w, r, s, "/accounts/"+url.PathEscape(id), "Limits of "+key+" changed.")
}

// limitInput is one limit of a limits request (an optional integer field of
// SetLimitsRequest or SetKeyLimitsRequest) as a form field, so that the
// forms follow the admin API as it gains limits. Amounts (NAME_nano_usd)
// are entered in USD, as NAME_usd.
type limitInput struct {
	Name, Label string
}

var limitLabels = map[string]string{
	"rpm": "Requests per minute", "window_minutes": "Window (minutes)", "tpm": "Tokens per minute",
	"concurrency": "Requests at once", "concurrency_wait_seconds": "Wait for a slot (seconds)",
}

func limitInputs(msg proto.Message) []limitInput {
	var out []limitInput
	fds := msg.ProtoReflect().Descriptor().Fields()
	for i := 0; i < fds.Len(); i++ {
		fd := fds.Get(i)
		if !fd.HasPresence() || fd.Kind() != protoreflect.Int64Kind || fd.IsList() {
			continue
		}
		name := string(fd.Name())
		in := limitInput{Name: name, Label: limitLabels[name]}
		if base, ok := strings.CutSuffix(name, "_nano_usd"); ok {
			in.Name = base + "_usd"
			if in.Label == "" {
				in.Label = strings.ToUpper(base[:1]) + strings.ReplaceAll(base[1:], "_", " ") + " (USD)"
			}
		}
		if in.Label == "" {
			in.Label = strings.ReplaceAll(name, "_", " ")
		}
		out = append(out, in)
	}
	return out
}

// fillLimits sets the limits the form gives; an empty field keeps a limit.
func fillLimits(msg proto.Message, form url.Values) error {
	m := msg.ProtoReflect()
	fds := m.Descriptor().Fields()
	for _, in := range limitInputs(msg) {
		v := strings.TrimSpace(form.Get(in.Name))
		if v == "" {
			continue
		}
		field := in.Name
		var n int64
		var err error
		if base, ok := strings.CutSuffix(in.Name, "_usd"); ok {
			field = base + "_nano_usd"
			n, err = parseUSD(v, true)
		} else if n, err = strconv.ParseInt(v, 10, 64); err != nil {
			err = errors.New("not a whole number")
		}
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "%s: %v", in.Label, err)
		}
		m.Set(fds.ByName(protoreflect.Name(field)), protoreflect.ValueOfInt64(n))
	}
	return nil
}

// secretView shows a new credential's secret, once.
type secretView struct {
	AccountID, Kind, Label, KeyID, Secret string
	Rotated                               bool
}

func (op *Operator) createKey(w http.ResponseWriter, r *http.Request, s *session) {
	id, label := r.PathValue("id"), strings.TrimSpace(r.PostFormValue("label"))
	v := secretView{AccountID: id, Label: label}
	switch r.PostFormValue("kind") {
	case "model":
		resp, err := op.o.Admin.CreateKey(op.ctx(r, s), &adminv1.CreateKeyRequest{AccountId: id, Label: label})
		if err != nil {
			op.failed(w, r, s, err)
			return
		}
		v.Kind, v.KeyID, v.Secret = "API key", resp.GetKey().GetId(), resp.GetSecret()
	case "read_only":
		resp, err := op.o.Admin.CreateReadOnlyToken(op.ctx(r, s), &adminv1.CreateReadOnlyTokenRequest{AccountId: id, Label: label})
		if err != nil {
			op.failed(w, r, s, err)
			return
		}
		v.Kind, v.KeyID, v.Secret = "read-only token", resp.GetToken().GetId(), resp.GetSecret()
	default:
		op.failed(w, r, s, status.Error(codes.InvalidArgument, "kind must be model or read_only"))
		return
	}
	op.render(w, r, http.StatusOK, "secret", s, view{Title: "New " + v.Kind, Data: v})
}

func (op *Operator) rotateKey(w http.ResponseWriter, r *http.Request, s *session) {
	id, key := r.PathValue("id"), r.PathValue("key")
	req := &adminv1.RotateKeyRequest{AccountId: id, KeyId: key}
	resp, err := op.o.Admin.RotateKey(op.ctx(r, s), req)
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	v := secretView{AccountID: id, Kind: "API key", Label: resp.GetKey().GetLabel(), KeyID: resp.GetKey().GetId(), Secret: resp.GetSecret(), Rotated: true}
	op.render(w, r, http.StatusOK, "secret", s, view{Title: "Rotated API key", Data: v})
}

func (op *Operator) revokeKey(w http.ResponseWriter, r *http.Request, s *session) {
	id, key := r.PathValue("id"), r.PathValue("key")
	var err error
	if r.PostFormValue("kind") == "read_only" {
		_, err = op.o.Admin.RevokeReadOnlyToken(op.ctx(r, s), &adminv1.RevokeReadOnlyTokenRequest{AccountId: id, TokenId: key})
	} else {
		_, err = op.o.Admin.RevokeKey(op.ctx(r, s), &adminv1.RevokeKeyRequest{AccountId: id, KeyId: key})
	}
	if err != nil {
		op.failed(w, r, s, err)
		return
	}
	op.done(w, r, s, "/accounts/"+url.PathEscape(id), "Revoked "+key+".")
}

// modelRow is one model on the price list, at standard prices in USD per
// million units (per call or session for the built-in tools).
type modelRow struct {
	Upstream, Model, Source string
	Aliases                 []string
	MaxOutput               int64
	Prices                  []field
	Tiers                   []string
	LongContext             []int64
}

func (op *Operator) models(w http.ResponseWriter, r *http.Request, s *session) {
	var rows []modelRow
	for _, name := range op.o.Upstreams {
		t := op.o.Prices[name]
		if t == nil {
			continue
		}
		for _, m := range t.PriceList("* (any other model)") {
			row := modelRow{Upstream: name, Model: string(m.Name), Source: m.Source, Aliases: m.Aliases, MaxOutput: m.MaxOutput,
				Tiers: m.Tiers(), LongContext: m.Thresholds()}
			rates, _ := m.RatesFor(0, "")
			for _, k := range usage.Kinds {
				if !k.Priced() || rates.Of(k) == 0 {
					continue
				}
				n := rates.Of(k)
				if k.Unit != usage.Token {
					n /= 1_000_000 // per call, session, second or image
				}
				row.Prices = append(row.Prices, field{Name: strings.ReplaceAll(k.Name, "_", " "), Value: "$" + pricing.FormatUSD(n)})
			}
			rows = append(rows, row)
		}
	}
	op.render(w, r, http.StatusOK, "models", s, view{Title: "Models and prices", Data: rows})
}

// vendorKeyRow is one pooled vendor key on the vendor keys page.
type vendorKeyRow struct {
	Upstream string
	keypool.KeyState
}

// vendorKeys lists each pooled upstream's keys: name, state, until when,
// the vendor's status that set it, weight, pinning. Never a secret.
func (op *Operator) vendorKeys(w http.ResponseWriter, r *http.Request, s *session) {
	var rows []vendorKeyRow
	if op.o.VendorKeys != nil {
		all := op.o.VendorKeys()
		for _, u := range op.o.Upstreams {
			for _, k := range all[u] {
				rows = append(rows, vendorKeyRow{Upstream: u, KeyState: k})
			}
		}
	}
	op.render(w, r, http.StatusOK, "vendorkeys", s, view{Title: "Vendor keys", Data: rows})
}

// parseUSD reads a decimal USD amount exactly, to the nano-USD.
func parseUSD(s string, zeroOK bool) (int64, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "$")
	if s == "" && zeroOK {
		return 0, nil
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || !allDigits(whole) || !allDigits(frac) || len(frac) > 9 || len(whole) > 9 {
		return 0, fmt.Errorf("%q is not an amount in USD (up to 9 decimals)", s)
	}
	w, _ := strconv.ParseInt("0"+whole, 10, 64)
	f, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	n := w*pricing.NanoPerUSD + f
	if n == 0 && !zeroOK {
		return 0, errors.New("must be more than zero")
	}
	return n, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
