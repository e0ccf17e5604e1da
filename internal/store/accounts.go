package store

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
)

// newID returns prefix followed by 16 random hex characters.
func newID(prefix string) string {
	var b [8]byte
	rand.Read(b[:]) // never fails
	return prefix + hex.EncodeToString(b[:])
}

// CheckLimits is the one check of an account's or a key's limits, before
// the store keeps them (the admin API answers its error as an invalid
// argument): none negative, amounts and counts within MaxNanoUSD, the
// concurrency wait within config.MaxConcurrencyWait. It reads every field
// by reflection, so a limit added to account.Limits is checked too.
func CheckLimits(l account.Limits) error {
	v := reflect.ValueOf(l)
	for i := range v.NumField() {
		name, n := v.Type().Field(i).Name, v.Field(i).Int()
		switch {
		case n < 0:
			return fmt.Errorf("%s %d: limits must not be negative", name, n)
		case name == "ConcurrencyWaitSeconds":
			if n > int64(config.MaxConcurrencyWait/time.Second) {
				return fmt.Errorf("concurrency wait %ds: at most %d", n, int64(config.MaxConcurrencyWait/time.Second))
			}
		case n > MaxNanoUSD:
			return fmt.Errorf("%s %d: %w", name, n, ErrTooLarge)
		}
	}
	return nil
}

// MaxNanoUSD bounds every amount of money the store keeps (a balance, a
// top-up, a limit, a settlement's cost): 2^53 − 1 nano-USD, about 9 million
// USD. The store's scripts compute in Lua numbers, doubles, which are exact
// integers up to 2^53; amounts the API takes are refused above it, and a
// top-up that would take a balance above it is refused before anything is
// written.
const MaxNanoUSD = 1<<53 - 1

// ErrTooLarge is returned for an amount, or a balance it would make, above
// MaxNanoUSD.
var ErrTooLarge = errors.New("amount above the most the store keeps exactly (2^53-1 nano-USD)")

// checkAccountLimits is CheckLimits for an account, which has no lifetime
// cap: its balance is one.
func checkAccountLimits(l account.Limits) error {
	if l.TotalNanoUSD != 0 {
		return errors.New("an account has no total limit (its balance is one)")
	}
	if l.ConcurrencyWaitSeconds != 0 {
		return errors.New("an account has no concurrency wait (a key's is its own)")
	}
	return CheckLimits(l)
}

// limitFields are the hash fields of limits, the same in an account's hash
// and a key's (admit.lua reads the account's).
func limitFields(l account.Limits) []any {
	f := []any{
		"daily", strconv.FormatInt(l.DailyNanoUSD, 10),
		"rpm", strconv.FormatInt(l.RPM, 10),
		"window", strconv.FormatInt(l.WindowMinutes, 10),
		"tpm", strconv.FormatInt(l.TPM, 10),
		"conc", strconv.FormatInt(l.Concurrency, 10),
		"monthly", strconv.FormatInt(l.MonthlyNanoUSD, 10),
	}
	return f
}

// limitFieldNames are the fields limitFields writes, in decodeLimits' order.
var limitFieldNames = []string{"daily", "rpm", "window", "tpm", "conc", "monthly"}

// decodeLimits reads the values of limitFieldNames (HMGET order).
func decodeLimits(v []any) account.Limits {
	return account.Limits{
		DailyNanoUSD:   parseInt(str(v[0])),
		RPM:            parseInt(str(v[1])),
		WindowMinutes:  parseInt(str(v[2])),
		TPM:            parseInt(str(v[3])),
		Concurrency:    parseInt(str(v[4])),
		MonthlyNanoUSD: parseInt(str(v[5])),
	}
}

// CreateAccount creates an account with an opening balance in nano-USD.
func (s *Store) CreateAccount(ctx context.Context, name string, balance int64, limits account.Limits) (account.Account, error) {
	if balance < 0 {
		return account.Account{}, errors.New("store: create account: negative balance")
	}
	if balance > MaxNanoUSD {
		return account.Account{}, fmt.Errorf("store: create account: balance: %w", ErrTooLarge)
	}
	if err := checkAccountLimits(limits); err != nil {
		return account.Account{}, fmt.Errorf("store: create account: %w", err)
	}
	a := account.Account{
		ID:        newID("acct_"),
		Name:      name,
		Limits:    limits,
		CreatedAt: s.now().Truncate(time.Millisecond),
	}
	fields := append([]any{
		"name", name,
		"created", ms(a.CreatedAt),
		"balance", strconv.FormatInt(balance, 10),
		"held", "0",
	}, limitFields(limits)...)
	// The hash first, then the index: a listed account always exists. The two
	// keys live in different slots, so they cannot share a transaction.
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, acctKey(a.ID, "acct"), fields...)
		p.SAdd(ctx, accountsKey, a.ID)
		return nil
	})
	if err != nil {
		return account.Account{}, fmt.Errorf("store: create account: %w", err)
	}
	return a, nil
}

var accountFields = append([]string{"name", "created", "suspended", "alert_below"}, limitFieldNames...)

// decodeAccount builds an Account from HMGET accountFields; ok is false when
// the account does not exist.
func decodeAccount(id string, v []any) (a account.Account, ok bool) {
	if v[1] == nil {
		return account.Account{}, false
	}
	return account.Account{
		ID:           id,
		Name:         str(v[0]),
		CreatedAt:    parseMS(str(v[1])),
		Limits:       decodeLimits(v[4:]),
		Suspended:    str(v[2]) == "1",
		BalanceAlert: parseInt(str(v[3])),
	}, true
}

// Account returns the account id.
func (s *Store) Account(ctx context.Context, id string) (account.Account, error) {
	if !validID(id) {
		return account.Account{}, fmt.Errorf("store: account %q: %w", id, ErrNotFound)
	}
	v, err := s.rdb.HMGet(ctx, acctKey(id, "acct"), accountFields...).Result()
	if err != nil {
		return account.Account{}, fmt.Errorf("store: account %s: %w", id, err)
	}
	a, ok := decodeAccount(id, v)
	if !ok {
		return account.Account{}, fmt.Errorf("store: account %s: %w", id, ErrNotFound)
	}
	return a, nil
}

// ListAccounts returns every account, oldest first.
func (s *Store) ListAccounts(ctx context.Context) ([]account.Account, error) {
	ids, err := s.rdb.SMembers(ctx, accountsKey).Result()
	if err != nil {
		return nil, fmt.Errorf("store: list accounts: %w", err)
	}
	cmds := make([]*redis.SliceCmd, 0, len(ids))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			cmds = append(cmds, p.HMGet(ctx, acctKey(id, "acct"), accountFields...))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store: list accounts: %w", err)
	}
	accounts := make([]account.Account, 0, len(ids))
	for i, id := range ids {
		if a, ok := decodeAccount(id, cmds[i].Val()); ok {
			accounts = append(accounts, a)
		}
	}
	slices.SortFunc(accounts, func(a, b account.Account) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return accounts, nil
}

// SetLimits replaces the account's limits.
func (s *Store) SetLimits(ctx context.Context, id string, limits account.Limits) error {
	if !validID(id) {
		return fmt.Errorf("store: set limits %q: %w", id, ErrNotFound)
	}
	if err := checkAccountLimits(limits); err != nil {
		return fmt.Errorf("store: set limits %s: %w", id, err)
	}
	n, err := hsetxScript.Run(ctx, s.rdb, []string{acctKey(id, "acct")}, limitFields(limits)...).Int64()
	if err != nil {
		return fmt.Errorf("store: set limits %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: set limits %s: %w", id, ErrNotFound)
	}
	return nil
}

// SetBalanceAlert sets the balance (nano-USD) below which the account's
// balance alert fires; zero turns it off.
func (s *Store) SetBalanceAlert(ctx context.Context, id string, threshold int64) error {
	if !validID(id) {
		return fmt.Errorf("store: set balance alert %q: %w", id, ErrNotFound)
	}
	if threshold < 0 {
		return fmt.Errorf("store: set balance alert %s: negative threshold", id)
	}
	n, err := hsetxScript.Run(ctx, s.rdb, []string{acctKey(id, "acct")}, "alert_below", strconv.FormatInt(threshold, 10)).Int64()
	if err != nil {
		return fmt.Errorf("store: set balance alert %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: set balance alert %s: %w", id, ErrNotFound)
	}
	return nil
}

// SetSuspended suspends or resumes the account. Its keys see the change
// within the key cache's TTL, since a key lookup reads the account's state.
func (s *Store) SetSuspended(ctx context.Context, id string, suspended bool) error {
	if !validID(id) {
		return fmt.Errorf("store: suspend %q: %w", id, ErrNotFound)
	}
	v := "0"
	if suspended {
		v = "1"
	}
	n, err := hsetxScript.Run(ctx, s.rdb, []string{acctKey(id, "acct")}, "suspended", v).Int64()
	if err != nil {
		return fmt.Errorf("store: suspend %s: %w", id, err)
	}
	if n == 0 {
		return fmt.Errorf("store: suspend %s: %w", id, ErrNotFound)
	}
	return nil
}

// TopUp adds amount nano-USD to the account's balance and returns the balance.
// A non-empty idempotencyKey is applied at most once per account: a repeat
// returns the current balance with applied false, or ErrIdempotencyConflict
// when the amount differs. An empty key always applies.
func (s *Store) TopUp(ctx context.Context, id string, amount int64, idempotencyKey string) (balance int64, applied bool, err error) {
	if !validID(id) {
		return 0, false, fmt.Errorf("store: top up %q: %w", id, ErrNotFound)
	}
	if amount <= 0 {
		return 0, false, fmt.Errorf("store: top up %s: amount must be positive", id)
	}
	if amount > MaxNanoUSD {
		return 0, false, fmt.Errorf("store: top up %s: %w", id, ErrTooLarge)
	}
	keys := []string{acctKey(id, "acct"), acctKey(id, "topup:"+idempotencyKey)}
	r, err := topUpScript.Run(ctx, s.rdb, keys, amount, boolString(idempotencyKey != ""), int64(MaxNanoUSD)).Int64Slice()
	if err != nil {
		return 0, false, fmt.Errorf("store: top up %s: %w", id, err)
	}
	switch r[0] {
	case -1:
		return 0, false, fmt.Errorf("store: top up %s: %w", id, ErrNotFound)
	case -2:
		return r[1], false, fmt.Errorf("store: top up %s: %w", id, ErrIdempotencyConflict)
	case -3:
		return r[1], false, fmt.Errorf("store: top up %s: the balance would be %w", id, ErrTooLarge)
	}
	return r[1], r[0] == 1, nil
}

// Balance returns the account's settled balance in nano-USD; open holds are
// not subtracted.
func (s *Store) Balance(ctx context.Context, id string) (int64, error) {
	if !validID(id) {
		return 0, fmt.Errorf("store: balance %q: %w", id, ErrNotFound)
	}
	v, err := s.rdb.HGet(ctx, acctKey(id, "acct"), "balance").Int64()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("store: balance %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("store: balance %s: %w", id, err)
	}
	return v, nil
}

// ClaimAlert records that the alert name of the account has fired, unless
// it had already: true for the one caller, across every sidecar, that
// claims it first. The claim is forgotten after ttl (zero: kept until
// ReleaseAlert), so that a name that carries its window (a day, a month)
// needs no cleanup.
func (s *Store) ClaimAlert(ctx context.Context, accountID, name string, ttl time.Duration) (bool, error) {
	if !validID(accountID) {
		return false, fmt.Errorf("store: claim alert %q: %w", accountID, ErrNotFound)
	}
	ok, err := s.rdb.SetNX(ctx, acctKey(accountID, "alert:"+name), ms(s.now()), ttl).Result()
	if err != nil {
		return false, fmt.Errorf("store: claim alert %s of %s: %w", name, accountID, err)
	}
	return ok, nil
}

// ReleaseAlert forgets a claim, so that the alert can fire again (the
// balance rose above its threshold).
func (s *Store) ReleaseAlert(ctx context.Context, accountID, name string) error {
	if !validID(accountID) {
		return fmt.Errorf("store: release alert %q: %w", accountID, ErrNotFound)
	}
	if err := s.rdb.Del(ctx, acctKey(accountID, "alert:"+name)).Err(); err != nil {
		return fmt.Errorf("store: release alert %s of %s: %w", name, accountID, err)
	}
	return nil
}
