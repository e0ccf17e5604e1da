package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/roles"
)

// SSOOptions configure single sign-on to one console over OpenID Connect:
// the authorization code flow with PKCE, a nonce and a state, the ID token
// verified by the provider's keys (internal/config.SSO documents the
// fields).
type SSOOptions struct {
	Issuer       string
	ClientID     string
	ClientSecret string
	RedirectURL  string
	Scopes       []string
	// RolesClaim names the ID token's claim of groups; Roles maps each
	// group to a role. Only the roles of Side are kept.
	RolesClaim string
	Roles      map[string]roles.Role
	Side       []roles.Role
	// AccountClaim, for the customer console, names the claim holding the
	// person's account id; a person without one is refused.
	AccountClaim string
	// HTTPClient reaches the provider; default http.DefaultClient.
	HTTPClient *http.Client
	Now        func() time.Time
}

// flowTTL bounds how long a sign-in may take at the provider.
const flowTTL = 10 * time.Minute

// maxSpent bounds the spent states remembered. Full of unexpired ones, they
// are all forgotten: a replayed callback is then refused by the provider,
// whose codes are single-use, rather than by the console.
const maxSpent = 10_000

// stateCookie binds a sign-in's state to the browser that started it, so
// that a callback made in another browser (login CSRF) is refused. Lax: it
// must come back on the provider's cross-site redirect.
const stateCookie = "gateway_sso_state"

// SSO is one console's OpenID Connect client. The provider is discovered on
// first use, so that a console starts while its provider is unreachable.
type SSO struct {
	o SSOOptions

	// seal keys the state cookies (sealKey): a sign-in in progress lives
	// in its browser's cookie, not here, so that starting sign-ins without
	// end fills no memory and blocks nobody's.
	seal []byte

	discovering sync.Mutex // held while one request discovers the provider

	mu         sync.Mutex
	provider   *oidc.Provider
	endSession string
	// failed and failure are the last failed discovery's time and error.
	failed  time.Time
	failure error
	spent   map[string]time.Time // states whose callback came, by when they started
}

// flow is a sign-in in progress at the provider, as its state cookie
// carries it.
type flow struct {
	state, nonce, verifier string
	started                time.Time
}

// sealed is f as a state cookie's value: its fields (base64url, so
// without dots) and their HMAC, dot-separated.
func (s *SSO) sealed(f flow) string {
	v := f.state + "." + f.nonce + "." + f.verifier + "." + strconv.FormatInt(f.started.Unix(), 10)
	return v + "." + s.mac(v)
}

func (s *SSO) mac(v string) string {
	m := hmac.New(sha256.New, s.seal)
	m.Write([]byte(v))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// unseal reads a state cookie's value; false unless this console sealed it.
func (s *SSO) unseal(v string) (flow, bool) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || !hmac.Equal([]byte(v[i+1:]), []byte(s.mac(v[:i]))) {
		return flow{}, false
	}
	p := strings.Split(v[:i], ".")
	if len(p) != 4 {
		return flow{}, false
	}
	secs, err := strconv.ParseInt(p[3], 10, 64)
	if err != nil {
		return flow{}, false
	}
	return flow{state: p[0], nonce: p[1], verifier: p[2], started: time.Unix(secs, 0)}, true
}

// spend marks state's callback come; false when it had come already.
func (s *SSO) spend(state string, started, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.spent[state]; ok {
		return false
	}
	if len(s.spent) >= maxSpent {
		for k, at := range s.spent {
			if now.Sub(at) >= flowTTL {
				delete(s.spent, k)
			}
		}
		if len(s.spent) >= maxSpent {
			clear(s.spent)
		}
	}
	s.spent[state] = started
	return true
}

// sealKey keys the state cookies: derived from the client secret, which
// every sidecar of the console has, so that a callback served by another
// sidecar than the one that began the sign-in is read, and from the
// console's redirect URL, so that one console's state is no other's;
// random for a client without a secret (one sidecar only).
func sealKey(clientSecret, redirect string) []byte {
	if clientSecret == "" {
		k := make([]byte, 32)
		rand.Read(k)
		return k
	}
	m := hmac.New(sha256.New, []byte(clientSecret))
	m.Write([]byte("gateway console sign-in state\x00" + redirect))
	return m.Sum(nil)
}

// NewSSO returns a client for o; nothing is fetched yet.
func NewSSO(o SSOOptions) (*SSO, error) {
	if o.Issuer == "" || o.ClientID == "" || o.RedirectURL == "" {
		return nil, errors.New("console: sso needs an issuer, a client id and a redirect URL")
	}
	if o.HTTPClient == nil {
		o.HTTPClient = http.DefaultClient
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if !slices.Contains(o.Scopes, oidc.ScopeOpenID) {
		o.Scopes = append([]string{oidc.ScopeOpenID}, o.Scopes...)
	}
	return &SSO{o: o, seal: sealKey(o.ClientSecret, o.RedirectURL), spent: map[string]time.Time{}}, nil
}

func (s *SSO) ctx(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, s.o.HTTPClient)
}

// discover returns the provider, reading its discovery document once.
func (s *SSO) discover(ctx context.Context) (*oidc.Provider, error) {
	if p, err := s.discovered(); p != nil || err != nil {
		return p, err
	}
	// One discovery at a time: sign-ins arriving together wait for it
	// rather than each asking the provider.
	s.discovering.Lock()
	defer s.discovering.Unlock()
	if p, err := s.discovered(); p != nil || err != nil {
		return p, err
	}
	p, err := oidc.NewProvider(s.ctx(ctx), s.o.Issuer)
	var meta struct {
		EndSession string `json:"end_session_endpoint"`
	}
	if err == nil {
		err = p.Claims(&meta)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.failed, s.failure = s.o.Now(), fmt.Errorf("sso: discovery: %w", err)
		return nil, s.failure
	}
	s.provider, s.endSession = p, meta.EndSession
	return p, nil
}

// discoverRetry is how long a failed discovery answers for itself: while
// the provider is down, sign-ins do not each ask it again.
const discoverRetry = 5 * time.Second

// discovered is the provider once discovered, or the last failure while
// it is recent; neither: discover now.
func (s *SSO) discovered() (*oidc.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.provider == nil && s.failure != nil && s.o.Now().Sub(s.failed) < discoverRetry {
		return nil, s.failure
	}
	return s.provider, nil
}

func (s *SSO) config(p *oidc.Provider) *oauth2.Config {
	return &oauth2.Config{
		ClientID: s.o.ClientID, ClientSecret: s.o.ClientSecret, RedirectURL: s.o.RedirectURL,
		Endpoint: p.Endpoint(), Scopes: s.o.Scopes,
	}
}

// Begin starts a sign-in: its state, nonce and PKCE verifier go to the
// browser in the sealed state cookie, and the browser to the provider.
func (s *SSO) Begin(w http.ResponseWriter, r *http.Request) error {
	p, err := s.discover(r.Context())
	if err != nil {
		return err
	}
	f := flow{state: randomToken(), nonce: randomToken(), verifier: oauth2.GenerateVerifier(), started: s.o.Now()}
	http.SetCookie(w, &http.Cookie{
		Name: stateCookie, Value: s.sealed(f), Path: cookiePath(s.o.RedirectURL), HttpOnly: true, Secure: s.secure(r),
		SameSite: http.SameSiteLaxMode, MaxAge: int(flowTTL.Seconds()),
	})
	http.Redirect(w, r, s.config(p).AuthCodeURL(f.state, oidc.Nonce(f.nonce), oauth2.S256ChallengeOption(f.verifier)), http.StatusFound)
	return nil
}

// secure reports whether the console's cookies must be Secure: served
// over TLS here, or behind a proxy that terminates it (an https redirect
// URL says browsers reach the console that way).
func (s *SSO) secure(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(s.o.RedirectURL, "https://")
}

// cookiePath is the path of the redirect URL: the state cookie goes to the
// callback only.
func cookiePath(redirect string) string {
	u, err := url.Parse(redirect)
	if err != nil || u.Path == "" {
		return "/"
	}
	return u.Path
}

// ErrSSORefused is wrapped by every refusal of a callback: a state that is
// unknown, used or from another browser, a provider error, a code the
// provider will not exchange, an ID token that fails verification, or a
// person with no role on this console.
var ErrSSORefused = errors.New("sso: sign-in refused")

// SignedIn is what a verified ID token says of the person.
type SignedIn struct {
	Identity
	// IDToken is the raw token, kept in the session as the hint of an
	// RP-initiated logout; never logged.
	IDToken string
}

// Finish completes a sign-in at the callback: the state must be one this
// browser started and not used yet, the code is exchanged with its PKCE
// verifier and the ID token verified.
func (s *SSO) Finish(w http.ResponseWriter, r *http.Request) (SignedIn, error) {
	q := r.URL.Query()
	http.SetCookie(w, &http.Cookie{Name: stateCookie, Value: "", Path: cookiePath(s.o.RedirectURL), HttpOnly: true,
		Secure: s.secure(r), SameSite: http.SameSiteLaxMode, MaxAge: -1})
	state := q.Get("state")
	c, err := r.Cookie(stateCookie)
	var f flow
	ok := err == nil
	if ok {
		f, ok = s.unseal(c.Value)
	}
	if state == "" || !ok || f.state != state {
		return SignedIn{}, fmt.Errorf("%w: the state is missing or not this browser's", ErrSSORefused)
	}
	now := s.o.Now()
	if now.Sub(f.started) >= flowTTL {
		return SignedIn{}, fmt.Errorf("%w: the state is expired", ErrSSORefused)
	}
	if !s.spend(state, f.started, now) {
		return SignedIn{}, fmt.Errorf("%w: the state is used", ErrSSORefused)
	}
	if e := q.Get("error"); e != "" {
		return SignedIn{}, fmt.Errorf("%w: the provider said %q", ErrSSORefused, e)
	}
	p, err := s.discover(r.Context())
	if err != nil {
		return SignedIn{}, err
	}
	tok, err := s.config(p).Exchange(s.ctx(r.Context()), q.Get("code"), oauth2.VerifierOption(f.verifier))
	if err != nil {
		return SignedIn{}, fmt.Errorf("%w: code exchange: %v", ErrSSORefused, err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return SignedIn{}, fmt.Errorf("%w: the provider sent no ID token", ErrSSORefused)
	}
	return s.Verify(r.Context(), raw, f.nonce)
}

// Verify checks an ID token by the provider's keys (signature, issuer,
// audience, expiry) and its nonce, and maps its claims to an identity with
// at least one role of this console.
func (s *SSO) Verify(ctx context.Context, raw, nonce string) (SignedIn, error) {
	p, err := s.discover(ctx)
	if err != nil {
		return SignedIn{}, err
	}
	tok, err := p.Verifier(&oidc.Config{ClientID: s.o.ClientID, Now: s.o.Now}).Verify(s.ctx(ctx), raw)
	if err != nil {
		return SignedIn{}, fmt.Errorf("%w: %v", ErrSSORefused, err)
	}
	if nonce == "" || tok.Nonce != nonce {
		return SignedIn{}, fmt.Errorf("%w: the nonce is not this sign-in's", ErrSSORefused)
	}
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return SignedIn{}, fmt.Errorf("%w: claims: %v", ErrSSORefused, err)
	}
	id := Identity{Actor: personName(tok.Subject, claims)}
	for _, g := range stringsClaim(claims[s.o.RolesClaim]) {
		if r, ok := s.o.Roles[g]; ok {
			id.Roles = append(id.Roles, r)
		}
	}
	id.Roles = roles.Of(id.Roles, s.o.Side)
	if len(id.Roles) == 0 {
		return SignedIn{}, fmt.Errorf("%w: %s has no role on this console", ErrSSORefused, id.Actor)
	}
	if s.o.AccountClaim != "" {
		id.AccountID, _ = claims[s.o.AccountClaim].(string)
		if id.AccountID == "" {
			return SignedIn{}, fmt.Errorf("%w: %s has no %s claim", ErrSSORefused, id.Actor, s.o.AccountClaim)
		}
	}
	return SignedIn{Identity: id, IDToken: raw}, nil
}

// personName names a signed-in person in the audit trail: their email
// when the provider gives one, else the subject, prefixed by sso: so that
// no name can pass for the admin token's actor. It is cleaned as the audit
// trail cleans an actor, so that the session's name is the one its changes
// are recorded under (Customer.madeBy compares them).
func personName(sub string, claims map[string]any) string {
	name := sub
	if e, ok := claims["email"].(string); ok && e != "" {
		name = e
	}
	return admin.CleanActor("sso:" + name)
}

// stringsClaim reads a claim that is a string or a list of strings.
func stringsClaim(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, e := range v {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// LogoutURL is where to send the browser after the local session has
// ended: the provider's end_session_endpoint (RP-initiated logout) with
// the ID token as hint, and back to path on the console's own origin (that
// of the configured redirect URL, which is how browsers reach it), when the
// provider offers one; "" otherwise.
func (s *SSO) LogoutURL(ctx context.Context, idToken, path string) string {
	if _, err := s.discover(ctx); err != nil {
		return ""
	}
	s.mu.Lock()
	end := s.endSession
	s.mu.Unlock()
	if end == "" || idToken == "" {
		return ""
	}
	sep := "?"
	if strings.Contains(end, "?") {
		sep = "&"
	}
	v := url.Values{"id_token_hint": {idToken}, "client_id": {s.o.ClientID}}
	if u, err := url.Parse(s.o.RedirectURL); err == nil {
		v.Set("post_logout_redirect_uri", (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: path}).String())
	}
	return end + sep + v.Encode()
}
