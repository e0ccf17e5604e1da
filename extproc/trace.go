package extproc

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/tracing"
	"github.com/modelgateway/gateway/internal/usage"
)

// A metered request's spans, in the trace Envoy started (its context comes
// with the ext_proc stream): the request span, named as the GenAI semantic
// conventions name a model call ("chat claude-sonnet-4-5") and carrying
// their attributes, with two children, admission and settlement. Only ids,
// model names and figures are recorded: never a body, a prompt, a reply, a
// key or a token.
type exchangeTrace struct {
	span trace.Span // nil until a metered request's body has been read
	ctx  context.Context
}

// Attribute keys: the GenAI semantic conventions', and the gateway's own.
const (
	attrOperation     = "gen_ai.operation.name"
	attrProvider      = "gen_ai.provider.name"
	attrRequestModel  = "gen_ai.request.model"
	attrResponseModel = "gen_ai.response.model"
	attrInputTokens   = "gen_ai.usage.input_tokens"
	attrOutputTokens  = "gen_ai.usage.output_tokens"
	attrCacheRead     = "gen_ai.usage.cache_read.input_tokens"
	attrCacheCreation = "gen_ai.usage.cache_creation.input_tokens"
	attrStream        = "gen_ai.request.stream"
	attrStatus        = "http.response.status_code"
	attrCost          = "gateway.cost_nano_usd"
	attrAccount       = "gateway.account_id"
	attrKey           = "gateway.key_id"
	attrRequestID     = "gateway.request_id"
	attrUpstream      = "gateway.upstream"
	attrEndpoint      = "gateway.endpoint"
	attrPricedModel   = "gateway.model"
	attrEstimated     = "gateway.estimated"
	attrAdmission     = "gateway.admission"
	attrSettlement    = "gateway.settlement"
	attrUsagePrefix   = "gateway.usage."
)

// traceContext joins the trace named by the stream's metadata.
func (s *Server) traceContext(ctx context.Context) context.Context {
	if s.tracer == nil {
		return ctx
	}
	return tracing.FromIncomingGRPC(ctx)
}

// startTrace starts the request span of a metered request whose body has
// been read, from when its headers arrived; it returns the context of the
// request's calls.
func (x *exchange) startTrace(ctx context.Context) context.Context {
	if x.s.tracer == nil {
		return ctx
	}
	// A trace Envoy did not sample is not recorded here either (the
	// sampler follows its parent): skip building a span nobody records,
	// as most requests are at a low sampling rate.
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.IsRemote() && !sc.IsSampled() {
		return ctx
	}
	names := x.op.GenAI
	ctx, x.trace.span = x.s.tracer.Start(ctx, names.Operation+" "+x.req.Model,
		trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(x.started),
		trace.WithAttributes(
			attribute.String(attrOperation, names.Operation),
			attribute.String(attrProvider, names.Provider),
			attribute.String(attrRequestModel, x.req.Model),
			attribute.Bool(attrStream, x.req.Stream),
			attribute.String(attrPricedModel, string(x.price.Name)),
			attribute.String(attrAccount, x.key.AccountID),
			attribute.String(attrKey, x.key.ID),
			attribute.String(attrRequestID, x.requestID),
			attribute.String(attrUpstream, x.upstream.Name),
		))
	x.trace.ctx = ctx
	return ctx
}

// traceAdmission starts the admission span; end records its outcome.
func (x *exchange) traceAdmission(ctx context.Context) (context.Context, func(account.Decision, error)) {
	if x.trace.span == nil {
		return ctx, func(account.Decision, error) {}
	}
	ctx, span := x.s.tracer.Start(ctx, "admission")
	return ctx, func(d account.Decision, err error) {
		if err != nil {
			span.SetStatus(codes.Error, "store unavailable")
		} else {
			span.SetAttributes(attribute.String(attrAdmission, d.Outcome.String()))
			x.trace.span.SetAttributes(attribute.String(attrAdmission, d.Outcome.String()))
		}
		span.End()
	}
}

// traceSettlement ends the request span with the settlement's figures and
// starts the settlement span; end records whether the store took it.
func (x *exchange) traceSettlement(st account.Settlement) func(ledger.SettleResult) {
	span := x.trace.span
	if span == nil {
		return func(ledger.SettleResult) {}
	}
	x.trace.span = nil
	u := st.Usage
	attrs := []attribute.KeyValue{
		attribute.Int64(attrInputTokens, u.Prompt()),
		attribute.Int64(attrOutputTokens, u.Output+u.AudioOutput),
		attribute.Int64(attrCacheRead, u.CacheRead),
		attribute.Int64(attrCacheCreation, u.CacheWrite5m+u.CacheWrite1h),
		attribute.Int64(attrCost, st.Cost),
		attribute.Int(attrStatus, st.Status),
		attribute.String(attrEndpoint, st.Endpoint),
		attribute.Bool(attrEstimated, st.Estimated),
	}
	if st.Reported != "" {
		attrs = append(attrs, attribute.String(attrResponseModel, string(st.Reported)))
	}
	for _, k := range usage.Kinds {
		if v := k.Of(u); v != 0 {
			attrs = append(attrs, attribute.Int64(attrUsagePrefix+k.Name, v))
		}
	}
	span.SetAttributes(attrs...)
	if st.Status >= 500 {
		span.SetStatus(codes.Error, "status "+strconv.Itoa(st.Status))
	}
	_, settle := x.s.tracer.Start(x.trace.ctx, "settlement")
	span.End(trace.WithTimestamp(st.EndedAt))
	return func(r ledger.SettleResult) {
		switch {
		case r.Err != nil:
			settle.SetStatus(codes.Error, "settlement failed")
		case r.Spooled:
			settle.SetAttributes(attribute.String(attrSettlement, "spooled"))
		case r.Applied:
			settle.SetAttributes(attribute.String(attrSettlement, "applied"))
		default:
			settle.SetAttributes(attribute.String(attrSettlement, "duplicate"))
		}
		settle.End()
	}
}

// endTrace ends the request span of a request not settled here: refused at
// admission, or a background response parked to be settled when it ends.
func (x *exchange) endTrace() {
	if x.trace.span != nil {
		if x.admitted {
			x.trace.span.SetAttributes(attribute.String(attrSettlement, "parked"))
		} else {
			x.trace.span.SetStatus(codes.Error, "not admitted")
		}
		x.trace.span.End(trace.WithTimestamp(time.Now()))
		x.trace.span = nil
	}
}
