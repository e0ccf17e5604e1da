package admin

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/audit"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// AuditStore is the audit trail: every change appends to it, and ListAudit
// pages through it.
type AuditStore interface {
	AppendAudit(ctx context.Context, e audit.Entry) error
	Audit(ctx context.Context, after string, limit int) ([]audit.Entry, string, error)
}

type originKey struct{}

// WithOrigin returns ctx naming addr as where an in-process call of the
// Service comes from (a console session's client address), for the audit
// trail.
func WithOrigin(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, originKey{}, addr)
}

// origin is where the call came from: WithOrigin's address, else the gRPC
// peer's (the caller cannot name it).
func origin(ctx context.Context) string {
	if a, ok := ctx.Value(originKey{}).(string); ok {
		return a
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}

// change records a mutation that has happened with the state it changed:
// before and after are marshalled to JSON objects (nil: none). They must
// never hold a secret; the store redacts anything shaped like one besides.
// A failure is logged, not returned (see audit).
func (s *Service) change(ctx context.Context, action, accountID, keyID, detail string, before, after any) {
	s.append(ctx, audit.Entry{
		Actor: actor(ctx), Origin: origin(ctx), Action: action, AccountID: accountID, KeyID: keyID, Detail: detail,
		Before: stateJSON(before), After: stateJSON(after),
	})
}

// Refused records a change that the actor's role did not allow: the
// consoles call it before answering 403. action names the change (the
// console's route). One actor's refusals of one action on one account are
// written once per refusalEvery (each sidecar's), the entry's detail
// counting those folded into it since the last: the trail is shared and
// bounded, and a person pressing a forbidden route without end must not
// push the other accounts' entries out of it.
func (s *Service) Refused(ctx context.Context, action, accountID, keyID string) {
	who := actor(ctx)
	folded, write := s.refusals.note(who+"\x00"+action+"\x00"+accountID, s.opts.Now())
	if !write {
		return
	}
	detail := ""
	if folded > 0 {
		detail = "and " + strconv.Itoa(folded) + " more refused since the last entry"
	}
	s.append(ctx, audit.Entry{
		Actor: who, Origin: origin(ctx), Action: action, AccountID: accountID, KeyID: keyID, Detail: detail,
		Outcome: audit.OutcomeRefused,
	})
}

// refusalEvery is how often one actor's refusals of one action on one
// account reach the audit trail.
const refusalEvery = time.Minute

// maxFolds bounds the refusals remembered; when full, those older than
// refusalEvery are forgotten (or all, if none is).
const maxFolds = 10_000

// refusalFolds remembers when each actor's refusal of an action was last
// written and how many have been folded since.
type refusalFolds struct {
	mu sync.Mutex
	m  map[string]refusalFold
}

type refusalFold struct {
	written time.Time
	folded  int
}

// note counts a refusal of k at now: write is whether it is written, and
// folded how many refusals of k were not written since the last that was.
func (f *refusalFolds) note(k string, now time.Time) (folded int, write bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.m[k]
	if ok && now.Sub(r.written) < refusalEvery {
		r.folded++
		f.m[k] = r
		return 0, false
	}
	if f.m == nil {
		f.m = map[string]refusalFold{}
	} else if len(f.m) >= maxFolds {
		f.forget(now)
	}
	f.m[k] = refusalFold{written: now}
	return r.folded, true
}

func (f *refusalFolds) forget(now time.Time) {
	for k, r := range f.m {
		if now.Sub(r.written) >= refusalEvery {
			delete(f.m, k)
		}
	}
	if len(f.m) >= maxFolds {
		clear(f.m)
	}
}

func (s *Service) append(ctx context.Context, e audit.Entry) {
	if err := s.trail.AppendAudit(ctx, e); err != nil {
		s.opts.Logger.Error("admin: audit entry lost", "action", e.Action, "account", e.AccountID, "key", e.KeyID, "err", err)
	}
}

func stateJSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

// limitsState is an account's or key's limits as the audit trail shows
// them.
func limitsState(l account.Limits) map[string]any {
	return map[string]any{"limits": l}
}

// auditKey is a credential as the audit trail shows it: never its secret
// nor its prefix.
func auditKey(k account.Key) map[string]any {
	m := map[string]any{"kind": string(k.Kind), "label": k.Label, "revoked": !k.RevokedAt.IsZero()}
	if !k.ExpiresAt.IsZero() {
		m["expires_at"] = k.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if len(k.Models) > 0 {
		m["models"] = k.Models
	}
	return m
}

// ListAudit pages through the audit trail.
func (s *Service) ListAudit(ctx context.Context, req *adminv1.ListAuditRequest) (*adminv1.ListAuditResponse, error) {
	if err := checkPage(req.GetPageSize(), req.GetPageToken()); err != nil {
		return nil, err
	}
	entries, next, err := s.trail.Audit(ctx, req.GetPageToken(), int(req.GetPageSize()))
	if err != nil {
		return nil, s.fail("list audit", err)
	}
	resp := &adminv1.ListAuditResponse{NextPageToken: next, Entries: make([]*adminv1.AuditEntry, len(entries))}
	for i, e := range entries {
		resp.Entries[i] = auditToProto(e)
	}
	return resp, nil
}
