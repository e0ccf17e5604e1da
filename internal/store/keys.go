package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
)

// HashSecret returns the SHA-256 of a credential's secret, the only form in
// which the store keeps it.
func HashSecret(secret string) [32]byte { return sha256.Sum256([]byte(secret)) }

// newSecret returns a fresh secret: the kind, '_' and 32 random bytes in
// unpadded base64url.
func newSecret(kind account.KeyKind) string {
	var b [32]byte
	rand.Read(b[:]) // never fails
	return kind.Prefix() + base64.RawURLEncoding.EncodeToString(b[:])
}

const prefixLen = 8 // characters of the secret kept for recognition

// CreateKey makes a credential for the account and returns its secret, which
// is shown once and never stored.
func (s *Store) CreateKey(ctx context.Context, accountID string, kind account.KeyKind, opts account.KeyOptions) (secret string, k account.Key, err error) {
	if kind != account.ModelKey && kind != account.ReadOnlyToken {
		return "", account.Key{}, fmt.Errorf("store: create key: unknown kind %q", kind)
	}
	if err := CheckLimits(opts.Limits); err != nil {
		return "", account.Key{}, fmt.Errorf("store: create key: %w", err)
	}
	if !validID(accountID) {
		return "", account.Key{}, fmt.Errorf("store: create key for %q: %w", accountID, ErrNotFound)
	}
	n, err := s.rdb.Exists(ctx, acctKey(accountID, "acct")).Result()
	if err != nil {
		return "", account.Key{}, fmt.Errorf("store: create key for %s: %w", accountID, err)
	}
	if n == 0 {
		return "", account.Key{}, fmt.Errorf("store: create key for %s: %w", accountID, ErrNotFound)
	}
	if opts.ProjectID == account.DefaultProject {
		opts.ProjectID = ""
	}
	if opts.ProjectID != "" && (!validID(opts.ProjectID) || kind != account.ModelKey) {
		return "", account.Key{}, fmt.Errorf("store: create key for %s: project %q (model keys only): %w", accountID, opts.ProjectID, ErrNotFound)
	}
	secret, k, err = s.createKey(ctx, accountID, kind, opts)
	if err != nil {
		return "", account.Key{}, fmt.Errorf("store: create key for %s: %w", accountID, err)
	}
	return secret, k, nil
}

// createKey writes a new credential of an existing account.
func (s *Store) createKey(ctx context.Context, accountID string, kind account.KeyKind, opts account.KeyOptions) (string, account.Key, error) {
	secret := newSecret(kind)
	sum := HashSecret(secret)
	hexHash := hex.EncodeToString(sum[:])
	k := account.Key{
		ID:        newID("key_"),
		AccountID: accountID,
		Kind:      kind,
		Label:     opts.Label,
		Prefix:    secret[:prefixLen],
		CreatedAt: s.now().Truncate(time.Millisecond),
		ExpiresAt: opts.ExpiresAt.Truncate(time.Millisecond).UTC(),
		Models:    slices.Clone(opts.Models),
		Limits:    opts.Limits,
		ProjectID: opts.ProjectID,
	}
	if opts.ExpiresAt.IsZero() {
		k.ExpiresAt = time.Time{}
	}
	models, err := json.Marshal(k.Models)
	if err != nil {
		return "", account.Key{}, err
	}
	meta := acctKey(accountID, "key:"+k.ID)
	// Metadata and the account's key set share a slot: one transaction. The
	// index lives in another slot and is written last, so a lookup that finds
	// it always finds the metadata too. A key made in a project is made only
	// while the project exists (its deletion is watched).
	write := func(p redis.Pipeliner) error {
		p.HSet(ctx, meta,
			"account", accountID,
			"kind", string(kind),
			"label", k.Label,
			"prefix", k.Prefix,
			"hash", hexHash,
			"models", string(models),
			"created", ms(k.CreatedAt),
			"expires", ms(k.ExpiresAt),
			"revoked", "0",
			"last_used", "0",
		)
		if !k.Limits.IsZero() {
			p.HSet(ctx, meta, keyLimitFields(k.Limits)...)
		}
		p.SAdd(ctx, acctKey(accountID, "keys"), k.ID)
		if k.ProjectID != "" {
			p.HSet(ctx, meta, "project", k.ProjectID)
			p.SAdd(ctx, acctKey(accountID, "pkeys:"+k.ProjectID), k.ID)
		}
		return nil
	}
	if k.ProjectID == "" {
		_, err = s.rdb.TxPipelined(ctx, write)
	} else {
		proj := acctKey(accountID, "proj:"+k.ProjectID)
		err = s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			n, err := tx.Exists(ctx, proj).Result()
			if err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("project %s: %w", k.ProjectID, ErrNotFound)
			}
			_, err = tx.TxPipelined(ctx, write)
			return err
		}, proj)
	}
	if err != nil {
		return "", account.Key{}, err
	}
	if err := s.rdb.HSet(ctx, keyHashKey(hexHash), "key", k.ID, "account", accountID).Err(); err != nil {
		return "", account.Key{}, err
	}
	return secret, k, nil
}

// decodeKey builds a Key from its metadata hash; ok is false when it is empty.
func decodeKey(id string, m map[string]string) (k account.Key, ok bool) {
	if len(m) == 0 {
		return account.Key{}, false
	}
	k = account.Key{
		ID:         id,
		AccountID:  m["account"],
		Kind:       account.KeyKind(m["kind"]),
		Label:      m["label"],
		Prefix:     m["prefix"],
		CreatedAt:  parseMS(m["created"]),
		ExpiresAt:  parseMS(m["expires"]),
		LastUsedAt: parseMS(m["last_used"]),
		RevokedAt:  parseMS(m["revoked"]),
		ProjectID:  m["project"],
	}
	k.Limits = decodeHashLimits(m)
	if v := m["models"]; v != "" {
		json.Unmarshal([]byte(v), &k.Models) // written by createKey; null is no list
	}
	return k, true
}

// decodeHashLimits reads the limits of a key's or a project's hash
// (keyLimitFields, projectLimitFields); a field not written reads 0.
func decodeHashLimits(m map[string]string) account.Limits {
	return account.Limits{
		DailyNanoUSD:   parseInt(m["daily"]),
		RPM:            parseInt(m["rpm"]),
		WindowMinutes:  parseInt(m["window"]),
		TPM:            parseInt(m["tpm"]),
		Concurrency:    parseInt(m["conc"]),
		MonthlyNanoUSD: parseInt(m["monthly"]),
		TotalNanoUSD:   parseInt(m["total"]),

		ConcurrencyWaitSeconds: parseInt(m["cwait"]),
	}
}

// LookupKey finds the credential whose secret has SHA-256 hash. It returns the
// key whatever its state; the caller checks RevokedAt and ExpiresAt.
func (s *Store) LookupKey(ctx context.Context, hash [32]byte) (account.Key, error) {
	idx, err := s.rdb.HMGet(ctx, keyHashKey(hex.EncodeToString(hash[:])), "key", "account").Result()
	if err != nil {
		return account.Key{}, fmt.Errorf("store: lookup key: %w", err)
	}
	keyID, accountID := str(idx[0]), str(idx[1])
	if !validID(keyID) || !validID(accountID) {
		return account.Key{}, fmt.Errorf("store: lookup key: %w", ErrNotFound)
	}
	// The key and its account share a slot: one round trip for both.
	var meta *redis.MapStringStringCmd
	var suspended *redis.StringCmd
	var standing func() account.Standing
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		meta = p.HGetAll(ctx, acctKey(accountID, "key:"+keyID))
		suspended = p.HGet(ctx, acctKey(accountID, "acct"), "suspended")
		standing = queueStanding(ctx, p, accountID, keyID, s.now())
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return account.Key{}, fmt.Errorf("store: lookup key %s: %w", keyID, err)
	}
	k, ok := decodeKey(keyID, meta.Val())
	if !ok {
		return account.Key{}, fmt.Errorf("store: lookup key %s: %w", keyID, ErrNotFound)
	}
	k.AccountSuspended = suspended.Val() == "1"
	if k.ProjectID != "" {
		// A second round trip for keys in a project only (the key cache
		// makes it once per lifetime); a project gone reads as none.
		m, err := s.rdb.HGetAll(ctx, acctKey(accountID, "proj:"+k.ProjectID)).Result()
		if err != nil {
			return account.Key{}, fmt.Errorf("store: lookup key %s: project: %w", keyID, err)
		}
		if p, ok := decodeProject(accountID, k.ProjectID, m); ok {
			k.ProjectName, k.ProjectLimits = p.Name, p.Limits
		}
	}
	st := standing()
	k.Standing = &st
	return k, nil
}

// ListKeys returns the account's credentials, revoked and expired ones
// included, oldest first.
func (s *Store) ListKeys(ctx context.Context, accountID string) ([]account.Key, error) {
	if !validID(accountID) {
		return nil, fmt.Errorf("store: list keys of %q: %w", accountID, ErrNotFound)
	}
	ids, hashes, err := s.members(ctx, accountID, "keys", "key:")
	if err != nil {
		return nil, fmt.Errorf("store: list keys of %s: %w", accountID, err)
	}
	keys := make([]account.Key, 0, len(ids))
	for i, id := range ids {
		if k, ok := decodeKey(id, hashes[i]); ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b account.Key) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return keys, nil
}

// RevokeKey revokes the account's credential keyID. Revoking twice keeps the
// first revocation time.
func (s *Store) RevokeKey(ctx context.Context, accountID, keyID string) error {
	if !validID(accountID) || !validID(keyID) {
		return fmt.Errorf("store: revoke key %q of %q: %w", keyID, accountID, ErrNotFound)
	}
	n, err := revokeScript.Run(ctx, s.rdb, []string{acctKey(accountID, "key:"+keyID)}, ms(s.now())).Int64()
	if err != nil {
		return fmt.Errorf("store: revoke key %s of %s: %w", keyID, accountID, err)
	}
	if n < 0 {
		return fmt.Errorf("store: revoke key %s of %s: %w", keyID, accountID, ErrNotFound)
	}
	return nil
}

// RotateKey replaces the account's credential keyID with a new one of the same
// kind, label and models, and lets the old one live for grace more at most: its
// expiry becomes now+grace unless it already expires sooner.
func (s *Store) RotateKey(ctx context.Context, accountID, keyID string, grace time.Duration) (secret string, newKey account.Key, err error) {
	if !validID(accountID) || !validID(keyID) {
		return "", account.Key{}, fmt.Errorf("store: rotate key %q of %q: %w", keyID, accountID, ErrNotFound)
	}
	if grace < 0 {
		grace = 0
	}
	m, err := s.rdb.HGetAll(ctx, acctKey(accountID, "key:"+keyID)).Result()
	if err != nil {
		return "", account.Key{}, fmt.Errorf("store: rotate key %s of %s: %w", keyID, accountID, err)
	}
	old, ok := decodeKey(keyID, m)
	if !ok {
		return "", account.Key{}, fmt.Errorf("store: rotate key %s of %s: %w", keyID, accountID, ErrNotFound)
	}
	if !old.RevokedAt.IsZero() {
		return "", account.Key{}, fmt.Errorf("store: rotate key %s of %s: %w", keyID, accountID, ErrRevoked)
	}
	// The replacement keeps the old key's expiry: rotating must not turn a
	// key meant to lapse into one that never does.
	secret, newKey, err = s.createKey(ctx, accountID, old.Kind, account.KeyOptions{Label: old.Label, Models: old.Models, ExpiresAt: old.ExpiresAt, Limits: old.Limits, ProjectID: old.ProjectID})
	if err != nil {
		return "", account.Key{}, fmt.Errorf("store: rotate key %s of %s: %w", keyID, accountID, err)
	}
	until := ms(s.now().Add(grace))
	if err := expireScript.Run(ctx, s.rdb, []string{acctKey(accountID, "key:"+keyID)}, until).Err(); err != nil {
		return "", account.Key{}, fmt.Errorf("store: rotate key %s of %s: %w", keyID, accountID, err)
	}
	return secret, newKey, nil
}

// keyLimitFields are the hash fields of a key's limits: an account's, the
// lifetime cap and the concurrency wait.
func keyLimitFields(l account.Limits) []any {
	return append(limitFields(l), "total", strconv.FormatInt(l.TotalNanoUSD, 10),
		"cwait", strconv.FormatInt(l.ConcurrencyWaitSeconds, 10))
}

// SetKeyLimits replaces the limits of the account's credential keyID. The
// sidecars see them within the key cache's lifetime; what the key has spent
// and has in flight stays counted.
func (s *Store) SetKeyLimits(ctx context.Context, accountID, keyID string, l account.Limits) error {
	if !validID(accountID) || !validID(keyID) {
		return fmt.Errorf("store: set limits of key %q of %q: %w", keyID, accountID, ErrNotFound)
	}
	if err := CheckLimits(l); err != nil {
		return fmt.Errorf("store: set limits of key %s: %w", keyID, err)
	}
	n, err := hsetxScript.Run(ctx, s.rdb, []string{acctKey(accountID, "key:"+keyID)}, keyLimitFields(l)...).Int64()
	if err != nil {
		return fmt.Errorf("store: set limits of key %s: %w", keyID, err)
	}
	if n == 0 {
		return fmt.Errorf("store: set limits of key %s of %s: %w", keyID, accountID, ErrNotFound)
	}
	return nil
}

// Key returns the account's credential keyID.
func (s *Store) Key(ctx context.Context, accountID, keyID string) (account.Key, error) {
	if !validID(accountID) || !validID(keyID) {
		return account.Key{}, fmt.Errorf("store: key %q of %q: %w", keyID, accountID, ErrNotFound)
	}
	m, err := s.rdb.HGetAll(ctx, acctKey(accountID, "key:"+keyID)).Result()
	if err != nil {
		return account.Key{}, fmt.Errorf("store: key %s of %s: %w", keyID, accountID, err)
	}
	k, ok := decodeKey(keyID, m)
	if !ok || k.AccountID != accountID {
		return account.Key{}, fmt.Errorf("store: key %s of %s: %w", keyID, accountID, ErrNotFound)
	}
	return k, nil
}

// members reads the ids in one of the account's sets (keys, projects) and
// the hash of each, named prefix+id: ErrNotFound when the account is not.
func (s *Store) members(ctx context.Context, accountID, set, prefix string) ([]string, []map[string]string, error) {
	var exists *redis.IntCmd
	var members *redis.StringSliceCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		exists = p.Exists(ctx, acctKey(accountID, "acct"))
		members = p.SMembers(ctx, acctKey(accountID, set))
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if exists.Val() == 0 {
		return nil, nil, ErrNotFound
	}
	ids := members.Val()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, acctKey(accountID, prefix+id))
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	hashes := make([]map[string]string, len(ids))
	for i, c := range cmds {
		hashes[i] = c.Val()
	}
	return ids, hashes, nil
}
