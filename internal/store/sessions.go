package store

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/session.lua
var sessionLua string

var sessionScript = redis.NewScript(sessionLua)

// The consoles' sessions live here, so that a person signed in through one
// sidecar is signed in on every one (no session affinity needed). A
// session's key is gw:console:SIDE:HASH, HASH the SHA-256 of its cookie's
// value, which is never stored; its fields are the console's
// (console/session.go), with created in unix ms.

func sessionKey(key string) (string, error) {
	if key == "" || len(key) > 100 || strings.ContainsFunc(key, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == ':')
	}) {
		return "", fmt.Errorf("store: session key %q", key)
	}
	return "gw:console:" + key, nil
}

// PutSession writes a new session's fields under key, to live for idle
// unless it is read (TouchSession).
func (s *Store) PutSession(ctx context.Context, key string, fields map[string]string, idle time.Duration) error {
	k, err := sessionKey(key)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, k, fields)
		p.PExpire(ctx, k, idle)
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: put session: %w", err)
	}
	return nil
}

// TouchSession reads the session under key and keeps it for idle more,
// never past lifetime after its created field (lua/session.lua); nil when
// there is no live session.
func (s *Store) TouchSession(ctx context.Context, key string, idle, lifetime time.Duration) (map[string]string, error) {
	k, err := sessionKey(key)
	if err != nil {
		return nil, err
	}
	v, err := sessionScript.Run(ctx, s.rdb, []string{k}, s.now().UnixMilli(), idle.Milliseconds(), lifetime.Milliseconds()).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("store: touch session: %w", err)
	}
	if len(v) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		m[v[i]] = v[i+1]
	}
	return m, nil
}

// EndSession deletes the session under key.
func (s *Store) EndSession(ctx context.Context, key string) error {
	k, err := sessionKey(key)
	if err != nil {
		return err
	}
	if err := s.rdb.Del(ctx, k).Err(); err != nil {
		return fmt.Errorf("store: end session: %w", err)
	}
	return nil
}
