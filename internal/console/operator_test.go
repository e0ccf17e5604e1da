package console

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/roles"
	"github.com/modelgateway/gateway/internal/store"
)

const adminToken = "adm_test_token"

type opFixture struct {
	*fixture
	op *Operator
	// flash is the notice cookie the last reply left, sent with the next
	// request as a browser would.
	flash *http.Cookie
}

func setupOperator(t *testing.T) *opFixture {
	f := setup(t)
	a, err := NewTokenAuthenticator(adminToken)
	if err != nil {
		t.Fatal(err)
	}
	return &opFixture{fixture: f, op: f.operator(a)}
}

// operator is an operator console of f's store, its sessions kept there.
func (f *fixture) operator(a Authenticator) *Operator {
	svc := admin.New(f.st, admin.Options{Now: f.clk.Now})
	return NewOperator(OperatorOptions{Admin: svc, Store: f.st, Auth: a, SessionOptions: SessionOptions{Sessions: f.st}, Now: f.clk.Now})
}

func (f *opFixture) do(t *testing.T, method, target, cookie string, form url.Values, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	req := httptest.NewRequest(method, target, body)
	req.RemoteAddr = "192.0.2.1:1234"
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: cookie})
	}
	if f.flash != nil {
		req.AddCookie(f.flash)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	f.op.ServeHTTP(rec, req)
	for _, c := range rec.Result().Cookies() {
		if c.Name == flashCookie {
			f.flash = c
			if c.MaxAge < 0 {
				f.flash = nil
			}
		}
	}
	return rec
}

// signIn returns the session cookie and the CSRF token of a new session.
func (f *opFixture) signIn(t *testing.T) (cookie, csrf string) {
	t.Helper()
	rec := f.do(t, "POST", "/signin", "", url.Values{"token": {adminToken}}, nil)
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("sign in: %d %s", rec.Code, rec.Body)
	}
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie {
			cookie = c.Value
		}
	}
	page := f.do(t, "GET", "/", cookie, nil, nil)
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page.Body.String())
	if m == nil {
		t.Fatalf("no CSRF token on the accounts page: %s", page.Body)
	}
	return cookie, m[1]
}

func TestOperatorSignIn(t *testing.T) {
	f := setupOperator(t)
	if rec := f.do(t, "GET", "/", "", nil, nil); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/signin" {
		t.Fatalf("signed out: %d %v", rec.Code, rec.Header())
	}
	rec := f.do(t, "POST", "/signin", "", url.Values{"token": {adminToken}}, nil)
	c := rec.Result().Cookies()
	if len(c) != 1 || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode || c[0].Secure || c[0].Path != "/" {
		t.Fatalf("cookie: %+v", c)
	}
	if strings.Contains(rec.Header().Get("Set-Cookie"), adminToken) {
		t.Fatal("the admin token is in the cookie")
	}
	// Over TLS the cookie is Secure.
	req := httptest.NewRequest("POST", "/signin", strings.NewReader("token="+adminToken))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.TLS = &tls.ConnectionState{}
	tlsRec := httptest.NewRecorder()
	f.op.ServeHTTP(tlsRec, req)
	if c := tlsRec.Result().Cookies(); len(c) != 1 || !c[0].Secure {
		t.Fatalf("cookie over TLS: %+v", c)
	}
	// The session works, then expires when idle.
	if rec := f.do(t, "GET", "/", c[0].Value, nil, nil); rec.Code != 200 {
		t.Fatalf("signed in: %d", rec.Code)
	}
	f.at(f.clk.Now().Add(DefaultSessionIdle))
	if rec := f.do(t, "GET", "/", c[0].Value, nil, nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("idle session still works: %d", rec.Code)
	}
	// A sign-in from another site is refused.
	if rec := f.do(t, "POST", "/signin", "", url.Values{"token": {adminToken}}, map[string]string{"Origin": "http://evil.example"}); rec.Code != http.StatusForbidden {
		t.Fatalf("cross-site sign-in: %d", rec.Code)
	}
}

func TestOperatorSessionLifetime(t *testing.T) {
	f := setupOperator(t)
	cookie, _ := f.signIn(t)
	start := f.clk.Now()
	for f.clk.Now().Sub(start) < DefaultSessionLifetime-DefaultSessionIdle {
		f.at(f.clk.Now().Add(DefaultSessionIdle / 2))
		if rec := f.do(t, "GET", "/", cookie, nil, nil); rec.Code != 200 {
			t.Fatalf("active session ended after %v", f.clk.Now().Sub(start))
		}
	}
	f.at(start.Add(DefaultSessionLifetime))
	if rec := f.do(t, "GET", "/", cookie, nil, nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("session outlived its lifetime: %d", rec.Code)
	}
}

// Sign-in attempts are counted in the store: failures spread over two
// consoles (two sidecars) on one store reach the limit at the same total as
// on one, from one address and, across addresses, against the admin token.
func TestOperatorSignInRateLimited(t *testing.T) {
	f := setupOperator(t)
	a, _ := NewTokenAuthenticator(adminToken)
	other := NewOperator(OperatorOptions{Admin: admin.New(f.st, admin.Options{Now: f.clk.Now}), Store: f.st, Auth: a, SessionOptions: SessionOptions{Sessions: f.st}, Now: f.clk.Now})
	sidecars := []*Operator{f.op, other}
	signIn := func(i int, token, addr string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.RemoteAddr = addr + ":1234"
		rec := httptest.NewRecorder()
		sidecars[i%2].ServeHTTP(rec, req)
		return rec
	}
	for i := range signInsPerAddr {
		if rec := signIn(i, "wrong", "192.0.2.1"); rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i, rec.Code)
		}
		f.at(f.clk.Now().Add(time.Second))
	}
	// Even the right token waits once the attempts are spent, on either
	// sidecar, until the first attempt is a minute old.
	for i := range 2 {
		rec := signIn(i, adminToken, "192.0.2.1")
		if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "56" || len(rec.Result().Cookies()) != 0 {
			t.Fatalf("over the limit on sidecar %d: %d %v", i, rec.Code, rec.Header())
		}
	}
	f.at(f.clk.Now().Add(time.Minute))
	if rec := signIn(1, adminToken, "192.0.2.1"); rec.Code != http.StatusSeeOther {
		t.Fatalf("after a minute: %d", rec.Code)
	}
	// From many addresses: the admin token takes signInsPerCredential
	// attempts a minute in all.
	f.at(f.clk.Now().Add(time.Minute))
	for i := range signInsPerCredential {
		if rec := signIn(i, "wrong", fmt.Sprintf("198.51.100.%d", i)); rec.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d from its own address: %d", i, rec.Code)
		}
	}
	if rec := signIn(0, "wrong", "203.0.113.9"); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "61" {
		t.Fatalf("over the credential's limit: %d %v", rec.Code, rec.Header())
	}
	// Redis holds neither the token nor its plain hash.
	for _, k := range f.mr.Keys() {
		if strings.Contains(k, adminToken) || strings.Contains(k, fmt.Sprintf("%x", sha256.Sum256([]byte(adminToken)))[:32]) {
			t.Fatalf("key %s names the admin token", k)
		}
	}
	// Without the store, sign-in is refused rather than unlimited.
	f.mr.Close()
	if rec := signIn(0, adminToken, "192.0.2.7"); rec.Code != http.StatusServiceUnavailable || len(rec.Result().Cookies()) != 0 {
		t.Fatalf("store down: %d", rec.Code)
	}
}

func TestOperatorActionsNeedCSRF(t *testing.T) {
	f := setupOperator(t)
	cookie, csrf := f.signIn(t)
	name := `<img src=x onerror=alert(1)>`
	for _, tc := range []struct {
		form url.Values
		hdr  map[string]string
	}{
		{url.Values{"name": {name}}, nil},
		{url.Values{"name": {name}, "csrf": {"wrong"}}, nil},
		{url.Values{"name": {name}, "csrf": {csrf}}, map[string]string{"Origin": "http://evil.example"}},
		{url.Values{"name": {name}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{url.Values{"name": {name}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://example.com"}},
		{url.Values{"name": {name}, "csrf": {csrf}}, map[string]string{"Origin": "null"}},
	} {
		if rec := f.do(t, "POST", "/accounts", cookie, tc.form, tc.hdr); rec.Code != http.StatusForbidden {
			t.Fatalf("%v %v: %d", tc.form, tc.hdr, rec.Code)
		}
	}
	before, _ := f.st.ListAccounts(context.Background())
	if len(before) != 2 {
		t.Fatalf("a refused action created an account: %d", len(before))
	}
	rec := f.do(t, "POST", "/accounts", cookie, url.Values{"name": {name}, "csrf": {csrf}, "balance_usd": {"2.5"}},
		map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"})
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	loc := rec.Header().Get("Location")
	page := f.do(t, "GET", loc, cookie, nil, nil).Body.String()
	if strings.Contains(page, name) || !strings.Contains(page, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Fatalf("the name is not escaped")
	}
	if !strings.Contains(page, "$2.50") || !strings.Contains(page, "Account created.") {
		t.Fatalf("account page: %s", page)
	}
	audit, _, _ := f.st.RecentAudit(context.Background(), "", 10)
	if len(audit) == 0 || audit[0].Action != "account.create" || audit[0].Actor != "console:admin" {
		t.Fatalf("audit: %+v", audit)
	}
}

func TestOperatorAccountActions(t *testing.T) {
	f := setupOperator(t)
	cookie, csrf := f.signIn(t)
	base := "/accounts/" + f.acct
	post := func(path string, form url.Values) *httptest.ResponseRecorder {
		t.Helper()
		form.Set("csrf", csrf)
		return f.do(t, "POST", base+path, cookie, form, nil)
	}
	if rec := post("/topup", url.Values{"amount_usd": {"1.25"}, "idempotency_key": {"t1"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("top up: %d %s", rec.Code, rec.Body)
	}
	post("/topup", url.Values{"amount_usd": {"1.25"}, "idempotency_key": {"t1"}}) // same key: once
	if b, _ := f.st.Balance(context.Background(), f.acct); b != 6_250_000_000 {
		t.Fatalf("balance %d", b)
	}
	if rec := post("/topup", url.Values{"amount_usd": {"1.2.5"}, "idempotency_key": {"t2"}}); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad amount: %d", rec.Code)
	}
	rec := post("/keys", url.Values{"kind": {"model"}, "label": {"ci"}})
	m := regexp.MustCompile(`id="secret">(cr_[A-Za-z0-9_-]+)<`).FindStringSubmatch(rec.Body.String())
	if rec.Code != 200 || m == nil {
		t.Fatalf("create key: %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatal("the secret page may be cached")
	}
	k, err := f.st.LookupKey(context.Background(), store.HashSecret(m[1]))
	if err != nil || k.Label != "ci" {
		t.Fatalf("new key: %+v %v", k, err)
	}
	if rec := post("/keys/"+k.ID+"/rotate", url.Values{}); rec.Code != 200 || !strings.Contains(rec.Body.String(), "cr_") {
		t.Fatalf("rotate: %d", rec.Code)
	}
	if rec := post("/keys/"+k.ID+"/revoke", url.Values{"kind": {"model"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d %s", rec.Code, rec.Body)
	}
	if rec := post("/suspend", url.Values{"reason": {"unpaid"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("suspend: %d", rec.Code)
	}
	if a, _ := f.st.Account(context.Background(), f.acct); !a.Suspended {
		t.Fatal("not suspended")
	}
	page := f.do(t, "GET", base, cookie, nil, nil).Body.String()
	for _, action := range []string{"account.topup", "key.create", "key.rotate", "key.revoke", "account.suspend"} {
		if !strings.Contains(page, ">"+action+"<") {
			t.Errorf("the account's audit trail lacks %s", action)
		}
	}
	// The limit forms follow the admin API: every limit it can set, USD
	// amounts in USD; an empty field keeps a limit.
	if rec := post("/limits", url.Values{"tpm": {"1000"}, "monthly_usd": {"5.5"}, "rpm": {""}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("limits: %d %s", rec.Code, rec.Body)
	}
	if a, _ := f.st.Account(context.Background(), f.acct); a.Limits.TPM != 1000 || a.Limits.MonthlyNanoUSD != 5_500_000_000 || a.Limits.RPM != 0 {
		t.Fatalf("limits: %+v", a.Limits)
	}
	if rec := post("/limits", url.Values{"tpm": {"many"}}); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad limit: %d", rec.Code)
	}
	if rec := post("/keys/"+f.keyID+"/limits", url.Values{"total_usd": {"2"}, "concurrency": {"3"}}); rec.Code != http.StatusSeeOther {
		t.Fatalf("key limits: %d %s", rec.Code, rec.Body)
	}
	if k, _ := f.st.Key(context.Background(), f.acct, f.keyID); k.Limits.TotalNanoUSD != 2_000_000_000 || k.Limits.Concurrency != 3 {
		t.Fatalf("key limits: %+v", k.Limits)
	}
	if page := f.do(t, "GET", base, cookie, nil, nil).Body.String(); !strings.Contains(page, `name="total_usd"`) || !strings.Contains(page, `name="monthly_usd"`) {
		t.Fatal("the account page lacks limit fields")
	}
	if rec := post("/resume", url.Values{}); rec.Code != http.StatusSeeOther {
		t.Fatalf("resume: %d", rec.Code)
	}
	if rec := f.do(t, "GET", "/accounts/nope", cookie, nil, nil); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown account: %d", rec.Code)
	}
}

func TestParseUSD(t *testing.T) {
	for in, want := range map[string]int64{"1": 1e9, "1.5": 1_500_000_000, "$0.000000001": 1, ".25": 250_000_000} {
		if got, err := parseUSD(in, false); err != nil || got != want {
			t.Errorf("parseUSD(%q) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "0", "-1", "1e3", "1.0000000001", "1,5", "9999999999"} {
		if _, err := parseUSD(in, false); err == nil {
			t.Errorf("parseUSD(%q) accepted", in)
		}
	}
}

// Per-call prices (built-in tools) are shown per call, token prices per
// million tokens.
func TestOperatorModelPrices(t *testing.T) {
	f := setupOperator(t)
	cat, err := pricing.ParseCatalogue([]byte(`{
		"m": {"litellm_provider": "openai", "mode": "chat", "input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6,
		      "search_context_cost_per_query": {"search_context_size_medium": 0.01}},
		"openai/container": {"litellm_provider": "openai", "mode": "chat", "code_interpreter_cost_per_session": 0.03}
	}`), []string{"openai"}, []string{"chat"})
	if err != nil {
		t.Fatal(err)
	}
	table, err := pricing.NewTable(cat, config.Models{Providers: []string{"openai"}})
	if err != nil {
		t.Fatal(err)
	}
	f.op.o.Prices, f.op.o.Upstreams = pricing.Book{"beta": table}, []string{"beta"}
	cookie, _ := f.signIn(t)
	page := f.do(t, "GET", "/models", cookie, nil, nil).Body.String()
	for _, want := range []string{"input: $1.00", "output: $2.00", "web searches: $0.01", "code interpreter sessions: $0.03"} {
		if !strings.Contains(page, want) {
			t.Errorf("models page lacks %q:\n%s", want, page)
		}
	}
}

// A support person's pages show no change's form (the routes refuse the
// change besides); an operator's show every one. Both read the same data.
func TestOperatorSupportSeesNoChangeForms(t *testing.T) {
	f := setupOperator(t)
	forms := regexp.MustCompile(`<form method="post" action="([^"]+)"`)
	actions := func(r ...roles.Role) (map[string]bool, string) {
		value, _, _ := f.op.sessions.start(context.Background(), Identity{Actor: "sso:someone", Roles: r}, "")
		got := map[string]bool{}
		var pages strings.Builder
		for _, p := range []string{"/", "/accounts/" + f.acct} {
			rec := f.do(t, "GET", p, value, nil, nil)
			if rec.Code != http.StatusOK {
				t.Fatalf("%v: GET %s: %d", r, p, rec.Code)
			}
			pages.WriteString(rec.Body.String())
			for _, m := range forms.FindAllStringSubmatch(rec.Body.String(), -1) {
				got[m[1]] = true
			}
		}
		return got, pages.String()
	}
	base := "/accounts/" + f.acct
	change := []string{"/accounts", base + "/topup", base + "/suspend", base + "/limits", base + "/keys",
		base + "/keys/" + f.keyID + "/rotate", base + "/keys/" + f.keyID + "/limits", base + "/keys/" + f.keyID + "/revoke"}
	op, _ := actions(roles.Operator)
	for _, a := range change {
		if !op[a] {
			t.Errorf("an operator's pages lack the form of %s", a)
		}
	}
	sup, page := actions(roles.Support)
	for a := range sup {
		if a != "/signout" {
			t.Errorf("a support person's page shows the form of %s", a)
		}
	}
	if !sup["/signout"] || !strings.Contains(page, f.keyID) || !strings.Contains(page, `id="limits"`) {
		t.Errorf("a support person's pages lack what they read (sign-out, keys, limits):\n%s", page)
	}
}

// Every route a template asks Can about is in the table: a misspelt one
// would hide its form from everyone.
func TestOperatorTemplatesAskKnownRoutes(t *testing.T) {
	asked := regexp.MustCompile(`Can "([^"]+)"`)
	n := 0
	for _, p := range []string{"accounts", "account"} {
		src, err := operatorFiles.ReadFile("templates/operator/" + p + ".html")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range asked.FindAllStringSubmatch(string(src), -1) {
			n++
			if _, ok := operatorRoutes[m[1]]; !ok {
				t.Errorf("%s.html asks Can %q, which is no route", p, m[1])
			}
		}
	}
	if n == 0 {
		t.Fatal("no template asks Can")
	}
}

// Two sidecars' operator consoles over one store: a session started on
// one is signed in on the other, with the same CSRF token, and a change's
// notice follows the browser; signing out on one ends it on both, and a
// session unused for its idle time, or older than its lifetime, is gone
// from both. The store holds neither the cookie's value nor the CSRF
// token nor the ID token.
func TestSessionsSharedBySidecars(t *testing.T) {
	a, err := NewTokenAuthenticator(adminToken)
	if err != nil {
		t.Fatal(err)
	}
	one := setupOperator(t)
	other := &opFixture{fixture: one.fixture, op: one.fixture.operator(a)}
	cookie, csrf := one.signIn(t)
	if rec := other.do(t, "GET", "/", cookie, nil, nil); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), csrf) {
		t.Fatalf("the other sidecar: %d, or another CSRF token", rec.Code)
	}
	rec := other.do(t, "POST", "/accounts", cookie, url.Values{"name": {"c"}, "csrf": {csrf}, "balance_usd": {"1"}},
		map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"})
	if rec.Code != http.StatusSeeOther {
		t.Fatalf("a change on the other sidecar with the first's CSRF token: %d %s", rec.Code, rec.Body)
	}
	one.flash = other.flash // one browser
	if page := one.do(t, "GET", rec.Header().Get("Location"), cookie, nil, nil).Body.String(); !strings.Contains(page, "Account created.") {
		t.Fatal("the notice of a change on one sidecar is not on the next page from the other")
	}

	// What the store holds: hashes and sealed values only.
	ctx := context.Background()
	value, _, err := one.op.sessions.start(ctx, Identity{Actor: "sso:ann", Roles: []roles.Role{roles.Support}}, "eyJ.id-token.sig")
	if err != nil {
		t.Fatal(err)
	}
	if s := other.op.sessions.get(ctx, value); s == nil || s.idToken != "eyJ.id-token.sig" || s.Actor != "sso:ann" || !slices.Equal(s.Roles, []roles.Role{roles.Support}) {
		t.Fatalf("the other sidecar read %+v", s)
	}
	dump := one.mr.Dump()
	for _, secret := range []string{cookie, csrf, value, csrfOf(value), "id-token"} {
		if strings.Contains(dump, secret) {
			t.Errorf("the store holds %q", secret)
		}
	}

	if rec := one.do(t, "POST", "/signout", cookie, url.Values{"csrf": {csrf}}, map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}); rec.Code != http.StatusSeeOther {
		t.Fatalf("sign out: %d", rec.Code)
	}
	if rec := other.do(t, "GET", "/", cookie, nil, nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("signed out on one sidecar, the other answers %d", rec.Code)
	}

	// Idle: the store's TTL; the lifetime: its created time.
	idle, _ := one.signIn(t)
	one.mr.FastForward(DefaultSessionIdle)
	if rec := other.do(t, "GET", "/", idle, nil, nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("a session idle for its idle time: %d", rec.Code)
	}
	old, _ := one.signIn(t)
	for elapsed := time.Duration(0); elapsed < DefaultSessionLifetime; elapsed += DefaultSessionIdle / 2 {
		if rec := other.do(t, "GET", "/", old, nil, nil); rec.Code != http.StatusOK {
			t.Fatalf("a session in use %v after sign-in: %d", elapsed, rec.Code)
		}
		one.clk.Advance(DefaultSessionIdle / 2)
		one.mr.FastForward(DefaultSessionIdle / 2)
	}
	if rec := one.do(t, "GET", "/", old, nil, nil); rec.Code != http.StatusSeeOther {
		t.Fatalf("a session in use past its lifetime: %d", rec.Code)
	}
}
