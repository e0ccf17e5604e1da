package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/roles"
)

// Identity is who signed in to a console.
type Identity struct {
	// Actor names the person in the audit trail.
	Actor string
	// Roles are what they may do (routes.go); the admin token holds
	// roles.Operator.
	Roles []roles.Role
	// AccountID is a customer's person's account ("" on the operator
	// console).
	AccountID string
}

// ErrSignIn is returned by an Authenticator for credentials it refuses.
var ErrSignIn = errors.New("sign-in refused")

// Authenticator checks the operator console's sign-in form. TokenAuthenticator
// takes the admin token; another sign-in (OIDC, say) implements this for a
// form that starts it, or adds its own callback route and calls
// Operator.StartSession once the provider has vouched for the operator.
type Authenticator interface {
	Authenticate(r *http.Request) (Identity, error)
}

// TokenAuthenticator signs in whoever presents the admin token in the form
// field "token".
type TokenAuthenticator struct {
	want [32]byte // SHA-256 of the token: a fixed-size, constant-time compare
}

// NewTokenAuthenticator returns an authenticator for the admin token.
func NewTokenAuthenticator(token string) (*TokenAuthenticator, error) {
	if token == "" {
		return nil, errors.New("console: empty admin token")
	}
	return &TokenAuthenticator{want: sha256.Sum256([]byte(token))}, nil
}

// Authenticate compares the form's token with the admin token.
func (a *TokenAuthenticator) Authenticate(r *http.Request) (Identity, error) {
	got := sha256.Sum256([]byte(strings.TrimSpace(r.PostFormValue("token"))))
	if subtle.ConstantTimeCompare(got[:], a.want[:]) != 1 {
		return Identity{}, ErrSignIn
	}
	return Identity{Actor: "admin", Roles: []roles.Role{roles.Operator}}, nil
}

// Credential names the admin token for the sign-in limit: a hash of it
// with its own prefix, so that the counter's key in Redis never carries
// the token and matches no other hash of it.
func (a *TokenAuthenticator) Credential(*http.Request) string {
	h := sha256.Sum256(append([]byte("gateway console sign-in\x00"), a.want[:]...))
	return hex.EncodeToString(h[:16])
}

// credentialNamer is an Authenticator that can name the credential a
// sign-in attempt is against (an opaque name, never the secret), so that
// attempts against one credential are limited together whatever their
// address. Attempts to an Authenticator without it share one name.
type credentialNamer interface {
	Credential(r *http.Request) string
}

// session is one signed-in operator.
type session struct {
	Identity
	csrf     string
	idToken  string // a single sign-on's ID token, the hint of its logout
	created  time.Time
	lastSeen time.Time
	flash    string // a notice shown once, on the next page
}

// sessions are kept in memory, by the SHA-256 of the cookie's value: a
// restart signs everyone out, and nothing in the store can be replayed.
type sessions struct {
	mu       sync.Mutex
	m        map[[32]byte]*session
	idle     time.Duration
	lifetime time.Duration
	now      func() time.Time
}

func newSessions(idle, lifetime time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[[32]byte]*session{}, idle: idle, lifetime: lifetime, now: now}
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// start makes a session and returns the cookie value naming it. idToken
// is a single sign-on's ID token ("" for none).
func (s *sessions) start(id Identity, idToken string) (string, *session) {
	value := randomToken()
	now := s.now()
	ses := &session{Identity: id, csrf: randomToken(), idToken: idToken, created: now, lastSeen: now}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Expired sessions go when a new one starts: the map stays bounded by
	// the sign-ins of one lifetime.
	for k, v := range s.m {
		if s.expired(v, now) {
			delete(s.m, k)
		}
	}
	s.m[sha256.Sum256([]byte(value))] = ses
	return value, ses
}

func (s *sessions) expired(v *session, now time.Time) bool {
	return now.Sub(v.lastSeen) >= s.idle || now.Sub(v.created) >= s.lifetime
}

// get returns the live session named by value, and marks it seen.
func (s *sessions) get(value string) *session {
	if value == "" {
		return nil
	}
	k := sha256.Sum256([]byte(value))
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.m[k]
	if v == nil {
		return nil
	}
	if s.expired(v, now) {
		delete(s.m, k)
		return nil
	}
	v.lastSeen = now
	return v
}

func (s *sessions) end(value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, sha256.Sum256([]byte(value)))
}

// takeFlash returns the session's notice and clears it.
func (s *sessions) takeFlash(v *session) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := v.flash
	v.flash = ""
	return f
}

func (s *sessions) setFlash(v *session, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v.flash = msg
}
