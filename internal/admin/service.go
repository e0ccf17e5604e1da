// Package admin implements the gateway's admin API (gateway.admin.v1.Admin)
// over the store: accounts, top-ups, limits, credentials, the ledger and the
// audit trail.
//
// Service holds the operations and may be called in process (the operator
// console does); NewServer puts it behind a gRPC server
// that demands the admin token on every call. Every mutation is recorded in
// the store's audit stream, never with a secret in it.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

// Store is what New needs: the roles below, each declared next to the
// handlers that use it (internal/store implements them all). A handler
// calls its role's interface, so what it depends on is visible, and a
// test's fake implements only the role it stands in for.
type Store interface {
	AccountStore
	KeyStore
	LedgerStore
	AuditStore
	ProjectStore
}

// DefaultGrace is how long a rotated key keeps working when the request does
// not say.
const DefaultGrace = 24 * time.Hour

// Limits on request fields, so that nothing unbounded reaches the store.
const (
	maxNameLen   = 200
	maxModels    = 100
	maxIdemKey   = 200
	maxPageToken = 64
)

// Options configure a Service.
type Options struct {
	// DefaultLimits are given to accounts created without limits.
	DefaultLimits account.Limits
	// Now is the clock for key states and expiries; default time.Now.
	Now func() time.Time
	// Logger receives store failures; default slog.Default().
	Logger *slog.Logger
	// Alerts, when set, hears of suspensions and resumptions (the webhook
	// events account.suspended and account.resumed).
	Alerts interface{ Publish(alerts.Event) }
	// Reconciler, when set, serves Reconcile (nil: no upstream has an
	// admin key).
	Reconciler interface {
		Run(ctx context.Context, from, to time.Time, width vendorusage.Width) (reconcile.Report, error)
	}
}

// Service implements adminv1.AdminServer over a store.
type Service struct {
	adminv1.UnimplementedAdminServer
	accounts AccountStore
	keys     KeyStore
	ledger   LedgerStore
	trail    AuditStore
	projects ProjectStore
	opts     Options
	// refusals folds an actor's repeated refusals (Refused).
	refusals refusalFolds
}

// New returns the admin service over st.
func New(st Store, o Options) *Service {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Service{accounts: st, keys: st, ledger: st, trail: st, projects: st, opts: o}
}

func (s *Service) now() time.Time { return s.opts.Now().UTC() }

// audit records a mutation that has happened. A failure is logged, not
// returned: the change is made and the caller must learn its result (a new
// key's secret cannot be shown again).
func (s *Service) audit(ctx context.Context, action, accountID, keyID, detail string) {
	s.change(ctx, action, accountID, keyID, detail, nil, nil)
}

// fail turns a store error into a gRPC status. Unexpected errors are logged
// and reported without detail; a not-found error names what was missing
// when it is known (see missing).
func (s *Service) fail(op string, err error) error {
	var m *missing
	switch {
	case errors.As(err, &m):
		return status.Errorf(codes.NotFound, "%s: %s not found", op, m.what)
	case errors.Is(err, store.ErrNotFound):
		return status.Errorf(codes.NotFound, "%s: not found", op)
	case errors.Is(err, store.ErrRevoked):
		return status.Errorf(codes.FailedPrecondition, "%s: key is revoked", op)
	case errors.Is(err, store.ErrIdempotencyConflict):
		return status.Errorf(codes.AlreadyExists, "%s: idempotency key already used with a different amount", op)
	case errors.Is(err, store.ErrTooLarge):
		return status.Errorf(codes.InvalidArgument, "%s: %v", op, err)
	case errors.Is(err, store.ErrProjectHasKeys), errors.Is(err, store.ErrDefaultProject):
		return status.Errorf(codes.FailedPrecondition, "%s: %v", op, errors.Unwrap(err))
	}
	s.opts.Logger.Error("admin: store failed", "op", op, "err", err)
	return status.Errorf(codes.Internal, "%s: internal error", op)
}

// failAccount is fail for a call about one account, where a store's
// not-found error means that account.
func (s *Service) failAccount(op, accountID string, err error) error {
	if errors.Is(err, store.ErrNotFound) && !errors.As(err, new(*missing)) {
		err = &missing{what: "account " + strconv.Quote(accountID)}
	}
	return s.fail(op, err)
}

// missing is a not-found error that says what was not found.
type missing struct{ what string }

func (m *missing) Error() string        { return m.what + " not found" }
func (m *missing) Is(target error) bool { return target == store.ErrNotFound }

func invalid(format string, args ...any) error {
	return status.Errorf(codes.InvalidArgument, format, args...)
}

func checkLimits(l account.Limits) error {
	if err := store.CheckLimits(l); err != nil {
		return invalid("limits: %v", err)
	}
	return nil
}

func limitsDetail(l account.Limits) string {
	d := fmt.Sprintf("daily_nano_usd=%d rpm=%d window_minutes=%d tpm=%d concurrency=%d monthly_nano_usd=%d",
		l.DailyNanoUSD, l.RPM, l.WindowMinutes, l.TPM, l.Concurrency, l.MonthlyNanoUSD)
	if l.TotalNanoUSD != 0 {
		d += fmt.Sprintf(" total_nano_usd=%d", l.TotalNanoUSD)
	}
	if l.ConcurrencyWaitSeconds != 0 {
		d += fmt.Sprintf(" concurrency_wait_seconds=%d", l.ConcurrencyWaitSeconds)
	}
	return d
}

// limitChanges are the optional limit fields of a request; nil keeps a
// limit as it is.
type limitChanges struct {
	daily, rpm, window, tpm, concurrency, monthly, total *int64
	concurrencyWait                                      *int64
}

// apply returns l with the given changes.
func (c limitChanges) apply(l account.Limits) account.Limits {
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&l.DailyNanoUSD, c.daily)
	set(&l.RPM, c.rpm)
	set(&l.WindowMinutes, c.window)
	set(&l.TPM, c.tpm)
	set(&l.Concurrency, c.concurrency)
	set(&l.MonthlyNanoUSD, c.monthly)
	set(&l.TotalNanoUSD, c.total)
	set(&l.ConcurrencyWaitSeconds, c.concurrencyWait)
	return l
}

// checkName refuses a name people type (of an account, a project, a
// model a key may use) that is blank, longer than maxNameLen, or one the
// audit trail, the consoles, the CSV export or PostgreSQL would take
// badly: invalid UTF-8 or a control character (NUL, a newline, a tab).
// Every such string is checked here, at the door, before it is stored.
func checkName(what, s string) error {
	if strings.TrimSpace(s) == "" || len(s) > maxNameLen {
		return invalid("%s must be 1 to %d bytes", what, maxNameLen)
	}
	return clean(what, s)
}

// clean is checkName's check of the characters alone (a label may be
// empty).
func clean(what, s string) error {
	if !usage.CleanName(s) {
		return invalid("%s must be UTF-8 without control characters", what)
	}
	return nil
}

// AccountStore is what the account handlers read and change of accounts:
// their settings, balances, usage and holds.
type AccountStore interface {
	Account(ctx context.Context, id string) (account.Account, error)
	ListAccounts(ctx context.Context) ([]account.Account, error)
	CreateAccount(ctx context.Context, name string, balance int64, limits account.Limits) (account.Account, error)
	SetLimits(ctx context.Context, id string, limits account.Limits) error
	SetSuspended(ctx context.Context, id string, suspended bool) error
	SetBalanceAlert(ctx context.Context, id string, threshold int64) error
	TopUp(ctx context.Context, id string, amount int64, idempotencyKey string) (balance int64, applied bool, err error)
	Balance(ctx context.Context, id string) (int64, error)
	Usage(ctx context.Context, accountID string, p ledger.Period) (ledger.UsageReport, error)
	OpenHolds(ctx context.Context, accountID string) (count int64, amount int64, err error)
}

// CreateAccount opens an account.
func (s *Service) CreateAccount(ctx context.Context, req *adminv1.CreateAccountRequest) (*adminv1.CreateAccountResponse, error) {
	name := strings.TrimSpace(req.GetName())
	if err := checkName("name", name); err != nil {
		return nil, err
	}
	if req.GetBalanceNanoUsd() < 0 {
		return nil, invalid("balance must not be negative")
	}
	limits := limitChanges{
		daily: req.DailyNanoUsd, rpm: req.Rpm, window: req.WindowMinutes,
		tpm: req.Tpm, concurrency: req.Concurrency, monthly: req.MonthlyNanoUsd,
	}.apply(s.opts.DefaultLimits)
	if err := checkLimits(limits); err != nil {
		return nil, err
	}
	a, err := s.accounts.CreateAccount(ctx, name, req.GetBalanceNanoUsd(), limits)
	if err != nil {
		return nil, s.fail("create account", err)
	}
	s.change(ctx, "account.create", a.ID, "",
		fmt.Sprintf("name=%q balance_nano_usd=%d %s", name, req.GetBalanceNanoUsd(), limitsDetail(limits)),
		nil, map[string]any{"name": name, "balance_nano_usd": req.GetBalanceNanoUsd(), "limits": limits})
	return &adminv1.CreateAccountResponse{Account: accountToProto(a, req.GetBalanceNanoUsd())}, nil
}

// GetAccount returns an account with its balance, today's spend and holds.
func (s *Service) GetAccount(ctx context.Context, req *adminv1.GetAccountRequest) (*adminv1.GetAccountResponse, error) {
	id := req.GetAccountId()
	a, err := s.accounts.Account(ctx, id)
	if err != nil {
		return nil, s.failAccount("get account", id, err)
	}
	u, err := s.accounts.Usage(ctx, id, ledger.Day)
	if err != nil {
		return nil, s.failAccount("get account", id, err)
	}
	holds, held, err := s.accounts.OpenHolds(ctx, id)
	if err != nil {
		return nil, s.failAccount("get account", id, err)
	}
	return &adminv1.GetAccountResponse{
		Account:            accountToProto(a, u.Balance),
		DailyUsedNanoUsd:   u.DailyUsed,
		OpenHolds:          holds,
		HeldNanoUsd:        held,
		MonthlyUsedNanoUsd: u.MonthUsed,
		MinuteTokens:       u.MinuteTokens,
	}, nil
}

// ListAccounts returns every account with its balance. One round trip per
// account: the admin API is not a hot path.
func (s *Service) ListAccounts(ctx context.Context, _ *adminv1.ListAccountsRequest) (*adminv1.ListAccountsResponse, error) {
	accounts, err := s.accounts.ListAccounts(ctx)
	if err != nil {
		return nil, s.fail("list accounts", err)
	}
	resp := &adminv1.ListAccountsResponse{Accounts: make([]*adminv1.Account, 0, len(accounts))}
	for _, a := range accounts {
		b, err := s.accounts.Balance(ctx, a.ID)
		if errors.Is(err, store.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, s.fail("list accounts", err)
		}
		resp.Accounts = append(resp.Accounts, accountToProto(a, b))
	}
	return resp, nil
}

// TopUp credits an account once per idempotency key.
func (s *Service) TopUp(ctx context.Context, req *adminv1.TopUpRequest) (*adminv1.TopUpResponse, error) {
	key := req.GetIdempotencyKey()
	if key == "" || len(key) > maxIdemKey {
		return nil, invalid("idempotency key is required (at most %d bytes)", maxIdemKey)
	}
	if req.GetAmountNanoUsd() <= 0 {
		return nil, invalid("amount must be positive")
	}
	balance, applied, err := s.accounts.TopUp(ctx, req.GetAccountId(), req.GetAmountNanoUsd(), key)
	if err != nil {
		return nil, s.failAccount("top up", req.GetAccountId(), err)
	}
	if applied {
		s.change(ctx, "account.topup", req.GetAccountId(), "",
			fmt.Sprintf("amount_nano_usd=%d idempotency_key=%q balance_nano_usd=%d", req.GetAmountNanoUsd(), key, balance),
			map[string]any{"balance_nano_usd": balance - req.GetAmountNanoUsd()}, map[string]any{"balance_nano_usd": balance})
	}
	return &adminv1.TopUpResponse{BalanceNanoUsd: balance, Applied: applied}, nil
}

// SetLimits changes the limits the request sets and keeps the others. The
// read and the write are two steps: two admins changing different limits of
// one account at the same instant may lose one change.
func (s *Service) SetLimits(ctx context.Context, req *adminv1.SetLimitsRequest) (*adminv1.SetLimitsResponse, error) {
	id := req.GetAccountId()
	a, err := s.accounts.Account(ctx, id)
	if err != nil {
		return nil, s.failAccount("set limits", id, err)
	}
	l := limitChanges{
		daily: req.DailyNanoUsd, rpm: req.Rpm, window: req.WindowMinutes,
		tpm: req.Tpm, concurrency: req.Concurrency, monthly: req.MonthlyNanoUsd,
	}.apply(a.Limits)
	if err := checkLimits(l); err != nil {
		return nil, err
	}
	if err := s.accounts.SetLimits(ctx, id, l); err != nil {
		return nil, s.failAccount("set limits", id, err)
	}
	s.change(ctx, "account.limits", id, "", limitsDetail(l), limitsState(a.Limits), limitsState(l))
	a.Limits = l
	b, err := s.accounts.Balance(ctx, id)
	if err != nil {
		return nil, s.failAccount("set limits", id, err)
	}
	return &adminv1.SetLimitsResponse{Account: accountToProto(a, b)}, nil
}

// SuspendAccount suspends the account's model requests.
func (s *Service) SuspendAccount(ctx context.Context, req *adminv1.SuspendAccountRequest) (*adminv1.SuspendAccountResponse, error) {
	a, err := s.setSuspended(ctx, req.GetAccountId(), true, req.GetReason())
	if err != nil {
		return nil, err
	}
	return &adminv1.SuspendAccountResponse{Account: a}, nil
}

// ResumeAccount ends a suspension.
func (s *Service) ResumeAccount(ctx context.Context, req *adminv1.ResumeAccountRequest) (*adminv1.ResumeAccountResponse, error) {
	a, err := s.setSuspended(ctx, req.GetAccountId(), false, req.GetReason())
	if err != nil {
		return nil, err
	}
	return &adminv1.ResumeAccountResponse{Account: a}, nil
}

func (s *Service) setSuspended(ctx context.Context, id string, suspended bool, reason string) (*adminv1.Account, error) {
	op, action := "resume account", "account.resume"
	if suspended {
		op, action = "suspend account", "account.suspend"
	}
	if len(reason) > 256 {
		return nil, status.Error(codes.InvalidArgument, "reason: at most 256 bytes")
	}
	was, err := s.accounts.Account(ctx, id)
	if err != nil {
		return nil, s.failAccount(op, id, err)
	}
	if err := s.accounts.SetSuspended(ctx, id, suspended); err != nil {
		return nil, s.failAccount(op, id, err)
	}
	detail := ""
	if reason != "" {
		detail = "reason=" + strconv.Quote(reason)
	}
	s.change(ctx, action, id, "", detail, map[string]any{"suspended": was.Suspended}, map[string]any{"suspended": suspended})
	if s.opts.Alerts != nil {
		typ := alerts.AccountResumed
		if suspended {
			typ = alerts.AccountSuspended
		}
		s.opts.Alerts.Publish(alerts.Event{Type: typ, AccountID: id, Data: map[string]any{"reason": reason, "actor": actor(ctx)}})
	}
	a, err := s.accounts.Account(ctx, id)
	if err != nil {
		return nil, s.failAccount(op, id, err)
	}
	b, err := s.accounts.Balance(ctx, id)
	if err != nil {
		return nil, s.failAccount(op, id, err)
	}
	return accountToProto(a, b), nil
}

// LedgerStore is what the ledger handlers read and change of an account's
// ledger and its export mark.
type LedgerStore interface {
	Ledger(ctx context.Context, accountID, after string, limit int) ([]ledger.Entry, string, error)
	ExportLedger(ctx context.Context, accountID, after string, limit int) (entries []ledger.Entry, mark string, err error)
	CommitExport(ctx context.Context, accountID, last string) (mark string, trimmed int64, err error)
}

// ListLedger pages through an account's ledger.
func (s *Service) ListLedger(ctx context.Context, req *adminv1.ListLedgerRequest) (*adminv1.ListLedgerResponse, error) {
	if err := checkPage(req.GetPageSize(), req.GetPageToken()); err != nil {
		return nil, err
	}
	entries, next, err := s.ledger.Ledger(ctx, req.GetAccountId(), req.GetPageToken(), int(req.GetPageSize()))
	if err != nil {
		return nil, s.failAccount("list ledger", req.GetAccountId(), err)
	}
	resp := &adminv1.ListLedgerResponse{NextPageToken: next, Entries: make([]*adminv1.LedgerEntry, len(entries))}
	for i, e := range entries {
		resp.Entries[i] = ledgerToProto(e)
	}
	return resp, nil
}

// ExportLedger reads a page of an account's ledger for export, after the
// given entry or after the committed export mark.
func (s *Service) ExportLedger(ctx context.Context, req *adminv1.ExportLedgerRequest) (*adminv1.ExportLedgerResponse, error) {
	if err := checkPage(req.GetPageSize(), req.GetAfter()); err != nil {
		return nil, err
	}
	entries, mark, err := s.ledger.ExportLedger(ctx, req.GetAccountId(), req.GetAfter(), int(req.GetPageSize()))
	if err != nil {
		return nil, s.failAccount("export ledger", req.GetAccountId(), err)
	}
	resp := &adminv1.ExportLedgerResponse{Mark: mark, Entries: make([]*adminv1.LedgerEntry, len(entries))}
	for i, e := range entries {
		resp.Entries[i] = ledgerToProto(e)
	}
	return resp, nil
}

// CommitLedgerExport moves an account's export mark forward and trims
// exported entries older than the retention.
func (s *Service) CommitLedgerExport(ctx context.Context, req *adminv1.CommitLedgerExportRequest) (*adminv1.CommitLedgerExportResponse, error) {
	if req.GetLastId() == "" {
		return nil, invalid("last_id is required")
	}
	if err := checkPage(0, req.GetLastId()); err != nil {
		return nil, invalid("malformed last_id")
	}
	if _, err := s.accounts.Account(ctx, req.GetAccountId()); err != nil {
		return nil, s.failAccount("commit ledger export", req.GetAccountId(), err)
	}
	mark, trimmed, err := s.ledger.CommitExport(ctx, req.GetAccountId(), req.GetLastId())
	if errors.Is(err, store.ErrNotFound) {
		// The account exists (checked above): the entry does not, in it.
		err = &missing{what: "ledger entry " + strconv.Quote(req.GetLastId()) + " of account " + strconv.Quote(req.GetAccountId())}
	}
	if err != nil {
		return nil, s.failAccount("commit ledger export", req.GetAccountId(), err)
	}
	if trimmed > 0 {
		s.audit(ctx, "ledger.trim", req.GetAccountId(), "", fmt.Sprintf("exported through %s; %d entries past retention trimmed", mark, trimmed))
	}
	return &adminv1.CommitLedgerExportResponse{Mark: mark, Trimmed: trimmed}, nil
}

// checkPage validates paging fields. Page tokens are stream entry ids
// ("MS-SEQ"); anything else would reach Redis as a malformed range.
func checkPage(size int32, token string) error {
	if size < 0 {
		return invalid("page size must not be negative")
	}
	if token == "" {
		return nil
	}
	ms, seq, ok := strings.Cut(token, "-")
	if len(token) > maxPageToken || !ok || !isUint(ms) || !isUint(seq) {
		return invalid("malformed page token")
	}
	return nil
}

func isUint(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// SetBalanceAlert sets the account's balance alert threshold.
func (s *Service) SetBalanceAlert(ctx context.Context, req *adminv1.SetBalanceAlertRequest) (*adminv1.SetBalanceAlertResponse, error) {
	id := req.GetAccountId()
	if req.GetThresholdNanoUsd() < 0 {
		return nil, invalid("threshold must not be negative")
	}
	was, err := s.accounts.Account(ctx, id)
	if err != nil {
		return nil, s.fail("set balance alert", err)
	}
	if err := s.accounts.SetBalanceAlert(ctx, id, req.GetThresholdNanoUsd()); err != nil {
		return nil, s.fail("set balance alert", err)
	}
	s.change(ctx, "account.balance_alert", id, "", fmt.Sprintf("threshold_nano_usd=%d", req.GetThresholdNanoUsd()),
		map[string]any{"threshold_nano_usd": was.BalanceAlert}, map[string]any{"threshold_nano_usd": req.GetThresholdNanoUsd()})
	a, err := s.accounts.Account(ctx, id)
	if err != nil {
		return nil, s.fail("set balance alert", err)
	}
	b, err := s.accounts.Balance(ctx, id)
	if err != nil {
		return nil, s.fail("set balance alert", err)
	}
	return &adminv1.SetBalanceAlertResponse{Account: accountToProto(a, b)}, nil
}
