package console

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc/status"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/control"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// Paths of the customer console's single sign-on side.
const (
	PathSSOLogin    = CustomerPath + "sso/login"
	PathSSOCallback = CustomerPath + "sso/callback"
	PathSSOLogout   = CustomerPath + "sso/logout"
	PathMe          = CustomerPath + "api/me"
	PathKeysPage    = CustomerPath + "keys"
	PathKeysAPI     = CustomerPath + "api/keys"
	PathAuditAPI    = CustomerPath + "api/audit"
	PathRevokeKey   = CustomerPath + "keys/{key}/revoke"
	PathLimits      = CustomerPath + "limits"
)

// CustomerCookie names the customer console's session cookie.
const CustomerCookie = "gateway_customer"

// CSRFHeader carries a session's CSRF token on the data API's changes.
const CSRFHeader = "X-CSRF-Token"

// CustomerStore is what the customer console reads beyond the admin
// service (internal/store implements it).
type CustomerStore interface {
	RecentAudit(ctx context.Context, before string, limit int) ([]audit.Entry, string, error)
}

// CustomerOptions configure single sign-on to the customer console.
type CustomerOptions struct {
	SSO *SSO
	// Admin makes the changes (keys), with validation and the audit trail
	// of every other client of the admin API.
	Admin *admin.Service
	Store CustomerStore
	SessionOptions
	Logger *slog.Logger
	Now    func() time.Time
}

// Customer is the customer console signed in by single sign-on: a
// session per person, with the roles and account their provider's claims
// give (routes.go says what each role may do).
type Customer struct {
	o        CustomerOptions
	sessions *sessions
}

// NewCustomer returns the customer console's signed-in side.
func NewCustomer(o CustomerOptions) *Customer {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Customer{o: o, sessions: newSessions("cust", &o.SessionOptions, o.Now, o.Logger)}
}

// Mount adds the sign-on, the keys page and the session's data API to mux.
func (c *Customer) Mount(mux Mux) {
	mux.HandleFunc("GET "+PathSSOLogin, c.login)
	mux.HandleFunc("GET "+PathSSOCallback, c.callback)
	mux.HandleFunc("POST "+PathSSOLogout, c.signedIn(c.logout))
	mux.HandleFunc("GET "+PathMe, c.me)
	mux.HandleFunc("GET "+PathKeysPage, c.signedIn(c.keysPage))
	mux.HandleFunc("POST "+PathKeysPage, c.signedIn(c.createKeyForm))
	mux.HandleFunc("POST "+PathKeysAPI, c.signedIn(c.createKeyAPI))
	mux.HandleFunc("POST "+PathRevokeKey, c.signedIn(c.revokeKey))
	mux.HandleFunc("POST "+PathLimits, c.signedIn(c.setLimits))
	mux.HandleFunc("GET "+PathAuditAPI, c.signedIn(c.audit))
}

// readPaths are the reads a session makes as its account's read-only
// token would: GET /v1/usage and the data API.
var readPaths = map[string]bool{"/v1/usage": true, PathDaily: true, PathLedger: true, PathLedgerCSV: true}

// Wrap lets a signed-in session read GET /v1/usage and the data API
// through next, within its roles. A request that carries a credential
// header is next's as before.
func (c *Customer) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !readPaths[r.URL.Path] || r.Header.Get("Authorization") != "" || r.Header.Get("X-Api-Key") != "" {
			next.ServeHTTP(w, r)
			return
		}
		s := c.session(r)
		if s == nil {
			next.ServeHTTP(w, r)
			return
		}
		if !allowed(customerRoutes, r.URL.Path, &s.Identity) {
			c.forbiddenJSON(w, r, s, false)
			return
		}
		key := account.Key{ID: "console-session", AccountID: s.AccountID, Kind: account.ReadOnlyToken}
		next.ServeHTTP(w, r.WithContext(control.WithCaller(r.Context(), key)))
	})
}

func (c *Customer) session(r *http.Request) *session {
	ck, err := r.Cookie(CustomerCookie)
	if err != nil {
		return nil
	}
	return c.sessions.get(r.Context(), ck.Value)
}

func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, CustomerPath+"api/") }

// signedIn serves a route of a session: signed in, allowed by its roles
// and, for a change, from this origin with the session's CSRF token (the
// form field csrf, or the CSRFHeader).
func (c *Customer) signedIn(h func(w http.ResponseWriter, r *http.Request, s *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		s := c.session(r)
		if s == nil {
			if isAPI(r) || r.Method != http.MethodGet {
				control.WriteError(w, http.StatusUnauthorized, "authentication_error", "not signed in")
				return
			}
			http.Redirect(w, r, CustomerPath, http.StatusSeeOther)
			return
		}
		change := r.Method == http.MethodPost
		if change {
			token := r.Header.Get(CSRFHeader)
			if token == "" {
				token = r.PostFormValue("csrf")
			}
			if !sameOrigin(r) || subtle.ConstantTimeCompare([]byte(token), []byte(s.csrf)) != 1 {
				control.WriteError(w, http.StatusForbidden, "permission_error", "the security token is missing or wrong; reload the page")
				return
			}
		}
		if !allowed(customerRoutes, r.Pattern, &s.Identity) {
			c.forbiddenJSON(w, r, s, change)
			return
		}
		h(w, r, s)
	}
}

// forbiddenJSON refuses a route to a session's roles; a refused change is
// recorded in the audit trail.
func (c *Customer) forbiddenJSON(w http.ResponseWriter, r *http.Request, s *session, change bool) {
	c.o.Logger.Warn("console: refused by role", "path", r.URL.Path, "actor", s.Actor, "roles", s.Roles)
	if change {
		c.o.Admin.Refused(c.ctx(r, s), r.Pattern, s.AccountID, "")
	}
	if isAPI(r) || readPaths[r.URL.Path] {
		control.WriteError(w, http.StatusForbidden, "permission_error", "your role does not allow this")
		return
	}
	c.page(w, http.StatusForbidden, s, customerView{Title: "Not allowed", Message: "Your role does not allow this."})
}

// ctx names the person and their address as the actor of admin calls.
func (c *Customer) ctx(r *http.Request, s *session) context.Context {
	return admin.WithOrigin(admin.WithActor(r.Context(), s.Actor), clientAddr(r))
}

func (c *Customer) login(w http.ResponseWriter, r *http.Request) {
	if err := c.o.SSO.Begin(w, r); err != nil {
		c.o.Logger.Error("console: single sign-on unavailable", "err", err)
		c.page(w, http.StatusServiceUnavailable, nil, customerView{Title: "Sign in", Message: "The identity provider is unreachable; try again shortly."})
	}
}

func (c *Customer) callback(w http.ResponseWriter, r *http.Request) {
	in, err := c.o.SSO.Finish(w, r)
	if err != nil {
		c.o.Logger.Warn("console: single sign-on refused", "client", clientAddr(r), "err", err)
		c.page(w, http.StatusForbidden, nil, customerView{Title: "Sign in", Message: "Single sign-on was refused."})
		return
	}
	value, s, err := c.sessions.start(r.Context(), in.Identity, in.IDToken)
	if err != nil {
		c.o.Logger.Error("console: starting a session failed", "err", err)
		c.page(w, http.StatusServiceUnavailable, nil, customerView{Title: "Sign in", Message: "The store is unavailable; try again shortly."})
		return
	}
	// Path /: the session reads /v1/usage beside /console/.
	http.SetCookie(w, &http.Cookie{
		Name: CustomerCookie, Value: value, Path: "/", HttpOnly: true, Secure: c.o.SSO.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(c.o.SessionLifetime.Seconds()),
	})
	c.o.Logger.Info("console: customer signed in", "actor", in.Actor, "roles", in.Roles, "account", in.AccountID, "client", clientAddr(r))
	// A page, not a redirect: see Operator.ssoCallback.
	c.page(w, http.StatusOK, s, customerView{Title: "Signed in", Message: "Signed in.", Refresh: CustomerPath})
}

// Me is the record of GET /console/api/me.
type Me struct {
	SignedIn  bool     `json:"signed_in"`
	Actor     string   `json:"actor"`
	AccountID string   `json:"account_id"`
	Roles     []string `json:"roles"`
	// KeysPage says whether the roles may open the keys page (the page
	// links to it only then).
	KeysPage bool `json:"keys_page"`
	// CSRF goes in the CSRFHeader of the session's changes.
	CSRF string `json:"csrf"`
}

// me answers whether the browser is signed in, and as whom: 200 either
// way, so that the page's first look is no error.
func (c *Customer) me(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	s := c.session(r)
	if s == nil {
		control.WriteJSON(w, http.StatusOK, Me{})
		return
	}
	m := Me{SignedIn: true, Actor: s.Actor, AccountID: s.AccountID, CSRF: s.csrf,
		KeysPage: allowed(customerRoutes, "GET "+PathKeysPage, &s.Identity)}
	for _, r := range s.Roles {
		m.Roles = append(m.Roles, string(r))
	}
	control.WriteJSON(w, http.StatusOK, m)
}

func (c *Customer) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if ck, err := r.Cookie(CustomerCookie); err == nil {
		c.sessions.end(r.Context(), ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: CustomerCookie, Value: "", Path: "/", HttpOnly: true, Secure: c.o.SSO.secure(r),
		SameSite: http.SameSiteStrictMode, MaxAge: -1})
	to := c.o.SSO.LogoutURL(r.Context(), s.idToken, CustomerPath)
	if to == "" {
		to = CustomerPath
	}
	control.WriteJSON(w, http.StatusOK, map[string]string{"location": to})
}

// customerView is what the customer console's server pages get.
type customerView struct {
	Title, Message, Actor, CSRF, Refresh string
	Static                               string
	Keys                                 []customerKey
	CanCreate, CanManage                 bool
	Limits                               []limitInput
	Secret                               *secretView
}

// customerKey is one credential on the customer console's keys page.
type customerKey struct {
	ID, Label, Kind, State string
	Revocable              bool
}

func (c *Customer) page(w http.ResponseWriter, code int, s *session, v customerView) {
	v.Static = CustomerPath + "static"
	if s != nil {
		v.Actor, v.CSRF = s.Actor, s.csrf
	}
	if err := render(w, code, templates, "customer_page.html", v); err != nil {
		c.o.Logger.Error("console: template failed", "page", "customer_page", "err", err)
	}
}

func (c *Customer) keysPage(w http.ResponseWriter, r *http.Request, s *session) {
	c.showKeys(w, r, s, nil, "")
}

// showKeys renders the keys page, with a new key's secret or a notice of
// what was done.
func (c *Customer) showKeys(w http.ResponseWriter, r *http.Request, s *session, secret *secretView, notice string) {
	resp, err := c.o.Admin.ListKeys(c.ctx(r, s), &adminv1.ListKeysRequest{AccountId: s.AccountID})
	if err != nil {
		c.o.Logger.Error("console: list keys failed", "account", s.AccountID, "err", err)
		c.page(w, http.StatusServiceUnavailable, s, customerView{Title: "Keys", Message: "The keys could not be read; try again shortly."})
		return
	}
	var keys []customerKey
	for _, k := range resp.GetKeys() {
		keys = append(keys, customerKey{
			ID: k.GetId(), Label: k.GetLabel(), Kind: strings.ToLower(strings.TrimPrefix(k.GetKind().String(), "KEY_KIND_")),
			State:     strings.ToLower(strings.TrimPrefix(k.GetState().String(), "KEY_STATE_")),
			Revocable: k.GetKind() == adminv1.KeyKind_KEY_KIND_MODEL && k.GetRevokeTime() == nil && allowed(customerRoutes, "POST "+PathRevokeKey, &s.Identity),
		})
	}
	v := customerView{
		Title: "Keys", Keys: keys, Secret: secret, Message: notice,
		CanCreate: allowed(customerRoutes, "POST "+PathKeysPage, &s.Identity),
		CanManage: allowed(customerRoutes, "POST "+PathLimits, &s.Identity),
	}
	if v.CanManage {
		v.Limits = limitInputs(&adminv1.SetLimitsRequest{})
	}
	c.page(w, http.StatusOK, s, v)
}

func (c *Customer) createKey(r *http.Request, s *session, label string) (*adminv1.CreateKeyResponse, error) {
	return c.o.Admin.CreateKey(c.ctx(r, s), &adminv1.CreateKeyRequest{AccountId: s.AccountID, Label: strings.TrimSpace(label)})
}

func (c *Customer) createKeyForm(w http.ResponseWriter, r *http.Request, s *session) {
	resp, err := c.createKey(r, s, r.PostFormValue("label"))
	if err != nil {
		c.page(w, http.StatusBadRequest, s, customerView{Title: "Keys", Message: "The key was not made: " + errMessage(err)})
		return
	}
	c.showKeys(w, r, s, &secretView{AccountID: s.AccountID, Kind: "API key", Label: resp.GetKey().GetLabel(), KeyID: resp.GetKey().GetId(), Secret: resp.GetSecret()}, "")
}

// revokeKey revokes a model key of the account: owners and admins any,
// a member only one they made (the audit trail says who made each key).
func (c *Customer) revokeKey(w http.ResponseWriter, r *http.Request, s *session) {
	key := r.PathValue("key")
	if !accountAdmins.roles.Allows(s.Roles) {
		mine, err := c.madeBy(r.Context(), s, key)
		if err != nil {
			c.page(w, http.StatusServiceUnavailable, s, customerView{Title: "Keys", Message: "The store is unavailable; try again shortly."})
			return
		}
		if !mine {
			c.o.Admin.Refused(c.ctx(r, s), r.Pattern, s.AccountID, key)
			c.page(w, http.StatusForbidden, s, customerView{Title: "Not allowed", Message: "A member may revoke only the keys they made."})
			return
		}
	}
	if _, err := c.o.Admin.RevokeKey(c.ctx(r, s), &adminv1.RevokeKeyRequest{AccountId: s.AccountID, KeyId: key}); err != nil {
		c.page(w, http.StatusBadRequest, s, customerView{Title: "Keys", Message: "The key was not revoked: " + errMessage(err)})
		return
	}
	c.showKeys(w, r, s, nil, "Revoked "+key+".")
}

// madeBy reports whether the session's person made key, by the audit
// trail's key.create entry of it.
func (c *Customer) madeBy(ctx context.Context, s *session, key string) (bool, error) {
	mine := false
	err := c.eachAudit(ctx, s.AccountID, func(e audit.Entry) bool {
		if e.KeyID == key && e.Action == "key.create" && e.Outcome == "" {
			mine = e.Actor == s.Actor
			return false
		}
		return true
	})
	return mine, err
}

// The customer console reads at most auditPages pages of auditPage
// entries of the trail, newest first, for one account.
const auditPages, auditPage = 5, 1000

// eachAudit calls f with the account's entries in the trail's newest
// auditPages pages, newest first, until f returns false.
func (c *Customer) eachAudit(ctx context.Context, accountID string, f func(audit.Entry) bool) error {
	before := ""
	for range auditPages {
		page, next, err := c.o.Store.RecentAudit(ctx, before, auditPage)
		if err != nil {
			return err
		}
		for _, e := range page {
			if e.AccountID == accountID && !f(e) {
				return nil
			}
		}
		if next == "" {
			return nil
		}
		before = next
	}
	return nil
}

// setLimits changes the account's limits: an empty field keeps one, 0
// removes it, as on the operator console.
func (c *Customer) setLimits(w http.ResponseWriter, r *http.Request, s *session) {
	req := &adminv1.SetLimitsRequest{AccountId: s.AccountID}
	if err := fillLimits(req, r.PostForm); err != nil {
		c.page(w, http.StatusBadRequest, s, customerView{Title: "Keys", Message: "The limits were not changed: " + errMessage(err)})
		return
	}
	if _, err := c.o.Admin.SetLimits(c.ctx(r, s), req); err != nil {
		c.page(w, http.StatusBadRequest, s, customerView{Title: "Keys", Message: "The limits were not changed: " + errMessage(err)})
		return
	}
	c.showKeys(w, r, s, nil, "Limits changed.")
}

// NewKey is the record of POST /console/api/keys: the secret is shown
// this once.
type NewKey struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Secret string `json:"secret"`
}

func (c *Customer) createKeyAPI(w http.ResponseWriter, r *http.Request, s *session) {
	var body struct {
		Label string `json:"label"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		control.WriteError(w, http.StatusBadRequest, "invalid_request_error", "the body must be a JSON object with a label")
		return
	}
	resp, err := c.createKey(r, s, body.Label)
	if err != nil {
		control.WriteError(w, http.StatusBadRequest, "invalid_request_error", errMessage(err))
		return
	}
	control.WriteJSON(w, http.StatusCreated, NewKey{ID: resp.GetKey().GetId(), Label: resp.GetKey().GetLabel(), Secret: resp.GetSecret()})
}

// AuditRecord is one entry of GET /console/api/audit.
type AuditRecord struct {
	At      string          `json:"at"`
	Actor   string          `json:"actor"`
	Origin  string          `json:"origin"`
	Action  string          `json:"action"`
	KeyID   string          `json:"key_id,omitempty"`
	Outcome string          `json:"outcome,omitempty"`
	Before  json.RawMessage `json:"before,omitempty"`
	After   json.RawMessage `json:"after,omitempty"`
}

// maxAuditRecords bounds GET /console/api/audit's answer.
const maxAuditRecords = 200

// audit returns the newest entries of the session's account (at most a
// few pages of the trail are read).
func (c *Customer) audit(w http.ResponseWriter, r *http.Request, s *session) {
	out := []AuditRecord{}
	err := c.eachAudit(r.Context(), s.AccountID, func(e audit.Entry) bool {
		out = append(out, AuditRecord{
			At: timeString(e.At), Actor: e.Actor, Origin: e.Origin, Action: e.Action, KeyID: e.KeyID, Outcome: e.Outcome,
			Before: rawJSON(e.Before), After: rawJSON(e.After),
		})
		return len(out) < maxAuditRecords
	})
	if err != nil {
		control.WriteError(w, http.StatusServiceUnavailable, "unavailable", "the store is unavailable; retry shortly")
		return
	}
	control.WriteJSON(w, http.StatusOK, map[string]any{"entries": out})
}

func rawJSON(s string) json.RawMessage {
	if s == "" || !json.Valid([]byte(s)) {
		return nil
	}
	return json.RawMessage(s)
}

// errMessage is an admin call's message for what the person can fix.
func errMessage(err error) string {
	return status.Convert(err).Message()
}
