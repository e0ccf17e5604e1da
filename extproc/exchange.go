package extproc

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// internalHeaderPrefix marks headers that only the gateway may set; a
// client's copies are removed.
const internalHeaderPrefix = "x-gateway-"

// MaxModelBytes bounds the model name a client may send. Real names are a few
// dozen bytes; the name reaches the ledger, logs and, for an unknown model,
// the error body.
const MaxModelBytes = 256

// exchange is the processor's state for one HTTP request.
type exchange struct {
	s *Server
	// send sends a message on the stream outside the one answer to each
	// message (the wait for a concurrency slot extends Envoy's message
	// timeout with one); nil sends none.
	send     func(*extprocv3.ProcessingResponse) error
	upstream *Upstream
	op       *operation.Operation // the operation of a metered or counted route
	route    *operation.Route
	key      store.Key

	requestID string
	started   time.Time
	req       format.Request
	body      []byte
	price     *pricing.Model // looked up once: a reload does not change a request's prices
	admitted  bool
	settled   bool
	// replyDone: the reply is complete as far as billing goes (its last
	// chunk metered, or a status that is not charged); the request is
	// settled once the answer to this message has been sent (afterSend).
	replyDone bool

	status    int    // upstream response status; 0 until the first response body chunk
	endpoint  string // "primary" or "reserve", from Envoy's endpoint metadata
	meter     format.Meter
	rewriter  format.Rewriter  // the meter, when it also rewrites the reply
	stored    format.Stored // the meter, when the reply names a stored response
	bound     bool             // the stored response's id is bound to the account (or being bound)
	binding   chan struct{}    // closed when a bind started mid-stream has landed
	parked    *store.Parked    // the background response a retrieval or cancellation reads
	bodyBytes int64            // response body bytes from the vendor
	open      *holds.Open      // the hold's renewal while the request runs

	bounds      operation.Bounds // the request's bounds, fixed at admission
	hasLength   bool             // the client sent content-length
	contentType string           // the request's, for a multipart body's boundary
	trace     exchangeTrace
}

func (x *exchange) handle(ctx context.Context, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	switch r := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return x.requestHeaders(ctx, r.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return x.requestBody(ctx, r.RequestBody)
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return x.responseHeaders(r.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return x.responseBody(ctx, r.ResponseBody, req.GetAttributes())
	case *extprocv3.ProcessingRequest_RequestTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}}
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}
	}
	return nil
}

// requestHeaders authenticates the client, classifies the path and swaps the
// client's credential for the vendor's.
func (x *exchange) requestHeaders(ctx context.Context, h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	x.started = x.s.now()
	hv := readHeaders(h.GetHeaders())
	path, _, _ := strings.Cut(hv.path, "?") // query strings are never read for credentials
	x.upstream = x.s.upstream(path)
	if x.upstream == nil {
		return immediate(404, "application/json", []byte(`{"error":{"type":"not_found","message":"no such path"}}`), 0)
	}
	key, err := x.s.keys.Authenticate(ctx, hv.credentials, x.started, modelPolicy)
	if err != nil {
		return x.refuseAuth(err)
	}
	x.key = key

	sub := path[len(x.upstream.prefix)-1:]
	mutation := x.credentialMutation(hv)
	op, route, id := operation.Match(x.upstream.Operations, hv.method, sub)
	// Query strings go to the vendor only as far as its API defines them.
	if _, query, ok := strings.Cut(hv.path, "?"); ok {
		p := path
		if q := x.upstream.forwardQuery(route, sub, query); q != "" {
			p += "?" + q
		}
		if p != hv.path {
			mutation.SetHeaders = append(mutation.SetHeaders, setHeader(":path", p))
		}
	}
	if hv.method == "GET" && (sub == "/v1/models" || strings.HasPrefix(sub, "/v1/models/")) {
		if lister, ok := x.upstream.Format.(format.ModelLister); ok {
			return x.models(lister, sub, hv.path)
		}
	}
	if hv.upgrade != "" {
		// The Responses API's WebSocket transport: a connection the
		// processor cannot meter event by event. Clients fall back to HTTP.
		return x.reject(format.InvalidRequest, "the WebSocket transport is not available through this gateway; use HTTP (POST "+sub+")", 0)
	}
	switch {
	case route != nil && (route.Kind == operation.Metered || route.Kind == operation.Counted):
		x.op, x.route = op, route
		if h.GetEndOfStream() {
			return x.reject(format.InvalidRequest, "request body is required", 0)
		}
		x.hasLength, x.contentType = hv.contentLength != "", hv.contentType
		if n, err := strconv.ParseInt(hv.contentLength, 10, 64); err == nil && x.s.maxBody > 0 && n > x.s.maxBody {
			return x.reject(format.TooLarge, "request body of "+hv.contentLength+" bytes is larger than the "+
				strconv.FormatInt(x.s.maxBody, 10)+" bytes this gateway accepts", 0)
		}
		mode := MeteredMode
		if route.Kind == operation.Counted {
			mode = countedMode
		}
		// Envoy's default skips the response (so that its own replies to
		// malformed requests are never held); a metered request needs it.
		return &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mutation}},
			},
			ModeOverride: mode,
		}
	case route != nil && route.Kind == operation.Owned:
		// A stored response: only its creator may read, cancel or delete
		// it; anyone else is told it does not exist, and the vendor never
		// hears of the request. Never billed again.
		if resp := x.checkOwner(ctx, id); resp != nil {
			return resp
		}
		// A background response not yet settled: its retrieval or
		// cancellation may show its end, which settles it.
		// Its retrieval (the poll path) or a POST on it (cancellation).
		reads := hv.method == "GET" && route.Path == op.Poll || hv.method == "POST" && op.Poll != ""
		if reads && x.watchParked(ctx, op, id, hv.method == "GET" && streamQuery(hv.path)) {
			return &extprocv3.ProcessingResponse{
				Response: &extprocv3.ProcessingResponse_RequestHeaders{
					RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mutation}},
				},
				ModeOverride: parkedMode,
			}
		}
		return x.forwardFree(mutation)
	case x.upstream.isFree(hv.method + " " + sub):
		// Free read-only paths: forward as they are, observe nothing more.
		return x.forwardFree(mutation)
	default:
		return x.reject(format.NotFound, "no such path: "+hv.method+" "+sub, 0)
	}
}

// streamQuery reports whether a path's query asks for a stream
// (stream=true).
func streamQuery(path string) bool {
	_, q, _ := strings.Cut(path, "?")
	for _, kv := range strings.Split(q, "&") {
		if kv == "stream=true" {
			return true
		}
	}
	return false
}

// models answers the model list, or one model, itself: the models served
// and priced on the upstream that the key may use, in the vendor's format.
func (x *exchange) models(lister format.ModelLister, sub, rawPath string) *extprocv3.ProcessingResponse {
	if id, ok := strings.CutPrefix(sub, "/v1/models/"); ok {
		m, found := x.upstream.Prices.Lookup(id)
		if !found || len(x.upstream.Serving(m)) == 0 || len(x.key.Models) > 0 && !allowed(x.key.Models, id, string(m.Name)) {
			return x.reject(format.NotFound, "The model "+strconv.Quote(id)+" does not exist or you do not have access to it.", 0)
		}
		return immediate(200, "application/json", lister.Model(id), 0)
	}
	var ids []string
	for _, m := range x.upstream.Prices.Models() {
		if len(x.upstream.Serving(m)) > 0 && (len(x.key.Models) == 0 || allowed(x.key.Models, string(m.Name), string(m.Name))) {
			ids = append(ids, string(m.Name))
		}
	}
	_, rawQuery, _ := strings.Cut(rawPath, "?")
	query, _ := url.ParseQuery(rawQuery)
	return immediate(200, "application/json", lister.ModelList(ids, query), 0)
}

// forwardFree forwards a request with the credential swapped and observes
// nothing more of it.
func (x *exchange) forwardFree(mutation *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mutation}},
		},
		ModeOverride: &filterv3.ProcessingMode{
			RequestBodyMode:    filterv3.ProcessingMode_NONE,
			ResponseHeaderMode: filterv3.ProcessingMode_SKIP,
			ResponseBodyMode:   filterv3.ProcessingMode_NONE,
		},
	}
}

// checkOwner answers 404, in the vendor's words, unless the key's account
// created response id; nil lets the request go on.
func (x *exchange) checkOwner(ctx context.Context, id string) *extprocv3.ProcessingResponse {
	if x.s.owners == nil {
		return x.reject(format.NotFound, "stored responses are not available through this gateway", 0)
	}
	owner, err := x.s.owners.ResponseOwner(ctx, id)
	if err != nil {
		x.s.log.Error("response owner lookup failed", "err", err)
		x.s.metrics.storeErrors.WithLabelValues("owner").Inc()
		return x.reject(format.Unavailable, "the gateway's store is unavailable; retry shortly", time.Second)
	}
	if owner == "" || owner != x.key.AccountID {
		return x.reject(format.NotFound, "Response with id "+strconv.Quote(id)+" not found.", 0)
	}
	return nil
}

// countedMode is a free request whose body the processor reads (a token
// count naming a stored response) and whose reply it does not observe.
var countedMode = &filterv3.ProcessingMode{
	RequestHeaderMode:   filterv3.ProcessingMode_SEND,
	RequestBodyMode:     filterv3.ProcessingMode_BUFFERED,
	RequestTrailerMode:  filterv3.ProcessingMode_SKIP,
	ResponseHeaderMode:  filterv3.ProcessingMode_SKIP,
	ResponseBodyMode:    filterv3.ProcessingMode_NONE,
	ResponseTrailerMode: filterv3.ProcessingMode_SKIP,
}

// MeteredMode is the processing mode of a metered request: the body
// buffered for admission, the reply's body streamed to the meter. No
// response headers message: the status and the serving endpoint arrive as
// attributes with the first body chunk (response_attributes in the
// bootstrap).
var MeteredMode = &filterv3.ProcessingMode{
	RequestHeaderMode:   filterv3.ProcessingMode_SEND,
	RequestBodyMode:     filterv3.ProcessingMode_BUFFERED,
	RequestTrailerMode:  filterv3.ProcessingMode_SKIP,
	ResponseHeaderMode:  filterv3.ProcessingMode_SKIP,
	ResponseBodyMode:    filterv3.ProcessingMode_STREAMED,
	ResponseTrailerMode: filterv3.ProcessingMode_SKIP,
}

// modelPolicy: model routes take model keys of accounts in good standing.
var modelPolicy = auth.Policy{Kinds: []store.KeyKind{store.ModelKey}}

// refuseAuth answers an authentication failure in the upstream's format.
func (x *exchange) refuseAuth(err error) *extprocv3.ProcessingResponse {
	var ae *auth.Error
	if !errors.As(err, &ae) {
		return x.reject(format.Unauthenticated, "invalid API key", 0)
	}
	switch ae.Reason {
	case auth.WrongKind:
		return x.reject(format.PermissionDenied, "read-only tokens (ro_) can only read GET /v1/usage; use a cr_ key for model requests", 0)
	case auth.Suspended:
		return x.reject(format.PermissionDenied, ae.Message, 0)
	case auth.Unavailable:
		x.s.log.Error("key lookup failed", "err", ae.Err)
		x.s.metrics.storeErrors.WithLabelValues("lookup").Inc()
		return x.reject(format.Unavailable, ae.Message, time.Second)
	}
	return x.reject(format.Unauthenticated, ae.Message, 0)
}

// credentialMutation removes the client's credential, any internal header it
// sent and accept-encoding (the meter must see plain bytes). The vendor's
// credential is never known here: Envoy adds it on the way to the vendor.
func (x *exchange) credentialMutation(hv headerValues) *extprocv3.HeaderMutation {
	remove := []string{"x-api-key", "authorization", "accept-encoding"}
	remove = append(remove, hv.internal...)
	return &extprocv3.HeaderMutation{RemoveHeaders: remove}
}

// requestBody reads the few fields admission needs, then admits the request
// in one atomic store step. The body is forwarded unchanged, or with the one
// edit the format asks for (see format.Request.Edit).
func (x *exchange) requestBody(ctx context.Context, b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if x.upstream == nil {
		// Only if Envoy skipped the request headers: a misconfiguration.
		return immediate(500, "application/json", []byte(`{"error":{"type":"api_error","message":"request body without request headers"}}`), 0)
	}
	if x.key.ID == "" {
		return x.reject(format.InvalidRequest, "unexpected request body", 0)
	}
	body := b.GetBody()
	if x.route.Kind == operation.Counted {
		return x.countedBody(ctx, body)
	}
	req, price, resp := x.checkRequest(ctx, body)
	if resp != nil {
		return resp
	}
	return x.admit(ctx, body, req, price)
}

// checkRequest parses the request body and checks it against the model
// and the key; a refusal is the answer to send. It returns before the
// admission so that its frame is gone while the admission's round trip
// runs, deepest on the stream's goroutine, whose stack (doubled past
// 8 KB) every open stream keeps.
//
//go:noinline
func (x *exchange) checkRequest(ctx context.Context, body []byte) (format.Request, *pricing.Model, *extprocv3.ProcessingResponse) {
	var none format.Request
	req, err := x.op.Format.ParseRequest(body, x.contentType)
	if err != nil {
		var fe *format.Error
		if errors.As(err, &fe) {
			return none, nil, x.refuse(fe, 0)
		}
		return none, nil, x.reject(format.InvalidRequest, "malformed request body", 0)
	}
	// The model name reaches Redis keys, the ledger and logs: bound it
	// before anything else reads it.
	if len(req.Model) > MaxModelBytes {
		return none, nil, x.reject(format.InvalidRequest, "model: longer than "+strconv.Itoa(MaxModelBytes)+" bytes", 0)
	}
	price, ok := x.upstream.Prices.Lookup(req.Model)
	if !ok {
		return none, nil, x.reject(format.ModelNotFound, "model "+strconv.Quote(req.Model)+" is not available on this gateway", 0)
	}
	if !price.Serves(x.op.Modes, x.op.Path()) {
		return none, nil, x.reject(format.ModelNotFound, "model "+strconv.Quote(req.Model)+" is not available on "+x.op.Path()+" on this gateway", 0)
	}
	if req.Background && x.s.parking == nil {
		return none, nil, x.reject(format.InvalidRequest, "background: background responses are not available through this gateway", 0)
	}
	for _, id := range req.Refs {
		if resp := x.checkOwner(ctx, id); resp != nil {
			return none, nil, resp
		}
	}
	if len(x.key.Models) > 0 && !allowed(x.key.Models, req.Model, string(price.Name)) {
		return none, nil, x.reject(format.PermissionDenied, "this key may not use model "+strconv.Quote(req.Model), 0)
	}
	if req.HasMaxTokens && price.MaxOutput > 0 && req.MaxTokens > price.MaxOutput {
		return none, nil, x.reject(format.InvalidRequest, "max_tokens: "+strconv.FormatInt(req.MaxTokens, 10)+
			" is more than the model's maximum output of "+strconv.FormatInt(price.MaxOutput, 10)+" tokens", 0)
	}
	return req, price, nil
}

// admit takes the request's hold and limits in one round trip to the
// store (waiting for a concurrency slot if the key allows), or refuses it.
func (x *exchange) admit(ctx context.Context, body []byte, req format.Request, price *pricing.Model) *extprocv3.ProcessingResponse {
	x.req, x.body, x.price = req, body, price
	x.requestID = x.s.newRequestID()
	ctx = x.startTrace(ctx)

	x.bounds = x.op.RequestBounds(price, req, body)
	hold, tokens := x.bounds.Hold(price), x.bounds.Tokens()
	var t0 time.Time // the start of the admission that took the hold
	adm := store.Admission{
		RequestID: x.requestID, AccountID: x.key.AccountID, KeyID: x.key.ID,
		Priced: price.Name, Requested: usage.RequestedModel(req.Model), Hold: hold,
		Tokens: tokens, Stream: req.Stream, StartedAt: x.started, KeyLimits: x.key.Limits,
	}
	admit := func(ctx context.Context) (store.Decision, error) {
		t0 = time.Now()
		d, err := x.s.accounts.Admit(ctx, adm)
		x.s.metrics.admitSeconds.Observe(time.Since(t0).Seconds())
		return d, err
	}
	actx, traced := x.traceAdmission(ctx)
	d, err := admit(actx)
	if err == nil && d.Outcome == store.ConcurrencyLimited {
		d, err = x.waitForSlot(actx, d, admit)
	}
	traced(d, err)
	if err != nil {
		x.s.log.Error("admission failed", "err", err, "account", x.key.AccountID)
		x.s.metrics.storeErrors.WithLabelValues("admit").Inc()
		return x.reject(format.Unavailable, "the gateway's store is unavailable; retry shortly", time.Second)
	}
	if d.Outcome != store.Admitted {
		x.s.metrics.limitRefusals.WithLabelValues(d.Level.String(), d.Outcome.String()).Inc()
		if x.s.onRefusal != nil {
			x.s.onRefusal(x.key.AccountID, x.key.ID, d.Level, d.Outcome)
		}
		kind, msg := refusal(d, hold, tokens)
		return x.reject(kind, msg, d.RetryAfter)
	}
	x.admitted = true
	// The hold lives as long as the request: renewed until it settles.
	x.open = x.s.holds.Register(x.key.AccountID, x.requestID, t0)
	if x.req.Stream {
		x.s.metrics.streams.Inc()
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: x.withTimeout(x.editBody(body, req.Edit))},
	}}
}

// waitForSlot lets a request refused only by a concurrency limit wait
// for a slot, as long as its key allows and this sidecar has room for one
// more waiter; it returns the decision that answers the request.
func (x *exchange) waitForSlot(ctx context.Context, refused store.Decision,
	admit func(context.Context) (store.Decision, error)) (store.Decision, error) {
	w := x.s.waiter.limit(time.Duration(x.key.Limits.ConcurrencyWaitSeconds) * time.Second)
	if w <= 0 {
		return refused, nil
	}
	// Envoy fails the request (504) when the processor has not answered a
	// message within its message timeout: extend it (once) to cover the
	// wait.
	if x.send != nil {
		ext := &extprocv3.ProcessingResponse{OverrideMessageTimeout: durationpb.New(w + config.ExtProcMessageTimeout)}
		if err := x.send(ext); err != nil {
			x.s.metrics.concurrencyWaits.WithLabelValues(string(waitCancelled)).Inc()
			return refused, nil
		}
	}
	start := time.Now()
	x.s.metrics.concurrencyWaiters.Inc()
	d, outcome, err := x.s.waiter.wait(ctx, w, refused, admit)
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
func (x *exchange) withTimeout(r *extprocv3.CommonResponse) *extprocv3.CommonResponse {
	d := x.upstream.firstByteBound(x.req.Stream, x.bounds.Input, x.bounds.Output)
	if d <= 0 {
		return r
	}
	if r.HeaderMutation == nil {
		r.HeaderMutation = &extprocv3.HeaderMutation{}
	}
	r.HeaderMutation.SetHeaders = append(r.HeaderMutation.SetHeaders,
		setHeader("x-envoy-upstream-rq-per-try-timeout-ms", strconv.FormatInt(max(d.Milliseconds(), 1), 10)))
	return r
}

// editBody makes a request body edit. Envoy keeps the client's
// content-length when the body is buffered and refuses a body that
// disagrees with it, so the header is set to match; a body that came without
// one (chunked, or HTTP/2) is framed by Envoy as before.
func (x *exchange) editBody(body []byte, e format.Edit) *extprocv3.CommonResponse {
	if e.IsZero() {
		return &extprocv3.CommonResponse{}
	}
	up := e.Apply(body)
	r := &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: up}}}
	if x.hasLength {
		r.HeaderMutation = &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{
			setHeader("content-length", strconv.Itoa(len(up))),
		}}
	}
	return r
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

// responseHeaders starts metering a 2xx reply; any other reply ends the
// request at no charge.
func (x *exchange) responseHeaders(h *extprocv3.HttpHeaders) *extprocv3.ProcessingResponse {
	hv := readHeaders(h.GetHeaders())
	x.status, _ = strconv.Atoi(hv.status)
	x.endpoint = hv.endpoint
	resp := &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}},
	}}
	if !x.admitted {
		return resp
	}
	if !x.startReply(hv.contentType) {
		resp.ModeOverride = &filterv3.ProcessingMode{ResponseBodyMode: filterv3.ProcessingMode_NONE}
		return resp
	}
	x.replyDone = h.GetEndOfStream()
	return resp
}

// startReply begins the reply of x.status: a 2xx reply is metered from here
// on and reports true; any other ends the request at no charge.
func (x *exchange) startReply(contentType string) bool {
	if x.status < 200 || x.status > 299 {
		x.replyDone = true
		return false
	}
	x.meter = x.op.Format.NewMeter(x.req, x.body, contentType)
	x.stored, _ = x.meter.(format.Stored)
	x.rewriter, _ = x.meter.(format.Rewriter)
	x.open.Checkpoint(store.Checkpoint{Status: x.status, Endpoint: x.endpoint})
	return true
}

// responseBody feeds the meter and lets the chunk through at once: Envoy
// holds each chunk until the processor answers. A rewriting meter may
// replace the chunk; only a chunk it changed carries a mutation.
func (x *exchange) responseBody(ctx context.Context, b *extprocv3.HttpBody, attrs map[string]*structpb.Struct) *extprocv3.ProcessingResponse {
	if x.parked != nil {
		return x.parkedBody(b, attrs)
	}
	if x.status == 0 && x.admitted && !x.settled {
		x.startFromAttributes(attrs)
	}
	common := &extprocv3.CommonResponse{}
	// The renewer's clock, not the injectable one: leases are real time.
	if x.admitted && !x.settled && x.open.Expired(time.Now()) {
		return x.leaseLost(b)
	}
	if x.meter != nil && !x.settled {
		x.bodyBytes += int64(len(b.GetBody()))
		if x.rewriter != nil {
			if out, changed := x.rewriter.Rewrite(b.GetBody(), b.GetEndOfStream()); changed {
				common.BodyMutation = bodyMutation(out)
			}
		} else {
			x.meter.Write(b.GetBody())
		}
		if x.stored != nil && !x.bound && (x.req.Stream || b.GetEndOfStream()) {
			x.bind(ctx, b.GetEndOfStream())
		}
		if b.GetEndOfStream() {
			x.replyDone = true
			if x.binding != nil {
				<-x.binding // the last chunk waits for the bind (it has long landed)
			}
			if x.req.Background {
				// Parked before the reply naming the response reaches the
				// client, so that its first read finds it parked and
				// settles it.
				x.settle(true)
			}
		} else if x.open.WantCheckpoint() {
			// Once per renewal interval, not per chunk: what a crash would
			// leave the sweeper to charge.
			x.open.Checkpoint(x.checkpoint())
		}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: common},
	}}
}

// bind records the stored response the reply names as the account's. A
// JSON reply is read, and bound, at its last chunk. A stream names its
// response in its first event: the bind runs beside the stream so that the
// first event is not held for a Redis round trip, and the stream's last
// chunk waits for it. A request naming the id in the sub-millisecond
// before the bind lands is refused with 404, as for any id not the
// account's: the window fails closed.
func (x *exchange) bind(ctx context.Context, last bool) {
	if x.req.NoStore || x.s.owners == nil {
		x.bound = true // nothing is kept to bind
		return
	}
	id, _ := x.stored.Response()
	if id == "" {
		return
	}
	x.bound = true
	if x.op.ValidID == nil || !x.op.ValidID(id) {
		x.s.log.Warn("reply names a malformed response id; not bound", "request_id", x.requestID)
		return
	}
	if last {
		x.s.bindResponse(ctx, x.requestID, id, x.key.AccountID)
		return
	}
	done := make(chan struct{})
	x.binding = done
	// Not cut by the client leaving: the response exists at the vendor
	// either way. The store's timeouts bound the call.
	bctx := context.WithoutCancel(ctx)
	requestID, account := x.requestID, x.key.AccountID
	go func() {
		defer close(done)
		x.s.bindResponse(bctx, requestID, id, account)
	}()
}

// bindResponse binds stored response id to account, logging a failure: the
// response then stays unreachable through the gateway, refused, never shown
// to another account.
func (s *Server) bindResponse(ctx context.Context, requestID, id, account string) {
	if err := s.owners.BindResponse(ctx, id, account); err != nil {
		s.log.Error("binding a stored response failed", "request_id", requestID, "err", err)
		s.metrics.storeErrors.WithLabelValues("bind").Inc()
	}
}

// countedBody forwards a free request whose body may name a stored
// response (an input token count) once the response is found to be the
// account's.
func (x *exchange) countedBody(ctx context.Context, body []byte) *extprocv3.ProcessingResponse {
	var refs []string
	if x.op.References != nil {
		var err error
		if refs, err = x.op.References(body); err != nil {
			var fe *format.Error
			if errors.As(err, &fe) {
				return x.refuse(fe, 0)
			}
			return x.reject(format.InvalidRequest, "malformed request body", 0)
		}
	}
	for _, id := range refs {
		if resp := x.checkOwner(ctx, id); resp != nil {
			return resp
		}
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}},
	}}
}

// leaseLost ends a request whose hold this sidecar could not renew (Redis
// unreachable) before its lease may end: a sweeper elsewhere may settle it
// and the account may spend the money again, so nothing more is served.
// The chunk in hand is metered (the vendor produced it) and withheld; the
// answer resets the client's stream, and the request settles as cut short
// (spooled, then reconciled with the sweep's charge).
func (x *exchange) leaseLost(b *extprocv3.HttpBody) *extprocv3.ProcessingResponse {
	if x.meter != nil {
		x.bodyBytes += int64(len(b.GetBody()))
		if x.rewriter != nil {
			x.rewriter.Rewrite(b.GetBody(), false)
		} else {
			x.meter.Write(b.GetBody())
		}
	}
	x.s.metrics.leaseCuts.Inc()
	x.s.log.Warn("request cut: its hold could not be renewed", "request_id", x.requestID, "account", x.key.AccountID)
	x.settle(false)
	return x.reject(format.Unavailable, "the gateway lost its store; retry shortly", time.Second)
}

// bodyMutation replaces a chunk with out; an empty out clears it.
func bodyMutation(out []byte) *extprocv3.BodyMutation {
	if len(out) == 0 {
		return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}
	}
	return &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: out}}
}

// startFromAttributes is responseHeaders for the bootstrap that skips the
// response headers message: Envoy sends the status and the serving
// endpoint's metadata as attributes with the first body chunk, which saves
// one message (and one wait on the processor) per request. The reply's
// content type follows from the request: a 2xx reply to a streaming request
// is an event stream.
func (x *exchange) startFromAttributes(attrs map[string]*structpb.Struct) {
	code := statusOf(attrs)
	if code == 0 {
		return // no attributes: the response headers message carries them
	}
	x.status = code
	f := attrs[attributesKey].GetFields()
	// The host metadata arrives as protobuf text; only the endpoint name
	// is read from it.
	x.endpoint = ""
	if md := f["xds.upstream_host_metadata"].GetStringValue(); md != "" {
		switch {
		case strings.Contains(md, `"reserve"`):
			x.endpoint = "reserve"
		case strings.Contains(md, `"primary"`):
			x.endpoint = "primary"
		}
	}
	x.startReply(replyType(x.req.Stream))
}

// replyType is the content type of a reply whose headers the processor did
// not see: what the request asked for.
func replyType(stream bool) string {
	if stream {
		return "text/event-stream"
	}
	return "application/json"
}

// attributesKey is where Envoy puts the ext_proc filter's attributes.
const attributesKey = "envoy.filters.http.ext_proc"

// afterSend runs once an answer has been handed to Envoy: a complete reply is
// settled now, off the path of the chunk the answer released. It is the one
// place a reply that ended normally settles (finish settles the others).
func (x *exchange) afterSend() {
	if x.replyDone {
		x.settle(true)
	}
}

// finish runs when the stream ends for any reason; a request still open was
// cut short (client gone, upstream reset, Envoy reset).
func (x *exchange) finish() {
	if x.admitted && !x.settled {
		x.settle(false)
	}
	x.endTrace()
}

// checkpoint is the request's best estimate so far, as if it ended now.
func (x *exchange) checkpoint() store.Checkpoint {
	return x.outcome(false).Checkpoint()
}

// settle records the request's outcome exactly once. It does not wait for
// the store: the settlement is queued and applied (or spooled) in a batch
// after the reply's last chunk has been released, and a usage read on this
// sidecar waits for the queued settlements of its account.
func (x *exchange) settle(complete bool) {
	if !x.admitted || x.settled {
		return
	}
	if x.req.Background && x.stored != nil && x.s.parking != nil && x.status >= 200 && x.status <= 299 && !x.req.NoStore {
		// A background response that has not ended is settled when it
		// does.
		if id, final := x.stored.Response(); id != "" && !final && x.park(id, complete) {
			return
		}
	}
	x.settled = true
	if x.req.Stream {
		x.s.metrics.streams.Dec()
	}
	st := x.outcome(complete)
	x.s.noteCapped(x.upstream.Name, st)
	// Renewed until the hold is gone: if the settlement waits in the queue
	// or the spool, a sweep in the meantime charges the same.
	x.s.holds.Finish(x.open, st.Checkpoint())
	s, upstream, model, open := x.s, x.upstream.Name, string(st.Priced), x.open
	traced := x.traceSettlement(st)
	s.settler.enqueue(st, func(r store.SettleResult, took time.Duration) {
		traced(r)
		s.metrics.settleSeconds.Observe(took.Seconds())
		if err := r.Err; err != nil {
			s.metrics.storeErrors.WithLabelValues("settle").Inc()
			s.log.Error("settlement failed", "request_id", st.RequestID, "account", st.AccountID, "err", err)
		} else if !r.Spooled {
			// The store took it (or had it already): the hold is gone,
			// nothing is left to renew.
			s.holds.Forget(open)
		}
		s.recordSettled(upstream, model, st)
	})
}

// noteCapped counts and logs a settlement whose usage was capped.
func (s *Server) noteCapped(upstream string, st store.Settlement) {
	if st.Capped {
		s.metrics.capped.WithLabelValues(upstream).Inc()
		s.log.Warn("usage beyond what the request allowed was capped", "request_id", st.RequestID, "account", st.AccountID, "model", st.Priced)
	}
}

// recordSettled counts a settlement the store took (or spooled) in the
// metrics and writes the request's log line.
func (s *Server) recordSettled(upstream, model string, st store.Settlement, attrs ...any) {
	s.metrics.observe(upstream, model, st)
	s.log.Info("request", append([]any{
		"request_id", st.RequestID, "account", st.AccountID, "key", st.KeyID,
		"upstream", upstream, "endpoint", st.Endpoint, "model", st.Priced, "status", st.Status,
		"stream", st.Stream, "usage", st.Usage, "service_tier", st.ServiceTier,
		"cost_usd", pricing.USD(st.Cost), "estimated", st.Estimated, "interrupted", st.Interrupted,
		"duration_ms", st.EndedAt.Sub(st.StartedAt).Milliseconds()}, attrs...)...)
}

// outcome is what the request comes to if it ends now: complete is false
// when its stream ended early (the meter then estimates what it did not
// see).
func (x *exchange) outcome(complete bool) store.Settlement {
	st := store.Settlement{
		RequestID: x.requestID,
		AccountID: x.key.AccountID,
		KeyID:     x.key.ID,
		Requested: usage.RequestedModel(x.req.Model),
		Priced:    x.price.Name,
		Fallback:  x.price.Fallback(),
		Status:    x.status,
		Endpoint:  x.endpoint,
		Stream:    x.req.Stream,
		StartedAt: x.started,
		EndedAt:   x.s.now(),
	}
	if st.Status == 0 {
		// No reply byte reached the processor: the status and endpoint
		// come only with the first body chunk, so the vendor's connection
		// broke before it (the client saw a reset after the headers, or
		// Envoy's 502), or the client left first; the two look the same
		// here. Nothing was produced and nothing is charged; the ledger
		// says 502, the failure the client saw when it was still there.
		st.Status = 502
	}
	if x.meter != nil && !complete && x.bodyBytes == 0 && x.status >= 200 && x.status <= 299 {
		// The vendor's reply ended before its first byte reached the client:
		// Envoy answered 502 (or the client saw only a reset). Nothing was
		// produced, and vendors do not bill such a reply: record 502, no charge.
		st.Status = 502
	}
	if x.meter != nil && st.Status >= 200 && st.Status <= 299 {
		r := x.meter.Usage(complete) // the meter knows whether the vendor's final figures arrived
		in, out := usageBounds(x.price, x.bounds)
		if u, ok := capUsage(r.Usage, in, out); !ok {
			r.Usage, st.Capped = u, true
		}
		priceInto(&st, x.price, r, x.upstream.regional[x.endpoint])
	}
	return st
}

// priceInto records on st the reply's usage r and its cost at the tier the
// reply reports and the serving endpoint's region.
func priceInto(st *store.Settlement, price *pricing.Model, r usage.Report, region string) {
	st.Usage, st.Reported, st.Estimated = r.Usage, r.Model, r.Estimated
	c := price.Price(r.Usage, r.ServiceTier, region)
	st.Cost, st.Rates, st.ServiceTier, st.LongContext = c.Cost, usage.Usage(c.Rates), c.Tier, c.Above
	st.TierUnknown, st.Uplift, st.Region = c.UnknownTier, c.Uplift, ""
	if c.Uplift > 0 {
		st.Region = region
	}
}

// reject answers the client directly, in the upstream's vendor error format.
func (x *exchange) reject(kind format.ErrorKind, msg string, retryAfter time.Duration) *extprocv3.ProcessingResponse {
	return x.refuse(&format.Error{Kind: kind, Message: msg}, retryAfter)
}

func (x *exchange) refuse(e *format.Error, retryAfter time.Duration) *extprocv3.ProcessingResponse {
	x.s.metrics.rejections.WithLabelValues(x.upstream.Name, e.Kind.Reason()).Inc()
	return immediate(e.Status(), "application/json", x.upstream.Format.ErrorBody(e), retryAfter)
}

func immediate(code int, contentType string, body []byte, retryAfter time.Duration) *extprocv3.ProcessingResponse {
	hm := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{setHeader("content-type", contentType)}}
	if retryAfter > 0 {
		hm.SetHeaders = append(hm.SetHeaders, setHeader("retry-after", strconv.Itoa(retrySeconds(retryAfter))))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(code)},
			Headers: hm,
			Body:    body,
			Details: "gateway_" + strconv.Itoa(code),
		},
	}}
}

// retrySeconds rounds a retry delay up to whole seconds, at least one.
func retrySeconds(d time.Duration) int {
	s := int((d + time.Second - 1) / time.Second)
	return max(s, 1)
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// headerValues are the few headers the processor reads.
type headerValues struct {
	method, path, status string
	credentials          auth.Headers
	contentType          string
	contentLength        string
	upgrade              string
	endpoint             string
	internal             []string // client-sent headers with our prefix
}

// readHeaders picks the headers the processor reads. Only their values are
// converted to strings: a request carries many more headers than these.
func readHeaders(m *corev3.HeaderMap) headerValues {
	var hv headerValues
	for _, h := range m.GetHeaders() {
		var dst *string
		switch k := h.GetKey(); k {
		case ":method":
			dst = &hv.method
		case ":path":
			dst = &hv.path
		case ":status":
			dst = &hv.status
		case "x-api-key":
			hv.credentials.XAPIKey = append(hv.credentials.XAPIKey, headerValue(h))
			continue
		case "authorization":
			hv.credentials.Authorization = append(hv.credentials.Authorization, headerValue(h))
			continue
		case "content-type":
			dst = &hv.contentType
		case "content-length":
			dst = &hv.contentLength
		case "upgrade":
			dst = &hv.upgrade
		case "x-gateway-endpoint":
			dst = &hv.endpoint
			hv.internal = append(hv.internal, k)
		default:
			if strings.HasPrefix(k, internalHeaderPrefix) {
				hv.internal = append(hv.internal, k)
			}
			continue
		}
		*dst = headerValue(h)
	}
	return hv
}

func headerValue(h *corev3.HeaderValue) string {
	if raw := h.GetRawValue(); len(raw) > 0 {
		return string(raw)
	}
	return h.GetValue()
}

// refusal is the error kind and message of an admission the store refused:
// which limit, of which level (the account's or this key's), and what the
// client can do. Limits that reset are 429; the balance and a key's
// lifetime cap, which do not, are 402.
func refusal(d store.Decision, hold, tokens int64) (format.ErrorKind, string) {
	of := "for this " + d.Level.String()
	retry := "retry after " + strconv.Itoa(retrySeconds(d.RetryAfter)) + "s"
	switch d.Outcome {
	case store.RateLimited:
		return format.RateLimited, "request rate limit reached " + of + "; " + retry
	case store.ConcurrencyLimited:
		return format.RateLimited, "concurrent request limit reached " + of + ": too many requests in flight; " + retry + " or when one ends"
	case store.TokenLimited:
		bound := "this request may use up to " + strconv.FormatInt(tokens, 10) + " tokens (input + max_tokens)"
		if d.RetryAfter == 0 {
			return format.RateLimited, bound + ", more than the tokens-per-minute limit " + of + " allows at all; lower max_tokens or send less"
		}
		return format.RateLimited, "tokens-per-minute limit reached " + of + " (" + bound + "); " + retry
	case store.DailyLimited:
		return format.DailyLimit, "daily spend limit reached " + of + "; it resets at 00:00 UTC"
	case store.MonthlyLimited:
		return format.DailyLimit, "monthly spend limit reached " + of + "; it resets on the 1st of the month at 00:00 UTC"
	case store.TotalLimited:
		return format.BillingExhausted, "lifetime spend limit reached for this key: this request could cost up to $" +
			strconv.FormatFloat(pricing.USD(hold), 'f', 6, 64) + "; the account's owner can raise it"
	}
	return format.BillingExhausted, "insufficient balance: this request could cost up to $" +
		strconv.FormatFloat(pricing.USD(hold), 'f', 6, 64) + "; top up the account"
}
