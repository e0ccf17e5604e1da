// Package auth reads client credentials from request headers and
// resolves them to stored keys through a short-lived in-process cache.
package auth

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/store"
)

// Errors from Parse.
var (
	ErrMissing     = errors.New("no API key: send it as x-api-key or Authorization: Bearer")
	ErrConflicting = errors.New("x-api-key and Authorization carry different keys")
	ErrMalformed   = errors.New("malformed API key")
	ErrRepeated    = errors.New("more than one x-api-key or Authorization header: send the key once")
)

// Parse returns the secret sent as `x-api-key` or `Authorization: Bearer`;
// the two are equivalent. Both may be sent only if they agree.
func Parse(xAPIKey, authorization string) (string, error) {
	xAPIKey = strings.TrimSpace(xAPIKey)
	bearer := ""
	if authorization != "" {
		scheme, rest, ok := strings.Cut(strings.TrimSpace(authorization), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return "", ErrMalformed
		}
		bearer = strings.TrimSpace(rest)
		if bearer == "" {
			return "", ErrMalformed
		}
	}
	switch {
	case xAPIKey == "" && bearer == "":
		return "", ErrMissing
	case xAPIKey != "" && bearer != "" && xAPIKey != bearer:
		return "", ErrConflicting
	case xAPIKey != "":
		return checkShape(xAPIKey)
	default:
		return checkShape(bearer)
	}
}

// checkShape rejects secrets that cannot be ours before any lookup, so that
// garbage never reaches the store or the cache.
func checkShape(s string) (string, error) {
	if len(s) < 8 || len(s) > 128 {
		return "", ErrMalformed
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "", ErrMalformed
		}
	}
	return s, nil
}

// Headers are the credential headers of one request, every value as sent.
// Envoy passes a repeated x-api-key to the processor as separate entries but
// joins a repeated Authorization (one of its inline headers) with commas;
// both are caught.
type Headers struct {
	XAPIKey       []string
	Authorization []string
}

// ParseHeaders is Parse for headers that may have been sent more than once:
// a repeated credential header is refused rather than letting one copy win.
func ParseHeaders(h Headers) (string, error) {
	if len(h.XAPIKey) > 1 || len(h.Authorization) > 1 {
		return "", ErrRepeated
	}
	var x, a string
	if len(h.XAPIKey) == 1 {
		x = h.XAPIKey[0]
	}
	if len(h.Authorization) == 1 {
		a = h.Authorization[0]
	}
	// A comma never occurs in a key: it is two headers joined.
	if strings.Contains(x, ",") || strings.Contains(a, ",") {
		return "", ErrRepeated
	}
	return Parse(x, a)
}

// Kind tells a model key from a read-only token by its prefix.
func Kind(secret string) account.KeyKind {
	switch {
	case strings.HasPrefix(secret, account.ModelKey.Prefix()):
		return account.ModelKey
	case strings.HasPrefix(secret, account.ReadOnlyToken.Prefix()):
		return account.ReadOnlyToken
	}
	return ""
}

// Lookuper finds a stored key by the hash of its secret.
type Lookuper interface {
	LookupKey(ctx context.Context, hash [32]byte) (account.Key, error)
}

// Cache resolves secrets to keys, remembering answers (including "unknown")
// for a short TTL. The TTL bounds how long a revocation takes to be seen by
// every sidecar sharing the store.
type Cache struct {
	src Lookuper
	ttl time.Duration
	now func() time.Time
	max int

	mu      sync.Mutex
	entries map[[32]byte]*cacheEntry
}

type cacheEntry struct {
	key     account.Key
	found   bool
	expires time.Time
}

// NewCache returns a cache in front of src. ttl of zero means
// config.DefaultKeyCacheTTL.
func NewCache(src Lookuper, ttl time.Duration) *Cache {
	if ttl <= 0 {
		ttl = config.DefaultKeyCacheTTL
	}
	return &Cache{src: src, ttl: ttl, now: time.Now, max: 100_000, entries: make(map[[32]byte]*cacheEntry)}
}

// Lookup returns the key for secret, or store.ErrNotFound.
//
// Entries are held by pointer and a miss is looked up in a function of its
// own: a hit, the request path's usual case, keeps a small frame on the
// stream's stack (the stream stack test bounds it).
func (c *Cache) Lookup(ctx context.Context, secret string) (account.Key, error) {
	h := store.HashSecret(secret)
	now := c.now()
	c.mu.Lock()
	e := c.entries[h]
	c.mu.Unlock()
	if e == nil || !now.Before(e.expires) {
		var err error
		if e, err = c.fetch(ctx, h, now); err != nil {
			return account.Key{}, err
		}
	}
	if !e.found {
		return account.Key{}, store.ErrNotFound
	}
	return e.key, nil
}

// fetch looks up the key hashed h in the store and caches what it found,
// a key or none; store trouble is not cached.
func (c *Cache) fetch(ctx context.Context, h [32]byte, now time.Time) (*cacheEntry, error) {
	k, err := c.src.LookupKey(ctx, h)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	e := &cacheEntry{key: k, found: err == nil, expires: now.Add(c.ttl)}
	c.mu.Lock()
	if len(c.entries) >= c.max {
		c.evictLocked(now)
	}
	c.entries[h] = e
	c.mu.Unlock()
	return e, nil
}

// evictLocked drops expired entries, or everything if none had expired, so
// that a flood of random keys cannot grow the cache without bound.
func (c *Cache) evictLocked(now time.Time) {
	for h, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, h)
		}
	}
	if len(c.entries) >= c.max {
		clear(c.entries)
	}
}

// Problem says why a stored key may not be used now, or "" if it may.
// A suspended account is not a problem of the key: see Authenticate.
func Problem(k account.Key, now time.Time) string {
	switch {
	case !k.RevokedAt.IsZero() && !now.Before(k.RevokedAt):
		return "API key has been revoked"
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		return "API key expired at " + k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return ""
}

// Reason classifies why Authenticate refused a request; each caller maps it to
// its own status and error format.
type Reason int

const (
	// Unauthenticated: no usable credential (401).
	Unauthenticated Reason = iota + 1
	// WrongKind: a valid-looking credential of a kind the caller does not
	// accept, such as a read-only token on a model route (403).
	WrongKind
	// Suspended: the key is valid but its account is suspended (403).
	Suspended
	// Unavailable: the store could not be asked (503).
	Unavailable
)

// Error is a refusal from Authenticate. Message is safe to show the client.
type Error struct {
	Reason  Reason
	Message string
	Err     error // the store error behind Unavailable
}

func (e *Error) Error() string { return e.Message }
func (e *Error) Unwrap() error { return e.Err }

// Policy says what a caller of Authenticate accepts.
type Policy struct {
	Kinds []account.KeyKind
	// AllowSuspended lets the keys of a suspended account through (reading
	// usage stays possible during a suspension).
	AllowSuspended bool
}

// Authenticator authenticates a request's credential headers: *Cache, or a
// stand-in in tests. The processor, the control endpoints and the console
// take one.
type Authenticator interface {
	Authenticate(ctx context.Context, h Headers, now time.Time, p Policy) (account.Key, error)
}

var _ Authenticator = (*Cache)(nil)

// Authenticate is the one path from request headers to a usable key: parse
// the credential headers, check the kind against those accepted, look the
// key up through the cache and check that it may be used at now. Every
// refusal is an *Error.
func (c *Cache) Authenticate(ctx context.Context, h Headers, now time.Time, p Policy) (account.Key, error) {
	secret, err := ParseHeaders(h)
	if err != nil {
		return account.Key{}, &Error{Reason: Unauthenticated, Message: err.Error()}
	}
	kind := Kind(secret)
	if kind == "" {
		return account.Key{}, &Error{Reason: Unauthenticated, Message: "invalid API key"}
	}
	if !slices.Contains(p.Kinds, kind) {
		return account.Key{}, &Error{Reason: WrongKind, Message: "this credential cannot be used here"}
	}
	key, err := c.Lookup(ctx, secret)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return account.Key{}, &Error{Reason: Unauthenticated, Message: "invalid API key"}
	case err != nil:
		return account.Key{}, &Error{Reason: Unavailable, Message: "the gateway cannot verify keys right now; retry shortly", Err: err}
	case key.Kind != kind:
		// The stored kind decides, not the prefix.
		return account.Key{}, &Error{Reason: WrongKind, Message: "this credential cannot be used here"}
	}
	if msg := Problem(key, now); msg != "" {
		return account.Key{}, &Error{Reason: Unauthenticated, Message: msg}
	}
	if key.AccountSuspended && !p.AllowSuspended {
		return account.Key{}, &Error{Reason: Suspended, Message: "this account is suspended; contact the gateway's operator"}
	}
	return key, nil
}
