package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// KeyStore is what the key handlers read and change of an account's model
// keys and read-only tokens.
type KeyStore interface {
	CreateKey(ctx context.Context, accountID string, kind account.KeyKind, opts account.KeyOptions) (secret string, k account.Key, err error)
	Key(ctx context.Context, accountID, keyID string) (account.Key, error)
	ListKeys(ctx context.Context, accountID string) ([]account.Key, error)
	RevokeKey(ctx context.Context, accountID, keyID string) error
	RotateKey(ctx context.Context, accountID, keyID string, grace time.Duration) (secret string, newKey account.Key, err error)
	SetKeyLimits(ctx context.Context, accountID, keyID string, l account.Limits) error
	KeyStates(ctx context.Context, accountID string, ids ...string) ([]ledger.KeyState, error)
}

// kindName is how errors and audit entries call a kind of credential.
func kindName(k account.KeyKind) string {
	if k == account.ReadOnlyToken {
		return "token"
	}
	return "key"
}

// expiry resolves a request's expire_time or ttl to an absolute time; zero
// means never.
func (s *Service) expiry(at *timestamppb.Timestamp, ttl *durationpb.Duration) (time.Time, error) {
	var t time.Time
	switch {
	case at != nil:
		if err := at.CheckValid(); err != nil {
			return time.Time{}, invalid("expire_time: %v", err)
		}
		t = at.AsTime()
	case ttl != nil:
		if err := ttl.CheckValid(); err != nil {
			return time.Time{}, invalid("ttl: %v", err)
		}
		if ttl.AsDuration() <= 0 {
			return time.Time{}, invalid("ttl must be positive")
		}
		t = s.now().Add(ttl.AsDuration())
	default:
		return time.Time{}, nil
	}
	if !t.After(s.now()) {
		return time.Time{}, invalid("expiry must be in the future")
	}
	return t, nil
}

func checkLabel(label string) error {
	if len(label) > maxNameLen {
		return invalid("label is longer than %d bytes", maxNameLen)
	}
	return clean("label", label)
}

// createCredential makes a key or token and records it.
func (s *Service) createCredential(ctx context.Context, accountID string, kind account.KeyKind, opts account.KeyOptions) (string, account.Key, error) {
	op := "create " + kindName(kind)
	secret, k, err := s.keys.CreateKey(ctx, accountID, kind, opts)
	if err != nil {
		return "", account.Key{}, s.failAccount(op, accountID, err)
	}
	detail := fmt.Sprintf("label=%q", opts.Label)
	if !k.ExpiresAt.IsZero() {
		detail += " expires=" + k.ExpiresAt.Format(time.RFC3339)
	}
	if len(k.Models) > 0 {
		detail += " models=" + strings.Join(k.Models, ",")
	}
	if k.ProjectID != "" {
		detail += " project=" + k.ProjectID
	}
	s.change(ctx, kindName(kind)+".create", accountID, k.ID, detail, nil, auditKey(k))
	return secret, k, nil
}

// CreateKey makes a model key.
func (s *Service) CreateKey(ctx context.Context, req *adminv1.CreateKeyRequest) (*adminv1.CreateKeyResponse, error) {
	if err := checkLabel(req.GetLabel()); err != nil {
		return nil, err
	}
	exp, err := s.expiry(req.GetExpireTime(), req.GetTtl())
	if err != nil {
		return nil, err
	}
	models := req.GetModels()
	if len(models) > maxModels {
		return nil, invalid("at most %d models", maxModels)
	}
	for _, m := range models {
		if err := checkName("a model name", m); err != nil {
			return nil, err
		}
	}
	secret, k, err := s.createCredential(ctx, req.GetAccountId(), account.ModelKey,
		account.KeyOptions{Label: req.GetLabel(), ExpiresAt: exp, Models: models, ProjectID: req.GetProjectId()})
	if err != nil {
		return nil, err
	}
	return &adminv1.CreateKeyResponse{Secret: secret, Key: keyToProto(k, s.now())}, nil
}

// CreateReadOnlyToken makes a read-only token.
func (s *Service) CreateReadOnlyToken(ctx context.Context, req *adminv1.CreateReadOnlyTokenRequest) (*adminv1.CreateReadOnlyTokenResponse, error) {
	if err := checkLabel(req.GetLabel()); err != nil {
		return nil, err
	}
	exp, err := s.expiry(req.GetExpireTime(), req.GetTtl())
	if err != nil {
		return nil, err
	}
	secret, k, err := s.createCredential(ctx, req.GetAccountId(), account.ReadOnlyToken,
		account.KeyOptions{Label: req.GetLabel(), ExpiresAt: exp})
	if err != nil {
		return nil, err
	}
	return &adminv1.CreateReadOnlyTokenResponse{Secret: secret, Token: keyToProto(k, s.now())}, nil
}

// ListKeys returns an account's keys and tokens.
func (s *Service) ListKeys(ctx context.Context, req *adminv1.ListKeysRequest) (*adminv1.ListKeysResponse, error) {
	keys, err := s.keys.ListKeys(ctx, req.GetAccountId())
	if err != nil {
		return nil, s.failAccount("list keys", req.GetAccountId(), err)
	}
	now := s.now()
	resp := &adminv1.ListKeysResponse{Keys: make([]*adminv1.Key, len(keys))}
	for i, k := range keys {
		resp.Keys[i] = keyToProto(k, now)
	}
	return resp, nil
}

// credential returns the account's credential id, which must be of kind: a
// key id given to RevokeReadOnlyToken (or the reverse) is a mistake worth
// reporting rather than acting on.
func (s *Service) credential(ctx context.Context, op, accountID, id string, kind account.KeyKind) (account.Key, error) {
	keys, err := s.keys.ListKeys(ctx, accountID)
	if err != nil {
		return account.Key{}, s.failAccount(op, accountID, err)
	}
	for _, k := range keys {
		if k.ID != id {
			continue
		}
		if k.Kind != kind {
			return account.Key{}, invalid("%s: %s is a %s, not a %s", op, id, kindName(k.Kind), kindName(kind))
		}
		return k, nil
	}
	return account.Key{}, s.fail(op, &missing{what: kindName(kind) + " " + strconv.Quote(id) + " of account " + strconv.Quote(accountID)})
}

// revoke revokes a credential of kind and returns it as it is afterwards.
func (s *Service) revoke(ctx context.Context, accountID, id string, kind account.KeyKind) (*adminv1.Key, error) {
	op := "revoke " + kindName(kind)
	was, err := s.credential(ctx, op, accountID, id, kind)
	if err != nil {
		return nil, err
	}
	if err := s.keys.RevokeKey(ctx, accountID, id); err != nil {
		return nil, s.fail(op, err)
	}
	// The revocation is recorded once, whether or not the key can be read
	// back (after is then unknown).
	k, err := s.credential(ctx, op, accountID, id, kind)
	var after any
	if err == nil {
		after = auditKey(k)
	}
	s.change(ctx, kindName(kind)+".revoke", accountID, id, "", auditKey(was), after)
	if err != nil {
		return nil, err
	}
	return keyToProto(k, s.now()), nil
}

// RevokeKey revokes a model key.
func (s *Service) RevokeKey(ctx context.Context, req *adminv1.RevokeKeyRequest) (*adminv1.RevokeKeyResponse, error) {
	k, err := s.revoke(ctx, req.GetAccountId(), req.GetKeyId(), account.ModelKey)
	if err != nil {
		return nil, err
	}
	return &adminv1.RevokeKeyResponse{Key: k}, nil
}

// RevokeReadOnlyToken revokes a read-only token.
func (s *Service) RevokeReadOnlyToken(ctx context.Context, req *adminv1.RevokeReadOnlyTokenRequest) (*adminv1.RevokeReadOnlyTokenResponse, error) {
	k, err := s.revoke(ctx, req.GetAccountId(), req.GetTokenId(), account.ReadOnlyToken)
	if err != nil {
		return nil, err
	}
	return &adminv1.RevokeReadOnlyTokenResponse{Token: k}, nil
}

// RotateKey replaces a model key; the old one works for the grace period.
func (s *Service) RotateKey(ctx context.Context, req *adminv1.RotateKeyRequest) (*adminv1.RotateKeyResponse, error) {
	const op = "rotate key"
	grace := DefaultGrace
	if g := req.GetGrace(); g != nil {
		if err := g.CheckValid(); err != nil {
			return nil, invalid("grace: %v", err)
		}
		if grace = g.AsDuration(); grace < 0 {
			return nil, invalid("grace must not be negative")
		}
	}
	accountID, id := req.GetAccountId(), req.GetKeyId()
	was, err := s.credential(ctx, op, accountID, id, account.ModelKey)
	if err != nil {
		return nil, err
	}
	secret, k, err := s.keys.RotateKey(ctx, accountID, id, grace)
	if err != nil {
		return nil, s.fail(op, err)
	}
	s.change(ctx, "key.rotate", accountID, id, fmt.Sprintf("new_key=%s grace=%s", k.ID, grace),
		map[string]any{"key_id": id, "key": auditKey(was)}, map[string]any{"key_id": k.ID, "key": auditKey(k), "grace": grace.String()})
	old, err := s.credential(ctx, op, accountID, id, account.ModelKey)
	if err != nil {
		return nil, err
	}
	now := s.now()
	return &adminv1.RotateKeyResponse{Secret: secret, Key: keyToProto(k, now), OldKey: keyToProto(old, now)}, nil
}

// GetKey returns one key with what it has in flight and has spent.
func (s *Service) GetKey(ctx context.Context, req *adminv1.GetKeyRequest) (*adminv1.GetKeyResponse, error) {
	k, u, err := s.keyWithUsage(ctx, req.GetAccountId(), req.GetKeyId())
	if err != nil {
		return nil, s.fail("get key", err)
	}
	return &adminv1.GetKeyResponse{Key: k, Usage: u}, nil
}

func (s *Service) keyWithUsage(ctx context.Context, accountID, keyID string) (*adminv1.Key, *adminv1.KeyUsage, error) {
	k, err := s.keys.Key(ctx, accountID, keyID)
	if err != nil {
		return nil, nil, err
	}
	ks, err := s.keys.KeyStates(ctx, accountID, keyID)
	if err != nil {
		return nil, nil, err
	}
	return keyToProto(k, s.now()), keyUsageToProto(ks[0]), nil
}

// SetKeyLimits changes the limits the request sets and keeps the others,
// as SetLimits does for an account. A read-only token has no limits to set.
func (s *Service) SetKeyLimits(ctx context.Context, req *adminv1.SetKeyLimitsRequest) (*adminv1.SetKeyLimitsResponse, error) {
	accountID, keyID := req.GetAccountId(), req.GetKeyId()
	k, err := s.keys.Key(ctx, accountID, keyID)
	if err != nil {
		return nil, s.fail("set key limits", err)
	}
	if k.Kind != account.ModelKey {
		return nil, status.Error(codes.FailedPrecondition, "set key limits: a read-only token makes no requests to limit")
	}
	l := limitChanges{
		daily: req.DailyNanoUsd, rpm: req.Rpm, window: req.WindowMinutes,
		tpm: req.Tpm, concurrency: req.Concurrency, monthly: req.MonthlyNanoUsd, total: req.TotalNanoUsd,
		concurrencyWait: req.ConcurrencyWaitSeconds,
	}.apply(k.Limits)
	if err := checkLimits(l); err != nil {
		return nil, err
	}
	if err := s.keys.SetKeyLimits(ctx, accountID, keyID, l); err != nil {
		return nil, s.fail("set key limits", err)
	}
	s.change(ctx, "key.limits", accountID, keyID, limitsDetail(l), limitsState(k.Limits), limitsState(l))
	pk, u, err := s.keyWithUsage(ctx, accountID, keyID)
	if err != nil {
		return nil, s.fail("set key limits", err)
	}
	return &adminv1.SetKeyLimitsResponse{Key: pk, Usage: u}, nil
}
