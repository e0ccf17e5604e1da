package console

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
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

// session is one signed-in person.
type session struct {
	Identity
	csrf    string // derived from the cookie's value (csrfOf), never stored
	idToken string // a single sign-on's ID token, the hint of its logout
}

// SessionStore keeps the consoles' sessions where every sidecar reads
// them (the store's gw:console: keys), so that a person signed in through
// one sidecar is signed in on all: no session affinity. Keys are the
// console's side and the SHA-256 of the cookie's value; the value itself
// is never stored.
type SessionStore interface {
	// PutSession writes a new session's fields, to live for idle.
	PutSession(ctx context.Context, key string, fields map[string]string, idle time.Duration) error
	// TouchSession reads a session and keeps it for idle more, never
	// past lifetime after its created field; nil when there is none.
	TouchSession(ctx context.Context, key string, idle, lifetime time.Duration) (map[string]string, error)
	EndSession(ctx context.Context, key string) error
}

// sessions are one console's, kept in a SessionStore by the SHA-256 of
// the cookie's value: nothing in the store signs anyone in. The ID token
// is stored sealed by a key derived from the cookie's value, so that only
// the browser holding the cookie can have it opened.
type sessions struct {
	side     string // "op" or "cust": the key's prefix
	st       SessionStore
	idle     time.Duration
	lifetime time.Duration
	now      func() time.Time
	log      *slog.Logger
}

// SessionOptions are a console's sessions: where they are kept and when
// they end.
type SessionOptions struct {
	// Sessions keeps them where every sidecar reads them (the store).
	Sessions SessionStore
	// SessionIdle and SessionLifetime end them: after this long unused
	// (DefaultSessionIdle), and this long after sign-in
	// (DefaultSessionLifetime).
	SessionIdle, SessionLifetime time.Duration
}

// newSessions keeps side's sessions as o says, its defaults provisioned
// in o.
func newSessions(side string, o *SessionOptions, now func() time.Time, log *slog.Logger) *sessions {
	if o.SessionIdle <= 0 {
		o.SessionIdle = DefaultSessionIdle
	}
	if o.SessionLifetime <= 0 {
		o.SessionLifetime = DefaultSessionLifetime
	}
	return &sessions{side: side, st: o.Sessions, idle: o.SessionIdle, lifetime: o.SessionLifetime, now: now, log: log}
}

func randomToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (s *sessions) key(value string) string {
	h := sha256.Sum256([]byte(value))
	return s.side + ":" + hex.EncodeToString(h[:])
}

// derived is a secret of the cookie's value for one use: the store holds
// only the value's plain hash, from which none of these follows.
func derived(use, value string) [32]byte {
	return sha256.Sum256([]byte("gateway console " + use + "\x00" + value))
}

// csrfOf is the session's CSRF token: the same on every sidecar, stored
// nowhere.
func csrfOf(value string) string {
	d := derived("csrf", value)
	return base64.RawURLEncoding.EncodeToString(d[:])
}

// start makes a session and returns the cookie value naming it. idToken
// is a single sign-on's ID token ("" for none).
func (s *sessions) start(ctx context.Context, id Identity, idToken string) (string, *session, error) {
	if s.st == nil {
		return "", nil, errors.New("console: no session store")
	}
	value := randomToken()
	rs := make([]string, len(id.Roles))
	for i, r := range id.Roles {
		rs[i] = string(r)
	}
	fields := map[string]string{
		"actor": id.Actor, "roles": strings.Join(rs, ","), "account": id.AccountID,
		"created": strconv.FormatInt(s.now().UnixMilli(), 10),
	}
	if idToken != "" {
		fields["id_token"] = seal(derived("id token", value), idToken)
	}
	if err := s.st.PutSession(ctx, s.key(value), fields, s.idle); err != nil {
		return "", nil, err
	}
	return value, &session{Identity: id, csrf: csrfOf(value), idToken: idToken}, nil
}

// get returns the live session named by value, and marks it seen; nil
// when there is none, or the store cannot say (logged: the person is
// asked to sign in, which says the store is down).
func (s *sessions) get(ctx context.Context, value string) *session {
	if value == "" || s.st == nil {
		return nil
	}
	m, err := s.st.TouchSession(ctx, s.key(value), s.idle, s.lifetime)
	if err != nil {
		s.log.Warn("console: reading a session failed", "err", err)
		return nil
	}
	if m == nil {
		return nil
	}
	v := &session{Identity: Identity{Actor: m["actor"], AccountID: m["account"]}, csrf: csrfOf(value)}
	for r := range strings.SplitSeq(m["roles"], ",") {
		if r != "" {
			v.Roles = append(v.Roles, roles.Role(r))
		}
	}
	if t := m["id_token"]; t != "" {
		v.idToken, _ = unseal(derived("id token", value), t) // "" if not: no hint
	}
	return v
}

func (s *sessions) end(ctx context.Context, value string) {
	if s.st == nil {
		return
	}
	if err := s.st.EndSession(ctx, s.key(value)); err != nil {
		s.log.Warn("console: ending a session failed", "err", err)
	}
}

// seal encrypts plain with key (AES-256-GCM, a random nonce before the
// ciphertext), base64url.
func seal(key [32]byte, plain string) string {
	g := gcm(key)
	nonce := make([]byte, g.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(g.Seal(nonce, nonce, []byte(plain), nil))
}

func unseal(key [32]byte, sealed string) (string, bool) {
	b, err := base64.RawURLEncoding.DecodeString(sealed)
	g := gcm(key)
	if err != nil || len(b) < g.NonceSize() {
		return "", false
	}
	plain, err := g.Open(nil, b[:g.NonceSize()], b[g.NonceSize():], nil)
	return string(plain), err == nil
}

func gcm(key [32]byte) cipher.AEAD {
	b, _ := aes.NewCipher(key[:]) // a 32-byte key never fails
	g, _ := cipher.NewGCM(b)
	return g
}
