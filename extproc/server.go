// Package extproc is the gateway's Envoy external processor: it checks
// credentials, admits requests against the account's limits and balance,
// meters the vendor's reply and settles its cost, one gRPC stream per HTTP
// request.
package extproc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

// An Admitter admits a metered request: one atomic store step, on the
// request's path (the store implements it; never the spool: a request
// that cannot be admitted is refused).
type Admitter interface {
	Admit(ctx context.Context, a *account.Admission) (account.Decision, error)
}

// A Settler applies settlements in batches, off the request's path (the
// spool implements it, keeping what the store cannot take).
type Settler interface {
	SettleBatch(ctx context.Context, sts []account.Settlement) []ledger.SettleResult
}

// A SettlementKeeper keeps settlements outside the process: KeepSettlement
// returns the entry's slot (never 0), ok false when it has no room.
type SettlementKeeper interface {
	KeepSettlement(st account.Settlement) (slot int32, ok bool)
	Drop(slot int32)
}

// Options configure a Server.
type Options struct {
	Upstreams []*Upstream
	Keys      auth.Authenticator
	Admitter  Admitter
	Settler   Settler
	Metrics   *Metrics
	Logger    *slog.Logger
	// RequestLogger writes the request log lines, one per settled request;
	// default Logger. FlushRequestLog, when set, is called after each
	// settlement batch's lines, so RequestLogger may buffer them until
	// then (one write per batch, not per line).
	RequestLogger   *slog.Logger
	FlushRequestLog func()
	// Outbox, when set, keeps each queued settlement outside the process
	// until the store or the spool has it (internal/outbox). It must be
	// the one the Admitter's leases keep their records in: a leased
	// request's record entry is dropped there once its settlement's is
	// kept.
	Outbox SettlementKeeper
	Now    func() time.Time
	// SettleTimeout bounds one settlement; it runs after the client's stream
	// context may already be gone.
	SettleTimeout time.Duration
	// MaxRequestBytes refuses a declared content-length above it before any
	// of the body is buffered (Envoy enforces the same limit on bodies
	// without a declared length).
	MaxRequestBytes int64
	// Holds renews the holds of running requests; nil renews none (their
	// holds then live one lease).
	Holds *holds.Renewer
	// OnRefusal, when set, hears of each admission a limit or the balance
	// refused (the alerts watcher); it must not block.
	OnRefusal func(accountID, keyID string, level account.Level, outcome account.Outcome)
	// OnVendorKeyRefused, when set, hears of each pooled vendor key the
	// vendor refused (401, 402, 403) when it is taken out.
	OnVendorKeyRefused func(upstream, key string, status int)
	// OnVendorKeyLimited, when set, hears of each pooled vendor key that
	// starts cooling down, with the end of its cool-down.
	OnVendorKeyLimited func(upstream, key string, status int, until time.Time)
	// OnModelMismatch, when set, hears of each reply settled at the price
	// of the dearer model it names (priced) instead of the one requested;
	// it must not block.
	OnModelMismatch func(upstream, accountID, keyID string, requested, priced usage.PricedModel)
	// Owners records who created each stored response; nil refuses every
	// request naming one.
	Owners Owners
	// Parking keeps background responses until they end; nil refuses
	// background requests.
	Parking Parking
	// BackgroundPoll is how often a parked background response is looked
	// at; default DefaultBackgroundPoll.
	BackgroundPoll time.Duration
	// Tracer records each metered request's spans in the trace Envoy
	// started; nil records none.
	Tracer trace.Tracer
	// ConcurrencyWaitBound is the longest a request over a concurrency
	// limit waits for a slot, whatever its key allows; 0: none waits
	// (config.Config.ConcurrencyWaitBound).
	ConcurrencyWaitBound time.Duration
	// ConcurrencyWaiters bounds the requests waiting for a slot at once;
	// default config.DefaultConcurrencyWaiters.
	ConcurrencyWaiters int
	// ConcurrencyWaitersShare bounds the requests of one key, and of one
	// account, among them; default a tenth of ConcurrencyWaiters.
	ConcurrencyWaitersShare int
	// InFlight reads the requests in flight again before a request's
	// headers are refused on a concurrency limit its key's standing saw
	// full; nil refuses none there (precheck.go).
	InFlight InFlightReader
	// OnAbandoned, when set, is given each attempt Envoy abandoned (its
	// upstream log, abandoned.go), to record; it must not block.
	OnAbandoned func(account.AbandonedAttempt)
}

// Server implements Envoy's ExternalProcessor service.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	upstreams []*Upstream
	keys      auth.Authenticator
	admitter  Admitter
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
	settleT   time.Duration
	maxBody   int64
	holds     *holds.Renewer
	tracer    trace.Tracer // nil: no tracing
	waiter    *slotWaiter
	// refusals remembers the refusals that hold whatever the next request
	// (refusals.go).
	refusals *refusalMemory
	inFlight InFlightReader // Options.InFlight
	attemptLog

	hooks
	vendorSide
	requestIDs

	settler *settler
	// active counts exchanges until they have settled, so that shutdown
	// can wait for the settlements of streams it cut.
	active sync.WaitGroup
}

// attemptLog names the account and the priced model of each recent
// request, for Envoy's logs of its attempts.
type attemptLog struct {
	// attempts names the account of each recent pooled request, for
	// Envoy's log of its refused attempts.
	attempts byRequest
	// attemptModels names the priced model of each recent request, for
	// Envoy's log of its abandoned attempts.
	attemptModels byRequest
}

// hooks are who hears of what the processor decides (Options.On...); each
// must not block.
type hooks struct {
	onRefusal func(accountID, keyID string, level account.Level, outcome account.Outcome)
	// onKeyRefused: Options.OnVendorKeyRefused.
	onKeyRefused func(upstream, key string, status int)
	onKeyLimited func(upstream, key string, status int, until time.Time)
	// onDearer: Options.OnModelMismatch.
	onDearer    func(upstream, accountID, keyID string, requested, priced usage.PricedModel)
	onAbandoned func(account.AbandonedAttempt) // Options.OnAbandoned
}

// vendorSide keeps the state of the objects the vendor keeps: who owns
// each, the background responses parked until they end, the binds queued
// beside streams.
type vendorSide struct {
	owners  Owners
	parking Parking
	bgPoll  time.Duration
	binds   *binder
}

// requestIDs are a random per-process prefix and a counter: unique across
// sidecars and restarts, and cheap.
type requestIDs struct {
	idPrefix string
	seq      atomic.Uint64
}

// Wait blocks until every exchange has ended and settled (or spooled), or
// ctx ends; it reports whether all did. Call it after the gRPC server has
// stopped, before the store and the spool close.
func (s *Server) Wait(ctx context.Context) bool {
	done := make(chan struct{})
	go func() {
		s.active.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// NewServer returns a processor.
func NewServer(o Options) *Server {
	s := &Server{
		upstreams: o.Upstreams, keys: o.Keys, admitter: o.Admitter, metrics: o.Metrics,
		log: o.Logger, now: o.Now, settleT: o.SettleTimeout, maxBody: o.MaxRequestBytes, holds: o.Holds,
		hooks:      hooks{onRefusal: o.OnRefusal, onKeyRefused: o.OnVendorKeyRefused, onKeyLimited: o.OnVendorKeyLimited, onDearer: o.OnModelMismatch, onAbandoned: o.OnAbandoned},
		vendorSide: vendorSide{owners: o.Owners, parking: o.Parking, bgPoll: o.BackgroundPoll},
		tracer:     o.Tracer, refusals: newRefusalMemory(), inFlight: o.InFlight,
	}
	if s.bgPoll <= 0 {
		s.bgPoll = DefaultBackgroundPoll
	}
	waiters := o.ConcurrencyWaiters
	if waiters <= 0 {
		waiters = config.DefaultConcurrencyWaiters
	}
	s.waiter = newSlotWaiter(o.ConcurrencyWaitBound, waiters, o.ConcurrencyWaitersShare)
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.settleT == 0 {
		s.settleT = 5 * time.Second
	}
	if s.metrics == nil {
		s.metrics = NewMetrics(nil)
	}
	for _, u := range s.upstreams {
		if u.Pool == nil {
			s.metrics.InitVendorKeys(u.Name, []string{u.defaultKey})
			continue
		}
		var names []string
		for _, k := range u.Pool.Keys() {
			names = append(names, k.Name)
		}
		s.metrics.InitVendorKeys(u.Name, names)
		u.Pool.SetOnChange(s.keyChanged)
	}
	reqLog := o.RequestLogger
	if reqLog == nil {
		reqLog = s.log
	}
	s.settler = newSettler(o.Settler, s.settleT, reqLog, o.FlushRequestLog)
	s.settler.outbox = o.Outbox
	s.binds = newBinder(s)
	var b [6]byte
	rand.Read(b[:])
	s.idPrefix = "req_" + hex.EncodeToString(b[:]) + "_"
	return s
}

// WaitSettled returns once every reply of the account that this processor
// has released has been settled (applied to the store or spooled), or when
// ctx ends. A usage read calls it so that it sees the replies before it.
func (s *Server) WaitSettled(ctx context.Context, accountID string) error {
	if accountID == allKey {
		return nil
	}
	return s.settler.wait(ctx, accountID)
}

// Flush returns once every settlement queued so far has been applied or
// spooled, or when ctx ends; shutdown calls it after the last stream.
func (s *Server) Flush(ctx context.Context) error {
	return s.settler.wait(ctx, allKey)
}

// PendingSettlements is the number of settlements queued and not yet
// applied or spooled.
func (s *Server) PendingSettlements() int { return s.settler.pendingTotal() }

func (s *Server) newRequestID() string {
	return s.idPrefix + strconv.FormatUint(s.seq.Add(1), 36)
}

func (s *Server) upstream(path string) *Upstream {
	for _, r := range s.upstreams {
		if strings.HasPrefix(path, r.prefix) {
			return r
		}
	}
	return nil
}

// noUpstream answers a path under no upstream's prefix: a route of
// Envoy's that sends the processor what no upstream serves (a prefix
// other than /NAME/, say). No vendor's format applies; the message names
// what is served.
func (s *Server) noUpstream(path string) *Refusal {
	prefixes := make([]string, len(s.upstreams))
	for i, u := range s.upstreams {
		prefixes[i] = u.prefix
	}
	msg := "no such path: " + strconv.Quote(path) + " is under no upstream of this gateway; each upstream is reached under /NAME/ (" +
		strings.Join(prefixes, ", ") + "), NAME as gateway.yaml names it"
	body, _ := json.Marshal(map[string]any{"error": map[string]string{"type": "not_found", "message": msg}})
	return newRefusal(404, "application/json", body, 0)
}
