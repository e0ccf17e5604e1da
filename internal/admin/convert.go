package admin

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/audit"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// timestamp converts t, leaving the zero time (never, not yet) unset.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func limitsToProto(l account.Limits) *adminv1.Limits {
	return &adminv1.Limits{
		DailyNanoUsd: l.DailyNanoUSD, Rpm: l.RPM, WindowMinutes: l.WindowMinutes,
		Tpm: l.TPM, Concurrency: l.Concurrency, MonthlyNanoUsd: l.MonthlyNanoUSD, TotalNanoUsd: l.TotalNanoUSD,
		ConcurrencyWaitSeconds: l.ConcurrencyWaitSeconds,
	}
}

func keyUsageToProto(k ledger.KeyState) *adminv1.KeyUsage {
	return &adminv1.KeyUsage{
		InFlight: k.InFlight, HeldNanoUsd: k.Held, MinuteTokens: k.MinuteTokens,
		DailyUsedNanoUsd: k.Day.Cost, MonthlyUsedNanoUsd: k.Month.Cost, TotalUsedNanoUsd: k.Total.Cost,
		DailyRequests: k.Day.Requests, MonthlyRequests: k.Month.Requests, TotalRequests: k.Total.Requests,
	}
}

func accountToProto(a account.Account, balance int64) *adminv1.Account {
	return &adminv1.Account{
		Id:             a.ID,
		Name:           a.Name,
		CreateTime:     timestamp(a.CreatedAt),
		BalanceNanoUsd: balance,
		Limits:         limitsToProto(a.Limits),
		Suspended:      a.Suspended,

		BalanceAlertNanoUsd: a.BalanceAlert,
	}
}

func kindToProto(k account.KeyKind) adminv1.KeyKind {
	switch k {
	case account.ModelKey:
		return adminv1.KeyKind_KEY_KIND_MODEL
	case account.ReadOnlyToken:
		return adminv1.KeyKind_KEY_KIND_READ_ONLY
	}
	return adminv1.KeyKind_KEY_KIND_UNSPECIFIED
}

// keyState is the credential's state at now, by the same rule the request
// path applies (credential.Problem).
func keyState(k account.Key, now time.Time) adminv1.KeyState {
	switch {
	case !k.RevokedAt.IsZero() && !now.Before(k.RevokedAt):
		return adminv1.KeyState_KEY_STATE_REVOKED
	case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
		return adminv1.KeyState_KEY_STATE_EXPIRED
	}
	return adminv1.KeyState_KEY_STATE_ACTIVE
}

// keyToProto describes k as of now. account.Key holds no secret, so neither can
// the result.
func keyToProto(k account.Key, now time.Time) *adminv1.Key {
	return &adminv1.Key{
		Id:           k.ID,
		AccountId:    k.AccountID,
		Kind:         kindToProto(k.Kind),
		Label:        k.Label,
		Prefix:       k.Prefix,
		CreateTime:   timestamp(k.CreatedAt),
		ExpireTime:   timestamp(k.ExpiresAt),
		LastUsedTime: timestamp(k.LastUsedAt),
		RevokeTime:   timestamp(k.RevokedAt),
		Models:       k.Models,
		State:        keyState(k, now),
		Limits:       limitsToProto(k.Limits),
		ProjectId:    keyProject(k),
	}
}

// keyProject is a key's project as the API names it: "default" for the
// default project; "" for a read-only token, which belongs to none.
func keyProject(k account.Key) string {
	if k.Kind != account.ModelKey {
		return ""
	}
	return k.Project()
}

func projectToProto(p account.Project) *adminv1.Project {
	return &adminv1.Project{Id: p.ID, AccountId: p.AccountID, Name: p.Name, CreateTime: timestamp(p.CreatedAt), Limits: limitsToProto(p.Limits)}
}

func ledgerToProto(e ledger.Entry) *adminv1.LedgerEntry {
	quantities, prices := map[string]int64{}, map[string]int64{}
	for _, k := range usage.Kinds {
		quantities[k.Name] = k.Of(e.Usage)
		if k.Priced() {
			prices[k.Name] = k.Of(e.Rates)
		}
	}
	return &adminv1.LedgerEntry{
		Id:               e.ID,
		RequestId:        e.RequestID,
		KeyId:            e.KeyID,
		Model:            string(e.Priced),
		InputTokens:      e.Usage.Input,
		OutputTokens:     e.Usage.Output,
		CacheWriteTokens: e.Usage.CacheWrite5m + e.Usage.CacheWrite1h,
		CacheReadTokens:  e.Usage.CacheRead,
		CostNanoUsd:      e.Cost,
		Estimated:        e.Estimated,
		Status:           int32(e.Status),
		Endpoint:         e.Endpoint,
		Stream:           e.Stream,
		StartTime:        timestamp(e.StartedAt),
		EndTime:          timestamp(e.EndedAt),

		ModelRequested:          string(e.Requested),
		ModelReported:           string(e.Reported),
		Usage:                   quantities,
		PricesNanoUsdPerMillion: prices,
		ServiceTier:             e.ServiceTier,
		LongContextThreshold:    e.LongContext,
		FallbackPrice:           e.Fallback,
		Interrupted:             e.Interrupted,
		AccountId:               e.AccountID,
		Reconciled:              e.Reconciled,
		Capped:                  e.Capped,
		TierUnknown:             e.TierUnknown,
		RegionalProcessing:      e.Region,
		RegionalUpliftPpm:       e.Uplift,
		VendorKey:               e.VendorKey,
		Transport:               e.Transport,
		ProjectId:               e.ProjectID,
	}
}

func auditToProto(e audit.Entry) *adminv1.AuditEntry {
	return &adminv1.AuditEntry{
		Id:        e.ID,
		Actor:     e.Actor,
		Action:    e.Action,
		AccountId: e.AccountID,
		KeyId:     e.KeyID,
		Detail:    e.Detail,
		Time:      timestamp(e.At),
		Origin:    e.Origin,
		Before:    e.Before,
		After:     e.After,
		Outcome:   e.Outcome,
	}
}
