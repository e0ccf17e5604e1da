package browser

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/console"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/roles"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

const (
	ssoSecretEnv = "GATEWAY_TEST_SSO_SECRET"
	ssoSecret    = "sso-client-secret-for-the-browser-test"
	// probe is a second client of the provider, whose redirect goes
	// nowhere: the test takes its code from the URL and exchanges it
	// itself, for real ID tokens to tamper with.
	probeClient   = "probe"
	probeRedirect = "http://127.0.0.1:9/probe/callback"
)

// provider is the certified oidc-provider (test/clients/oidc_provider.mjs)
// run for one test.
type provider struct {
	issuer   string
	accounts string // the file of login → claims it reads at every sign-in
}

func startProvider(t *testing.T, redirects, afterLogout []string) *provider {
	t.Helper()
	root, err := launch.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "test", "clients")
	node := filepath.Join(dir, "node_modules", ".bin", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "oidc-provider")); err != nil {
		t.Fatal("no oidc-provider under test/clients: `make clients` installs it")
	}
	clients, _ := json.Marshal([]map[string]any{
		{"client_id": "gateway", "client_secret": ssoSecret, "redirect_uris": redirects, "post_logout_redirect_uris": afterLogout},
		{"client_id": probeClient, "client_secret": ssoSecret, "redirect_uris": []string{probeRedirect}},
	})
	p := &provider{accounts: filepath.Join(t.TempDir(), "accounts.json")}
	p.setAccounts(t, map[string]any{})
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "oidc_provider.mjs"))
	cmd.Env = append(os.Environ(), "OIDC_TEST_CLIENTS="+string(clients), "OIDC_TEST_ACCOUNTS="+p.accounts)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m struct{ Issuer string }
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Issuer != "" {
				ready <- m.Issuer
			}
		}
		close(ready)
	}()
	select {
	case p.issuer = <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("oidc-provider did not start in 30 s")
	}
	if p.issuer == "" {
		t.Fatal("oidc-provider exited before it was ready")
	}
	return p
}

func (p *provider) setAccounts(t *testing.T, accounts map[string]any) {
	t.Helper()
	b, _ := json.Marshal(accounts)
	if err := os.WriteFile(p.accounts, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// signInAt drives the provider's development interactions: the login form
// (any password), then consent unless the provider remembers it.
func signInAt(tb *tab, login string) {
	tb.t.Helper()
	tb.do(chromedp.WaitVisible(`input[name="login"]`), chromedp.SendKeys(`input[name="login"]`, login),
		chromedp.SendKeys(`input[name="password"]`, "any"), chromedp.Submit(`input[name="login"]`))
	// The consent page has the login page's address: wait for the login
	// form to go (a page mid-navigation answers nothing).
	var consent bool
	eventually.That(tb.t, 20*time.Second, "the provider to take the login", func() (bool, string) {
		state, err := chromedp.Run(tb.ctx, chromedp.Evaluate[string](`location.pathname.startsWith("/interaction/") ?
			(document.querySelector('input[name="login"]') ? "login" : (document.readyState === "complete" ? "consent" : "loading")) : "left"`))
		consent = state == "consent"
		return err == nil && (state == "consent" || state == "left"), fmt.Sprintf("%s %v", state, err)
	})
	if consent {
		tb.do(chromedp.Click(`button[type="submit"]`))
	}
}

// leaveFor waits until the tab's page is at prefix.
func leaveFor(tb *tab, prefix string) {
	tb.t.Helper()
	eventually.That(tb.t, 20*time.Second, "the tab to reach "+prefix, func() (bool, string) {
		loc, err := chromedp.Run(tb.ctx, chromedp.Location())
		return err == nil && strings.HasPrefix(loc, prefix), loc
	})
}

// TestSingleSignOn signs people in to both consoles through a real
// OpenID Connect provider in headless Chromium: roles from group claims,
// a billing person who exports spend but may not make keys (page and data
// API), an owner who makes one, support refused a change, sign-out at the
// gateway and the provider; then forged, expired, wrongly addressed ID
// tokens and a replayed code are refused; every change is in the audit
// trail once, with its actor and before/after.
func TestSingleSignOn(t *testing.T) {
	var idp *provider
	s := launchtest.Start(t, launch.Options{
		SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken, ssoSecretEnv + "=" + ssoSecret},
		Configure: func(c *config.Config) {
			customer := "http://" + c.Listeners.Public + console.PathSSOCallback
			operator := "http://" + c.Listeners.Console + "/sso/callback"
			idp = startProvider(t, []string{customer, operator},
				[]string{"http://" + c.Listeners.Public + console.CustomerPath, "http://" + c.Listeners.Console + "/signin"})
			c.SSO = config.SSO{
				Issuer: idp.issuer, ClientID: "gateway", ClientSecretEnv: ssoSecretEnv,
				CustomerRedirectURL: customer, OperatorRedirectURL: operator,
				Roles: map[string]roles.Role{
					"gw-owners": roles.Owner, "gw-billing": roles.Billing, "gw-members": roles.Member, "gw-ops": roles.Operator, "gw-support": roles.Support,
				},
			}
		},
	})
	a := s.NewAccount(5, account.Limits{})
	idp.setAccounts(t, map[string]any{
		"olive":  map[string]any{"email": "olive@example.com", "groups": []string{"gw-owners"}, "gateway_account": a.ID},
		"bill":   map[string]any{"email": "bill@example.com", "groups": []string{"gw-billing", "unmapped"}, "gateway_account": a.ID},
		"mia":    map[string]any{"email": "mia@example.com", "groups": []string{"gw-members"}, "gateway_account": a.ID},
		"opal":   map[string]any{"email": "opal@example.com", "groups": []string{"gw-ops"}},
		"sue":    map[string]any{"email": "sue@example.com", "groups": []string{"gw-support"}},
		"nobody": map[string]any{"email": "nobody@example.com", "groups": []string{"unmapped"}, "gateway_account": a.ID},
	})
	start := time.Now()
	// One browser; each person in a browser context of their own (their
	// own cookies, at the gateway and at the provider).
	br := newBrowser(t)
	person := func(t *testing.T) *tab { return newTab(t, br, chromedp.WithNewBrowserContext()) }

	var replay string
	t.Run("billing exports but makes no keys", func(t *testing.T) {
		tb := person(t)
		tb.do(chromedp.Navigate(s.URL+console.CustomerPath), chromedp.WaitVisible("#sso-signin"), chromedp.Click("#sso-signin"))
		signInAt(tb, "bill")
		tb.do(chromedp.WaitVisible("#dashboard"))
		if who := tb.text("#who"); who != "sso:bill@example.com (billing)" {
			t.Errorf("signed in as %q", who)
		}
		for _, u := range tb.requested() {
			if strings.Contains(u, console.PathSSOCallback) {
				replay = u
			}
		}
		csv := eval[int](tb, `fetch("/v1/usage/ledger.csv").then(r => r.status)`)
		if csv != 200 {
			t.Errorf("billing's export: %d", csv)
		}
		made := eval[int](tb, `fetch("/console/api/me").then(r => r.json()).then(m => fetch("/console/api/keys",
			{method: "POST", headers: {"X-CSRF-Token": m.csrf, "Content-Type": "application/json"}, body: '{"label":"b"}'})).then(r => r.status)`)
		if made != 403 {
			t.Errorf("billing's key creation through the data API: %d, want 403", made)
		}
		audit := eval[int](tb, `fetch("/console/api/audit").then(r => r.status)`)
		if audit != 403 {
			t.Errorf("billing reads the audit trail: %d, want 403", audit)
		}
		tb.do(chromedp.Navigate(s.URL+console.PathKeysPage), chromedp.WaitVisible("#message"))
		if msg := tb.text("#message"); msg != "Your role does not allow this." {
			t.Errorf("billing's keys page says %q", msg)
		}
		tb.do(chromedp.Navigate(s.URL+console.CustomerPath), chromedp.WaitVisible("#dashboard"),
			chromedp.Click("#signout"))
		// The provider's RP-initiated logout asks to confirm.
		leaveFor(tb, idp.issuer+"/session/end")
		tb.do(chromedp.WaitVisible(`button[autofocus], button[type="submit"]`), chromedp.Click(`button[autofocus], button[type="submit"]`))
		leaveFor(tb, s.URL+console.CustomerPath)
		tb.do(chromedp.WaitVisible("#sso-signin"))
		if me := eval[bool](tb, `fetch("/console/api/me").then(r => r.json()).then(m => m.signed_in)`); me {
			t.Error("still signed in after sign-out")
		}
		// The callback of the sign-in, replayed, is refused: its state is
		// spent.
		if replay == "" {
			t.Fatal("the tab never requested the callback")
		}
		tb.do(chromedp.Navigate(replay), chromedp.WaitVisible("#message"))
		if msg := tb.text("#message"); msg != "Single sign-on was refused." {
			t.Errorf("a replayed callback says %q", msg)
		}
		if me := eval[bool](tb, `fetch("/console/api/me").then(r => r.json()).then(m => m.signed_in)`); me {
			t.Error("a replayed callback signed in")
		}
	})

	var keyID string
	t.Run("owner makes a key", func(t *testing.T) {
		tb := person(t)
		tb.do(chromedp.Navigate(s.URL + console.PathSSOLogin))
		signInAt(tb, "olive")
		tb.do(chromedp.WaitVisible("#dashboard"), chromedp.Navigate(s.URL+console.PathKeysPage), chromedp.WaitVisible("#new-key"),
			chromedp.SendKeys("#label", "olive's key"), chromedp.Submit("#label"), chromedp.WaitVisible("#secret"))
		secret := tb.text("#secret")
		if !strings.HasPrefix(secret, "cr_") {
			t.Fatalf("secret %q", secret)
		}
		if resp, body := alphaRequest(s, secret); resp.StatusCode != 200 {
			t.Fatalf("the owner's new key: %d %s", resp.StatusCode, body)
		}
		entries := eval[[]map[string]any](tb, `fetch("/console/api/audit").then(r => r.json()).then(b => b.entries)`)
		for _, e := range entries {
			if e["action"] == "key.create" {
				keyID, _ = e["key_id"].(string)
			}
		}
		if keyID == "" {
			t.Errorf("the owner's audit trail lacks the key: %v", entries)
		}
		// The owner changes the account's limits.
		tb.do(chromedp.SendKeys("#limit-rpm", "600"), chromedp.Submit("#limit-rpm"), chromedp.WaitVisible("#message"))
		if msg := tb.text("#message"); msg != "Limits changed." {
			t.Errorf("the owner's limits change says %q", msg)
		}
		if l, err := s.Store.Account(context.Background(), a.ID); err != nil || l.Limits.RPM != 600 {
			t.Errorf("the account's limits after the owner's change: %+v, %v", l.Limits, err)
		}
	})

	t.Run("member revokes only their own key", func(t *testing.T) {
		tb := person(t)
		tb.do(chromedp.Navigate(s.URL + console.PathSSOLogin))
		signInAt(tb, "mia")
		tb.do(chromedp.WaitVisible("#dashboard"), chromedp.Navigate(s.URL+console.PathKeysPage), chromedp.WaitVisible("#new-key"),
			chromedp.SendKeys("#label", "mia's key"), chromedp.Submit("#label"), chromedp.WaitVisible("#secret"))
		if eval[bool](tb, `document.getElementById("limits") !== null`) {
			t.Error("a member is offered the account's limits")
		}
		// Someone else's key: refused, whatever the page offers.
		refused := eval[int](tb, `fetch("/console/api/me").then(r => r.json()).then(m => fetch("/console/keys/`+keyID+`/revoke",
			{method: "POST", body: new URLSearchParams({csrf: m.csrf})})).then(r => r.status)`)
		if refused != 403 {
			t.Errorf("a member revoking the owner's key: %d, want 403", refused)
		}
		tb.do(chromedp.Click(`#keys tbody tr:last-child button`), chromedp.WaitVisible("#message"))
		states := tb.rows("#keys")
		if n := len(states); n < 2 || states[n-1][1] != "mia's key" || states[n-1][3] != "revoked" || states[n-2][3] != "active" {
			t.Errorf("keys after the member's revocation: %q", states)
		}
	})

	t.Run("no role, no session", func(t *testing.T) {
		tb := person(t)
		tb.do(chromedp.Navigate(s.URL + console.PathSSOLogin))
		signInAt(tb, "nobody")
		tb.do(chromedp.WaitVisible("#message"))
		if msg := tb.text("#message"); msg != "Single sign-on was refused." {
			t.Errorf("a person with no role: %q", msg)
		}
	})

	t.Run("operator console", func(t *testing.T) {
		base := "http://" + s.Config.Listeners.Console
		tb := person(t)
		tb.do(chromedp.Navigate(base+"/signin"), chromedp.WaitVisible("#sso-signin"), chromedp.Click("#sso-signin"))
		signInAt(tb, "sue")
		tb.do(chromedp.WaitVisible("#accounts"))
		// Support reads the account and is shown no change's form; a
		// top-up posted anyway (a form made in the page, with the
		// session's CSRF token) is refused.
		tb.do(chromedp.Navigate(base+"/accounts/"+a.ID), chromedp.WaitVisible("#balance"))
		if forms := eval[[]string](tb, `Array.from(document.querySelectorAll("main form")).map(f => f.getAttribute("action"))`); len(forms) != 0 {
			t.Errorf("support is shown the forms %q", forms)
		}
		eval[bool](tb, `(() => {
			const f = document.createElement("form");
			f.method = "post";
			f.action = location.pathname + "/topup";
			for (const [name, value] of [["csrf", document.querySelector('input[name="csrf"]').value], ["amount_usd", "1"], ["idempotency_key", "support-try"]]) {
				const i = document.createElement("input");
				i.type = "hidden"; i.name = name; i.value = value;
				f.append(i);
			}
			document.body.append(f);
			f.submit();
			return true;
		})()`)
		tb.do(chromedp.WaitNotPresent("#balance"), chromedp.WaitVisible("main h2"))
		if h := tb.text("main h2"); h != "Not allowed" {
			t.Errorf("support's top-up: %q", h)
		}
		ops := person(t)
		ops.do(chromedp.Navigate(base + "/sso/login"))
		signInAt(ops, "opal")
		ops.do(chromedp.WaitVisible("#accounts"), chromedp.Navigate(base+"/accounts/"+a.ID), chromedp.WaitVisible("#topup"),
			chromedp.SendKeys("#amount_usd", "2"), chromedp.Click(`#topup button[type="submit"]`), chromedp.WaitVisible(".notice"))
		if got := ops.text(".notice"); !strings.HasPrefix(got, "Topped up $2.00") {
			t.Errorf("the operator's top-up: %q", got)
		}
	})

	t.Run("tokens refused", func(t *testing.T) { refusedTokens(t, idp, a.ID, person(t)) })

	// Every change of the run, once, with its actor and before/after; the
	// refusals too.
	entries, _, err := s.Store.Audit(context.Background(), "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	type want struct{ actor, action, outcome string }
	counts := map[want]int{}
	for _, e := range entries {
		if e.At.Before(start) {
			continue
		}
		counts[want{e.Actor, e.Action, e.Outcome}]++
		if e.Outcome == "" && e.After == "" {
			t.Errorf("audit entry %s %s has no after", e.Actor, e.Action)
		}
		if e.Origin == "" {
			t.Errorf("audit entry %s %s has no origin", e.Actor, e.Action)
		}
		for _, secret := range []string{ssoSecret, adminToken} {
			if strings.Contains(e.Detail+e.Before+e.After, secret) {
				t.Errorf("audit entry %s %s holds a secret", e.Actor, e.Action)
			}
		}
	}
	for w, n := range map[want]int{
		{"sso:bill@example.com", "POST " + console.PathKeysAPI, audit.OutcomeRefused}:      1,
		{"sso:olive@example.com", "account.limits", ""}:                                    1,
		{"sso:mia@example.com", "key.create", ""}:                                          1,
		{"sso:mia@example.com", "key.revoke", ""}:                                          1,
		{"sso:mia@example.com", "POST " + console.PathRevokeKey, audit.OutcomeRefused}:     1,
		{"sso:olive@example.com", "key.create", ""}:                                        1,
		{"console:sso:sue@example.com", "POST /accounts/{id}/topup", audit.OutcomeRefused}: 1,
		{"console:sso:opal@example.com", "account.topup", ""}:                              1,
	} {
		if counts[w] != n {
			t.Errorf("audit entries %+v: %d, want %d (all: %v)", w, counts[w], n, counts)
		}
	}
	if len(counts) != 8 {
		t.Errorf("the run's audit entries: %v, want the eight changes and refusals only", counts)
	}
}

// refusedTokens checks ID tokens the provider really issued (to the probe
// client) against the gateway's verification: accepted as they are, and
// refused expired, addressed to another client, re-signed by another key
// or with another nonce; a code is exchanged once only.
func refusedTokens(t *testing.T, idp *provider, accountID string, tb *tab) {
	ctx := context.Background()
	opts := console.SSOOptions{
		Issuer: idp.issuer, ClientID: probeClient, ClientSecret: ssoSecret, RedirectURL: probeRedirect,
		Scopes: []string{"openid", "email", "groups"}, RolesClaim: "groups", Roles: map[string]roles.Role{"gw-owners": roles.Owner},
		Side: roles.Customer, AccountClaim: "gateway_account",
	}
	probe, err := console.NewSSO(opts)
	if err != nil {
		t.Fatal(err)
	}
	// A sign-in of the probe client in a browser: its redirect goes
	// nowhere, and the code is read from the URL the tab requested.
	conf := &oauth2.Config{ClientID: probeClient, ClientSecret: ssoSecret, RedirectURL: probeRedirect,
		Endpoint: oauth2.Endpoint{AuthURL: idp.issuer + "/auth", TokenURL: idp.issuer + "/token"}, Scopes: opts.Scopes}
	verifier, nonce := oauth2.GenerateVerifier(), "nonce-of-the-probe"
	tb.do(chromedp.Navigate(conf.AuthCodeURL("probe-state", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", nonce))))
	signInAt(tb, "olive")
	var code string
	eventually.That(t, 20*time.Second, "the probe's sign-in to reach its redirect", func() (bool, string) {
		for _, u := range tb.requested() {
			if strings.HasPrefix(u, probeRedirect) {
				pu, _ := url.Parse(u)
				code = pu.Query().Get("code")
			}
		}
		return code != "", strings.Join(tb.requested(), " ")
	})
	tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("the probe's code exchange: %v", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err == nil {
		t.Error("the provider exchanged a code twice")
	}

	in, err := probe.Verify(ctx, raw, nonce)
	if err != nil {
		t.Fatalf("the provider's own ID token is refused: %v", err)
	}
	if in.AccountID != accountID || len(in.Roles) != 1 || in.Roles[0] != roles.Owner {
		t.Errorf("the ID token maps to %+v", in.Identity)
	}
	later := opts
	later.Now = func() time.Time { return time.Now().Add(24 * time.Hour) }
	expired, _ := console.NewSSO(later)
	gateway := opts
	gateway.ClientID = "gateway"
	otherAudience, _ := console.NewSSO(gateway)
	for name, check := range map[string]func() error{
		"expired":        func() error { _, err := expired.Verify(ctx, raw, nonce); return err },
		"wrong audience": func() error { _, err := otherAudience.Verify(ctx, raw, nonce); return err },
		"wrong nonce":    func() error { _, err := probe.Verify(ctx, raw, "another"); return err },
		"forged":         func() error { _, err := probe.Verify(ctx, forge(t, raw, nil), nonce); return err },
		"tampered": func() error {
			_, err := probe.Verify(ctx, forge(t, raw, map[string]any{"groups": []string{"gw-owners", "gw-ops"}}), nonce)
			return err
		},
	} {
		if err := check(); !errors.Is(err, console.ErrSSORefused) {
			t.Errorf("%s ID token: %v, want refused", name, err)
		}
	}
}

// forge returns raw's claims (changed by set) signed by a key of the
// test's own under the provider's key id (set nil), or raw's header and
// signature over changed claims.
func forge(t *testing.T, raw string, set map[string]any) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	json.Unmarshal(payload, &claims)
	if set != nil {
		for k, v := range set {
			claims[k] = v
		}
		b, _ := json.Marshal(claims)
		return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
	}
	var header struct {
		Kid string `json:"kid"`
	}
	h, _ := base64.RawURLEncoding.DecodeString(parts[0])
	json.Unmarshal(h, &header)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: header.Kid}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(claims)
	jws, err := signer.Sign(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
