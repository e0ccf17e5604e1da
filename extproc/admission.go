package extproc

// Request body and admission: the fields the operation reads, the checks against the model and the key, and the one store step that takes the hold.

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// MaxModelBytes bounds the model name a client may send. Real names are a few
// dozen bytes; the name reaches the ledger, logs and, for an unknown model,
// the error body.
const MaxModelBytes = 256

// requestBody reads the few fields admission needs, then admits the request
// in one atomic store step. The body is forwarded unchanged, or with the one
// edit the format asks for (see format.Request.Edit).
func (x *exchange) requestBody(ctx context.Context, body []byte) (*onward, *Refusal) {
	if x.upstream == nil {
		// Only if Envoy skipped the request headers: a misconfiguration.
		return nil, newRefusal(500, "application/json", []byte(`{"error":{"type":"api_error","message":"request body without request headers"}}`), 0)
	}
	if x.key.ID == "" {
		return nil, x.reject(format.InvalidRequest, "unexpected request body", 0)
	}
	if x.path.Kind == operation.Counted {
		return x.countedBody(ctx, body)
	}
	r := x.checkRequest(ctx, body)
	if r == nil {
		r = x.admit(ctx)
	}
	if r != nil {
		return nil, r
	}
	return x.forwardBody(), nil
}

// checkRequest parses the request body and checks it against the model
// and the key; a refusal is the answer to send. The checked request, its
// body and price are left in x.req, x.body and x.price, not returned: it returns before
// the admission so that its frame is gone while the admission's round
// trip runs, deepest on the stream's goroutine, whose stack (doubled past
// 8 KB) every open stream keeps, and a request returned by value would
// lie in its caller's frame under that round trip.
//
//go:noinline
func (x *exchange) checkRequest(ctx context.Context, body []byte) *Refusal {
	req, err := x.op.Format.ParseRequest(body, x.contentType)
	if err != nil {
		var fe *format.Error
		if errors.As(err, &fe) {
			return x.refuse(fe, 0)
		}
		return x.reject(format.InvalidRequest, "malformed request body", 0)
	}
	// The model name reaches Redis keys, the ledger and logs: bound it
	// before anything else reads it.
	if len(req.Model) > MaxModelBytes {
		return x.reject(format.InvalidRequest, "model: longer than "+strconv.Itoa(MaxModelBytes)+" bytes", 0)
	}
	if !usage.CleanName(req.Model) {
		return x.reject(format.InvalidRequest, "model: must be valid UTF-8 without control characters", 0)
	}
	price, ok := x.upstream.Prices.Lookup(req.Model)
	if !ok {
		return x.reject(format.ModelNotFound, "model "+strconv.Quote(req.Model)+" is not available on this gateway", 0)
	}
	if !price.Serves(x.op.Modes, x.op.Path()) {
		return x.reject(format.ModelNotFound, "model "+strconv.Quote(req.Model)+" is not available on "+x.op.Path()+" on this gateway", 0)
	}
	if req.Background && x.s.parking == nil {
		return x.reject(format.InvalidRequest, "background: background responses are not available through this gateway", 0)
	}
	if len(req.Refs) > 0 {
		if r := x.checkOwner(ctx, req.Refs...); r != nil {
			return r
		}
	}
	if len(x.key.Models) > 0 && !allowed(x.key.Models, req.Model, string(price.Name)) {
		return x.reject(format.PermissionDenied, "this key may not use model "+strconv.Quote(req.Model), 0)
	}
	if req.HasMaxTokens && price.MaxOutput > 0 && req.MaxTokens > price.MaxOutput {
		return x.reject(format.InvalidRequest, "max_tokens: "+strconv.FormatInt(req.MaxTokens, 10)+
			" is more than the model's maximum output of "+strconv.FormatInt(price.MaxOutput, 10)+" tokens", 0)
	}
	x.req, x.body, x.price = req, body, price
	return nil
}

// admit takes the request's hold and limits in one round trip to the
// store (waiting for a concurrency slot if the key allows), or refuses it;
// nil: admitted. It admits the request checkRequest left in x.
// Its steps are functions of their own so that only small frames lie
// under the round trip, the deepest point of the stream's goroutine: the
// goroutine keeps the stack that point needed for as long as its stream
// is open (TestStreamStackStaysSmall).
func (x *exchange) admit(ctx context.Context) *Refusal {
	x.requestID = x.s.newRequestID()
	x.s.attemptModels.put(x.envoyID, string(x.price.Name))
	ctx = x.startTrace(ctx)
	adm := x.admission()
	d, t0, err := x.decide(ctx, adm)
	if err != nil {
		return x.storeDown(err)
	}
	if d.Outcome != account.Admitted {
		return x.refused(d, adm.Hold, adm.Tokens)
	}
	x.sendOn(d, t0)
	return nil
}

// admission is what the store is asked for the request: its hold, token
// bound and the key's and its project's limits. It lives in the exchange
// (reused, envoy.go): the admitters copy what they keep.
func (x *exchange) admission() *account.Admission {
	x.bounds = x.op.RequestBounds(x.price, x.req, x.body)
	x.adm = account.Admission{
		RequestID: x.requestID, AccountID: x.key.AccountID, KeyID: x.key.ID,
		Priced: x.price.Name, Requested: usage.RequestedModel(x.req.Model), Hold: x.bounds.Hold(x.price),
		Tokens: x.bounds.Tokens(), Stream: x.req.Stream, StartedAt: x.started, KeyLimits: x.key.Limits,
		Transport: x.transport, ProjectID: x.key.ProjectID, ProjectLimits: x.key.ProjectLimits,
	}
	return &x.adm
}

// decide asks the store, waiting for a concurrency slot if the key allows;
// t0 is the start of the admission that answered.
func (x *exchange) decide(ctx context.Context, adm *account.Admission) (d account.Decision, t0 time.Time, err error) {
	admit := func(ctx context.Context) (account.Decision, error) {
		t0 = time.Now()
		d, err := x.s.admitter.Admit(ctx, adm)
		x.s.metrics.admitSeconds.Observe(time.Since(t0).Seconds())
		return d, err
	}
	actx, traced := x.traceAdmission(ctx)
	d, err = admit(actx)
	if err == nil && d.Outcome == account.ConcurrencyLimited {
		d, err = x.waitForSlot(actx, d, admit)
	}
	traced(d, err)
	return d, t0, err
}

// storeDown answers a request the store could not decide.
func (x *exchange) storeDown(err error) *Refusal {
	x.s.log.Error("admission failed", "err", err, "account", x.key.AccountID)
	x.s.metrics.storeErrors.WithLabelValues("admit").Inc()
	return x.reject(format.Unavailable, "the gateway's store is unavailable; retry shortly", time.Second)
}

// refused answers a request a limit refused, with the amounts behind it.
func (x *exchange) refused(d account.Decision, hold, tokens int64) *Refusal {
	x.s.metrics.limitRefusals.WithLabelValues(d.Level.String(), d.Outcome.String()).Inc()
	if x.s.onRefusal != nil {
		x.s.onRefusal(x.key.AccountID, x.key.ID, d.Level, d.Outcome)
	}
	if d.Outcome == account.TokenLimited && d.RetryAfter > maxRetryAfter {
		// The token window's newest bucket leaves it up to 65 s on
		// (5 s buckets): still a wait that helps, sent as the longest
		// the SDKs honour; a retry then meets at most a few seconds
		// more.
		d.RetryAfter = maxRetryAfter
	}
	if hold != unknownAmount {
		x.s.refusals.remember(x.key, d, x.s.now())
	}
	kind, msg := refusal(d, hold, tokens)
	if d.Level == account.ProjectLevel {
		kind, msg = refusalNaming(d, "for project "+strconv.Quote(x.key.ProjectName)+" ("+x.key.Project()+")", hold, tokens)
	}
	if !waitHelps(d) {
		return x.refuseFinal(kind, msg, d.RetryAfter)
	}
	return x.reject(kind, msg, d.RetryAfter)
}

// sendOn sends an admitted request on: its hold registered for renewal.
func (x *exchange) sendOn(d account.Decision, t0 time.Time) {
	x.admitted = true
	x.lease = d.Lease
	// The hold lives as long as the request: renewed until it settles.
	x.open = x.s.holds.Register(x.key.AccountID, x.requestID, t0)
	if d.Lease.ID != "" {
		x.open.FromLease()
	}
	if x.req.Stream {
		x.s.metrics.streams.Inc()
	}
}

// forwardBody answers an admitted request's body: the body edited, its
// attempt's timeout set and its key steered by what the body names.
func (x *exchange) forwardBody() *onward {
	r := x.editBody()
	x.withTimeout(r)
	x.steerByBody(r)
	return r
}

// waitForSlot lets a request refused only by a concurrency limit wait
// for a slot, as long as its key allows and this sidecar has room for one
// more waiter; it returns the decision that answers the request.
func (x *exchange) waitForSlot(ctx context.Context, refused account.Decision,
	admit func(context.Context) (account.Decision, error)) (account.Decision, error) {
	w := x.s.waiter.limit(time.Duration(x.key.Limits.ConcurrencyWaitSeconds) * time.Second)
	if w <= 0 {
		return refused, nil
	}
	// Envoy fails the request (504) when the processor has not answered a
	// message within its message timeout: extend it (once) to cover the
	// wait.
	if x.extend != nil {
		if err := x.extend(w + config.ExtProcMessageTimeout); err != nil {
			x.s.metrics.concurrencyWaits.WithLabelValues(string(waitCancelled)).Inc()
			return refused, nil
		}
	}
	start := time.Now()
	x.s.metrics.concurrencyWaiters.Inc()
	d, outcome, err := x.s.waiter.wait(ctx, waitParty{account: x.key.AccountID, key: x.key.ID}, w, refused, admit)
	x.s.metrics.concurrencyWaiters.Dec()
	x.s.metrics.concurrencyWaits.WithLabelValues(string(outcome)).Inc()
	if outcome != waitFull {
		x.s.metrics.concurrencyWaitSeconds.Observe(time.Since(start).Seconds())
	}
	return d, err
}

// withTimeout sets the request's per-attempt wait for its reply's headers
// (Upstream.firstByteBound) as Envoy's per-try timeout: a hung endpoint
// fails the attempt with 504 in a time scaled from what the request asked
// for, and the client's retry goes to the endpoint the health checks left.
func (x *exchange) withTimeout(r *onward) {
	d := x.upstream.firstByteBound(x.req.Stream, x.bounds.Input, x.bounds.Output)
	if d <= 0 || x.upstream.NoPerTryHeader {
		return
	}
	r.setHeader("x-envoy-upstream-rq-per-try-timeout-ms", strconv.FormatInt(max(d.Milliseconds(), 1), 10))
}

// editBody makes a request body edit. Envoy keeps the client's
// content-length when the body is buffered and refuses a body that
// disagrees with it, so the header is set to match; a body that came without
// one (chunked, or HTTP/2) is framed by Envoy as before.
func (x *exchange) editBody() *onward {
	if x.req.Edit.IsZero() {
		return &onward{}
	}
	r := &onward{body: x.sentBody(), edited: true}
	if x.hasLength {
		r.setHeader("content-length", strconv.Itoa(len(r.body)))
	}
	return r
}

// sentBody is the admitted request's body as the vendor is sent it: the
// client's, or with the one edit the format asks for.
func (x *exchange) sentBody() []byte {
	if x.req.Edit.IsZero() {
		return x.body
	}
	return x.req.Edit.Apply(x.body)
}

// allowed reports whether a key's model allow-list admits the model, by the
// name sent or the priced model it resolves to.
func allowed(list []string, model, canonical string) bool {
	for _, m := range list {
		if m == model || m == canonical {
			return true
		}
	}
	return false
}

// countedBody forwards a free request whose body may name a stored
// response (an input token count) once the response is found to be the
// account's.
func (x *exchange) countedBody(ctx context.Context, body []byte) (*onward, *Refusal) {
	var refs []format.Ref
	if x.op.References != nil {
		var err error
		if refs, err = x.op.References(body); err != nil {
			var fe *format.Error
			if errors.As(err, &fe) {
				return nil, x.refuse(fe, 0)
			}
			return nil, x.reject(format.InvalidRequest, "malformed request body", 0)
		}
	}
	if len(refs) > 0 {
		if r := x.checkOwner(ctx, refs...); r != nil {
			return nil, r
		}
	}
	r := &onward{}
	x.steerByBody(r) // to the key that created what it names
	return r, nil
}

// maxRetryAfter is the longest retry-after the gateway sends: the vendors'
// SDKs sleep whatever they are told, blocking their caller. A refusal that
// clears later than this is answered as one waiting cannot cure.
const maxRetryAfter = time.Minute

// waitHelps reports whether a refusal clears within maxRetryAfter (a
// request rate, concurrency or tokens-per-minute window); a budget that
// resets at midnight or on the 1st, the balance, a lifetime cap, a request
// larger than a limit allows and a request-rate window longer than
// maxRetryAfter do not, and a client told to sleep until then would hang.
func waitHelps(d account.Decision) bool {
	switch d.Outcome {
	case account.RateLimited, account.ConcurrencyLimited, account.TokenLimited:
		return d.RetryAfter > 0 && d.RetryAfter <= maxRetryAfter
	}
	return false
}

// refusal is the error kind and message of an admission the store refused:
// which limit, of which level (the account's or this key's), its amounts
// (what is used, what requests in flight hold, what this request would
// take: a client can tell a full budget from a request too large for what
// is left) and what the client can do. Limits that reset are 429; the
// balance and a key's lifetime cap, which do not, are 402.
func refusal(d account.Decision, hold, tokens int64) (format.ErrorKind, string) {
	return refusalNaming(d, "for this "+d.Level.String(), hold, tokens)
}

// refusalNaming is refusal with the words that name the refusing level (of):
// a project's refusal names the project.
func refusalNaming(d account.Decision, of string, hold, tokens int64) (format.ErrorKind, string) {
	retry := "retry after " + strconv.Itoa(retrySeconds(d.RetryAfter)) + "s"
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	spend := func(what string) string {
		s := what + " " + of + ": $" + pricing.FormatUSD(d.Used) + " of $" + pricing.FormatUSD(d.Limit) + " used, $" + pricing.FormatUSD(d.Held) +
			" held by requests in flight"
		if hold == unknownAmount {
			return s
		}
		return s + "; this request could cost up to $" + pricing.FormatUSD(hold)
	}
	switch d.Outcome {
	case account.RateLimited:
		return format.RateLimited, "request rate limit reached " + of + ": " + n(d.Used) + " of " + n(d.Limit) + " requests in its window; " + retry
	case account.ConcurrencyLimited:
		return format.RateLimited, "concurrent request limit reached " + of + ": " + n(d.Used) + " of " + n(d.Limit) + " requests in flight; " + retry + " or when one ends"
	case account.TokenLimited:
		bound := "this request may use up to " + n(tokens) + " tokens (input + max_tokens)"
		if tokens == unknownAmount {
			bound = "no tokens are left"
		}
		if d.RetryAfter == 0 {
			return format.RateLimited, bound + ", more than the tokens-per-minute limit " + of + " allows at all (" + n(d.Limit) + "); lower max_tokens or send less"
		}
		return format.RateLimited, "tokens-per-minute limit " + of + ": " + n(d.Used) + " of " + n(d.Limit) + " tokens used in the last 60 s, " +
			n(d.Held) + " held by requests in flight; " + bound + "; " + retry
	case account.DailyLimited:
		return format.DailyLimit, spend("daily spend limit") + "; it resets at 00:00 UTC"
	case account.MonthlyLimited:
		return format.DailyLimit, spend("monthly spend limit") + "; it resets on the 1st of the month at 00:00 UTC"
	case account.TotalLimited:
		return format.BillingExhausted, spend("lifetime spend limit") + "; the account's owner can raise it"
	}
	msg := "insufficient balance: the balance is $" + pricing.FormatUSD(d.Limit) + ", $" + pricing.FormatUSD(d.Held) + " of it held by requests in flight"
	if hold != unknownAmount {
		msg += "; this request could cost up to $" + pricing.FormatUSD(hold)
	}
	return format.BillingExhausted, msg + "; top up the account"
}
