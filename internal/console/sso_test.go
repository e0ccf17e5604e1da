package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/control"
	"github.com/modelgateway/gateway/internal/roles"
	"github.com/modelgateway/gateway/internal/testclock"
)

// A callback is refused before anything reaches the provider unless its
// state is the one this browser's sealed cookie carries, not expired and
// not used yet.
func TestCallbackNeedsItsState(t *testing.T) {
	clk := testclock.New(time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC))
	s, err := NewSSO(SSOOptions{Issuer: "http://127.0.0.1:9", ClientID: "c", RedirectURL: "http://127.0.0.1:8082/sso/callback?x=1", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	known := s.sealed(flow{state: "known", nonce: "n", verifier: "v", started: clk.Now()})
	expired := s.sealed(flow{state: "old", nonce: "n", verifier: "v", started: clk.Now().Add(-flowTTL)})
	other, _ := NewSSO(SSOOptions{Issuer: "http://127.0.0.1:9", ClientID: "c", RedirectURL: "http://127.0.0.1:8082/sso/callback"})
	foreign := other.sealed(flow{state: "known", nonce: "n", verifier: "v", started: clk.Now()})
	forged := strings.Replace(known, ".n.", ".m.", 1)
	// In order: the provider's error spends the known state, which is then
	// refused as replayed; none of them reaches the provider.
	for _, c := range []struct {
		name, why string
		r         *http.Request
	}{
		{"no state", "not this browser's", httptest.NewRequest("GET", "/sso/callback?code=c", nil)},
		{"no cookie", "not this browser's", httptest.NewRequest("GET", "/sso/callback?code=c&state=known", nil)},
		{"another cookie", "not this browser's", withCookie(httptest.NewRequest("GET", "/sso/callback?code=c&state=known", nil), "other")},
		{"another console's seal", "not this browser's", withCookie(httptest.NewRequest("GET", "/sso/callback?code=c&state=known", nil), foreign)},
		{"a forged cookie", "not this browser's", withCookie(httptest.NewRequest("GET", "/sso/callback?code=c&state=known", nil), forged)},
		{"another state", "not this browser's", withCookie(httptest.NewRequest("GET", "/sso/callback?code=c&state=other", nil), known)},
		{"expired", "expired", withCookie(httptest.NewRequest("GET", "/sso/callback?code=c&state=old", nil), expired)},
		{"provider error", "the provider said", withCookie(httptest.NewRequest("GET", "/sso/callback?error=access_denied&state=known", nil), known)},
		{"a replayed state", "used", withCookie(httptest.NewRequest("GET", "/sso/callback?code=c&state=known", nil), known)},
	} {
		w := httptest.NewRecorder()
		if _, err := s.Finish(w, c.r); !errors.Is(err, ErrSSORefused) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want refused: %s", c.name, err, c.why)
		}
		if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Name != stateCookie || ck[0].MaxAge >= 0 || ck[0].Path != "/sso/callback" {
			t.Errorf("%s: the state cookie is not cleared: %v", c.name, ck)
		}
	}
	if _, ok := s.spent["known"]; !ok || len(s.spent) != 1 {
		t.Errorf("spent states %v, want the known one", s.spent)
	}
}

func withCookie(r *http.Request, state string) *http.Request {
	r.AddCookie(&http.Cookie{Name: stateCookie, Value: state})
	return r
}

// A session reads the data API as its account's read-only token, within
// its roles; a request with a credential header is the API's as before.
func TestSessionReadsWithinItsRoles(t *testing.T) {
	c := NewCustomer(CustomerOptions{SessionOptions: SessionOptions{Sessions: setup(t).st}})
	value, _, _ := c.sessions.start(context.Background(), Identity{Actor: "sso:bill", Roles: []roles.Role{roles.Viewer}, AccountID: "acct_1"}, "")
	var seen *account.Key
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, ok := control.Caller(w, r, refuseAll{}, c.o.Now(), readPolicy, c.o.Logger)
		if ok {
			seen = &key
		}
	})
	h := c.Wrap(next)
	get := func(path string, header bool) int {
		r := httptest.NewRequest("GET", path, nil)
		r.AddCookie(&http.Cookie{Name: CustomerCookie, Value: value})
		if header {
			r.Header.Set("Authorization", "Bearer ro_x")
		}
		w := httptest.NewRecorder()
		seen = nil
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := get(PathDaily, false); code != 200 || seen == nil || seen.AccountID != "acct_1" || seen.Kind != account.ReadOnlyToken {
		t.Errorf("a viewer's daily read: %d as %+v", code, seen)
	}
	if code := get(PathLedgerCSV, false); code != http.StatusForbidden || seen != nil {
		t.Errorf("a viewer's export: %d as %+v, want 403", code, seen)
	}
	if code := get(PathDaily, true); code != http.StatusUnauthorized || seen != nil {
		t.Errorf("a request with a credential header: %d as %+v, want the key's 401", code, seen)
	}
}

// refuseAll is a key authenticator that knows no key.
type refuseAll struct{}

func (refuseAll) Authenticate(context.Context, auth.Headers, time.Time, auth.Policy) (account.Key, error) {
	return account.Key{}, errors.New("no such key")
}

// A person's name is the actor their changes are recorded under: control
// characters dropped, cut to the audit trail's bound, prefixed by sso:.
func TestPersonNameIsTheAuditActor(t *testing.T) {
	long := strings.Repeat("é", 40) + "@example.com"
	for _, c := range []struct {
		sub   string
		email any
		want  string
	}{
		{"u1", "bill@example.com", "sso:bill@example.com"},
		{"u1", nil, "sso:u1"},
		{"u1", "bi\x00ll\n@example.com ", "sso:bill@example.com"},
		{"u1", long, admin.CleanActor("sso:" + long)},
	} {
		got := personName(c.sub, map[string]any{"email": c.email})
		if got != c.want || len(got) > 64 || !utf8.ValidString(got) {
			t.Errorf("personName(%q, %q) = %q, want %q", c.sub, c.email, got, c.want)
		}
	}
}

// Sign-ins in progress live in their browsers' sealed cookies: starting
// more of them than the spent states' bound holds nothing in the console
// and refuses nobody, and each cookie still finishes its own sign-in. The
// spent states stay bounded: full of unexpired ones, they are forgotten.
func TestSignInsInProgressHoldNothing(t *testing.T) {
	clk := testclock.New(time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC))
	s, err := NewSSO(SSOOptions{Issuer: "http://idp.test", ClientID: "c", RedirectURL: "http://console.test/sso/callback", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// Discovered already: nothing is fetched.
	s.provider = (&oidc.ProviderConfig{IssuerURL: "http://idp.test", AuthURL: "http://idp.test/auth", TokenURL: "http://idp.test/token"}).NewProvider(context.Background())
	var first, last string
	for i := range maxSpent + 1 {
		w := httptest.NewRecorder()
		if err := s.Begin(w, httptest.NewRequest("GET", "/sso/login", nil)); err != nil {
			t.Fatal(err)
		}
		c := w.Result().Cookies()[0].Value
		if i == 0 {
			first = c
		}
		last = c
	}
	if len(s.spent) != 0 {
		t.Fatalf("%d states held for sign-ins in progress", len(s.spent))
	}
	for _, c := range []string{first, last} {
		f, _ := s.unseal(c)
		r := withCookie(httptest.NewRequest("GET", "/sso/callback?error=access_denied&state="+f.state, nil), c)
		if _, err := s.Finish(httptest.NewRecorder(), r); err == nil || !strings.Contains(err.Error(), "the provider said") {
			t.Errorf("a started sign-in's callback: %v, want it to reach the provider's answer", err)
		}
	}
	if len(s.spent) != 2 {
		t.Fatalf("%d spent states after two callbacks", len(s.spent))
	}
	for i := range maxSpent - 2 {
		if !s.spend(strconv.Itoa(i), clk.Now(), clk.Now()) {
			t.Fatalf("state %d spent twice", i)
		}
	}
	if len(s.spent) != maxSpent {
		t.Fatalf("%d spent states, want %d", len(s.spent), maxSpent)
	}
	if !s.spend("one more", clk.Now(), clk.Now()) || len(s.spent) != 1 {
		t.Errorf("one over the bound: %d spent states kept, want 1", len(s.spent))
	}
}

// Behind a proxy that ends TLS (an https redirect URL), the operator's
// session cookie is Secure like the state cookie, however one signs in.
func TestOperatorCookieSecureBehindTLSProxy(t *testing.T) {
	for _, c := range []struct {
		redirect string
		want     bool
	}{{"https://console.example/sso/callback", true}, {"http://127.0.0.1:8082/sso/callback", false}} {
		s, err := NewSSO(SSOOptions{Issuer: "http://idp.test", ClientID: "c", RedirectURL: c.redirect})
		if err != nil {
			t.Fatal(err)
		}
		op := NewOperator(OperatorOptions{SSO: s, SessionOptions: SessionOptions{Sessions: setup(t).st}})
		w := httptest.NewRecorder()
		op.StartSession(w, httptest.NewRequest("POST", "/signin", nil), Identity{Actor: "admin", Roles: []roles.Role{roles.Operator}})
		if ck := w.Result().Cookies(); len(ck) != 1 || ck[0].Name != SessionCookie || ck[0].Secure != c.want {
			t.Errorf("%s: cookies %v, want Secure %v", c.redirect, ck, c.want)
		}
	}
}

// GET /console/api/me says whether the roles may open the keys page, by
// the table of access: billing may not, a viewer may.
func TestMeSaysWhetherKeysPageOpens(t *testing.T) {
	c := NewCustomer(CustomerOptions{SessionOptions: SessionOptions{Sessions: setup(t).st}})
	for _, cs := range []struct {
		role roles.Role
		want bool
	}{{roles.Billing, false}, {roles.Viewer, true}, {roles.Owner, true}} {
		value, _, _ := c.sessions.start(context.Background(), Identity{Actor: "sso:x", Roles: []roles.Role{cs.role}, AccountID: "acct_1"}, "")
		r := httptest.NewRequest("GET", PathMe, nil)
		r.AddCookie(&http.Cookie{Name: CustomerCookie, Value: value})
		w := httptest.NewRecorder()
		c.me(w, r)
		var m Me
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil || !m.SignedIn || m.KeysPage != cs.want {
			t.Errorf("%s: %s (%v), want keys_page %v", cs.role, w.Body, err, cs.want)
		}
	}
}

// While the provider cannot be discovered, sign-ins do not each ask it:
// a failure answers for discoverRetry, then discovery is tried again.
func TestDiscoveryFailureAnswersForAWhile(t *testing.T) {
	var asked atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer idp.Close()
	clk := testclock.New(time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC))
	s, err := NewSSO(SSOOptions{Issuer: idp.URL, ClientID: "c", RedirectURL: "http://console.test/sso/callback", Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := s.Begin(httptest.NewRecorder(), httptest.NewRequest("GET", "/sso/login", nil)); err == nil {
			t.Fatal("a sign-in began without a provider")
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the provider was asked %d times within %v, want once", n, discoverRetry)
	}
	clk.Set(clk.Now().Add(discoverRetry))
	s.Begin(httptest.NewRecorder(), httptest.NewRequest("GET", "/sso/login", nil))
	if n := asked.Load(); n != 2 {
		t.Fatalf("after %v the provider was asked %d times in all, want twice", discoverRetry, n)
	}
}

// A sign-in begun on one sidecar finishes on another: their state
// cookies are sealed by a key of the client secret and the console's
// redirect URL, so the other console's (the customer's beside the
// operator's) and another client's are refused.
func TestStateReadBySidecarsOfOneConsole(t *testing.T) {
	mk := func(secret, redirect string) *SSO {
		t.Helper()
		s, err := NewSSO(SSOOptions{Issuer: "http://127.0.0.1:9", ClientID: "c", ClientSecret: secret, RedirectURL: redirect})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	const op, cust = "https://gw.example/sso/callback", "https://gw.example/console/sso/callback"
	f := flow{state: "s", nonce: "n", verifier: "v", started: time.Unix(1_800_000_000, 0)}
	sealed := mk("secret", op).sealed(f)
	if got, ok := mk("secret", op).unseal(sealed); !ok || got != f {
		t.Fatalf("another sidecar of the console read %+v, %v", got, ok)
	}
	for name, s := range map[string]*SSO{"the other console": mk("secret", cust), "another secret": mk("other", op), "no secret": mk("", op)} {
		if _, ok := s.unseal(sealed); ok {
			t.Errorf("%s read the state", name)
		}
	}
}
