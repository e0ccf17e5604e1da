package extproc

// Request headers: the credential, the vendor path, and what the gateway
// sees of each kind of path from there.

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
)

// internalHeaderPrefix marks headers that only the gateway may set; a
// client's copies are removed.
const internalHeaderPrefix = "x-gateway-"

// requestHeaders authenticates the client, classifies the path and swaps the
// client's credential for the vendor's: the request goes on as the onward
// says, or the refusal answers it.
func (x *exchange) requestHeaders(ctx context.Context, hv *headerValues) (*onward, *Refusal) {
	x.started = x.s.now()
	path, _, _ := strings.Cut(hv.path, "?") // query strings are never read for credentials
	x.upstream = x.s.upstream(path)
	if x.upstream == nil {
		return nil, x.s.noUpstream(path)
	}
	key, err := x.s.keys.Authenticate(ctx, hv.credentials, x.started, modelPolicy)
	if err != nil {
		return nil, x.refuseAuth(err)
	}
	x.key = key

	sub := path[len(x.upstream.prefix)-1:]
	mutation := x.credentialMutation(hv)
	// A pool of vendor keys: the session's key, by the client's session
	// header or else the account (the body may name a session later).
	x.headerSession = hv.session != ""
	x.steer(bound(hv.session), mutation)
	x.envoyID = hv.requestID
	if r := x.pooled(hv.requestID); r != nil {
		return nil, r
	}
	op, vp, id := operation.Match(x.upstream.Operations, hv.method, sub)
	// Query strings go to the vendor only as far as its API defines them.
	if _, query, ok := strings.Cut(hv.path, "?"); ok {
		p := path
		if q := x.upstream.forwardQuery(vp, sub, query); q != "" {
			p += "?" + q
		}
		if p != hv.path {
			mutation.setHeader(":path", p)
		}
	}
	if hv.method == "GET" && (sub == "/v1/models" || strings.HasPrefix(sub, "/v1/models/")) {
		if lister, ok := x.upstream.Format.(format.ModelLister); ok {
			return nil, x.models(lister, sub, hv.path)
		}
	}
	if hv.upgrade != "" {
		// An upgrade Envoy sent through ext_proc: Envoy routes the
		// WebSocket paths it serves to the sidecar's socket handler
		// (socket.go) without ext_proc, so this path has none.
		return nil, x.reject(format.InvalidRequest, "the WebSocket transport is not available on this path; use HTTP (POST "+sub+")", 0)
	}
	switch {
	case vp != nil && (vp.Kind == operation.Metered || vp.Kind == operation.Counted):
		x.op, x.path = op, vp
		return x.bodyFollows(ctx, hv, mutation)
	case vp != nil && vp.Kind == operation.Owned:
		return x.owned(ctx, op, vp, id, hv, mutation)
	case x.upstream.isFree(hv.method + " " + sub):
		// Free read-only paths: forward as they are, observe nothing more.
		return x.forward(mutation, seesNothing), nil
	default:
		return nil, x.reject(format.NotFound, "no such path: "+hv.method+" "+sub, 0)
	}
}

// bodyFollows asks for the body of a metered or counted request, unless
// it has none or declares more than the gateway accepts.
func (x *exchange) bodyFollows(ctx context.Context, hv *headerValues, mutation *onward) (*onward, *Refusal) {
	if hv.bodyless {
		return nil, x.reject(format.InvalidRequest, "request body is required", 0)
	}
	x.hasLength, x.contentType = hv.contentLength != "", hv.contentType
	if n, err := strconv.ParseInt(hv.contentLength, 10, 64); err == nil && x.s.maxBody > 0 && n > x.s.maxBody {
		return nil, x.reject(format.TooLarge, "request body of "+hv.contentLength+" bytes is larger than the "+
			strconv.FormatInt(x.s.maxBody, 10)+" bytes this gateway accepts", 0)
	}
	sees := seesMetered
	if x.path.Kind == operation.Counted {
		sees = seesBody
	} else if r := x.refusedAtHeaders(); r != nil {
		return nil, r
	} else if r := x.precheck(ctx); r != nil {
		return nil, r
	}
	return x.forward(mutation, sees), nil
}

// owned forwards a request on a stored object (the path names its id) only
// for the account that created it; anyone else is told it does not exist,
// and the vendor never hears of the request. Never billed again.
func (x *exchange) owned(ctx context.Context, op *operation.Operation, vp *operation.Path, id string,
	hv *headerValues, mutation *onward) (*onward, *Refusal) {
	if r := x.checkOwner(ctx, format.Ref{Kind: format.StoredResponse, ID: id}); r != nil {
		return nil, r
	}
	x.steerToCreator(mutation)
	// A background request not yet settled: its retrieval (the poll path)
	// or cancellation (a POST on it) may show its end, which settles it.
	reads := hv.method == "GET" && vp.Path == op.Poll || hv.method == "POST" && op.Poll != ""
	if reads && x.watchParked(ctx, op, id, hv.method == "GET" && streamQuery(hv.path)) {
		return x.forward(mutation, seesReply), nil
	}
	return x.forward(mutation, seesNothing), nil
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
func (x *exchange) models(lister format.ModelLister, sub, rawPath string) *Refusal {
	if id, ok := strings.CutPrefix(sub, "/v1/models/"); ok {
		m, found := x.upstream.Prices.Lookup(id)
		if !found || len(x.upstream.Serving(m)) == 0 || len(x.key.Models) > 0 && !allowed(x.key.Models, id, string(m.Name)) {
			return x.reject(format.NotFound, "The model "+strconv.Quote(id)+" does not exist or you do not have access to it.", 0)
		}
		return newRefusal(200, "application/json", lister.Model(id), 0)
	}
	var ids []string
	for _, m := range x.upstream.Prices.Models() {
		if len(x.upstream.Serving(m)) > 0 && (len(x.key.Models) == 0 || allowed(x.key.Models, string(m.Name), string(m.Name))) {
			ids = append(ids, string(m.Name))
		}
	}
	_, rawQuery, _ := strings.Cut(rawPath, "?")
	query, _ := url.ParseQuery(rawQuery)
	return newRefusal(200, "application/json", lister.ModelList(ids, query), 0)
}

// forward lets the request's headers go on as mutation says, the gateway
// seeing what sees says from here. A request steered to a pool's key has
// named its cluster in a header: Envoy matches its route again.
func (x *exchange) forward(mutation *onward, sees sight) *onward {
	mutation.reroute = x.steered != ""
	mutation.sees = sees
	return mutation
}

// modelPolicy: model routes take model keys of accounts in good standing.
var modelPolicy = auth.Policy{Kinds: []account.KeyKind{account.ModelKey}}

// refuseAuth answers an authentication failure in the upstream's format.
func (x *exchange) refuseAuth(err error) *Refusal {
	var ae *auth.Error
	if !errors.As(err, &ae) {
		return x.reject(format.Unauthenticated, "invalid API key", 0)
	}
	switch ae.Reason {
	case auth.WrongKind:
		return x.reject(format.PermissionDenied, "read-only tokens (ro_) can only read GET /v1/usage; use a cr_ key for model requests", 0)
	case auth.Suspended:
		x.s.metrics.earlyRefusals.WithLabelValues(suspendedKind).Inc()
		return x.reject(format.PermissionDenied, ae.Message, 0)
	case auth.Unavailable:
		x.s.log.Error("key lookup failed", "err", ae.Err)
		x.s.metrics.storeErrors.WithLabelValues("lookup").Inc()
		return x.reject(format.Unavailable, ae.Message, time.Second)
	}
	return x.reject(format.Unauthenticated, ae.Message, 0)
}

// credentialMutation removes the client's credential, any internal header it
// sent, accept-encoding (the meter must see plain bytes) and every header
// the upstream does not forward (forward.go). The vendor's credential is
// never known here: Envoy adds it on the way to the vendor.
func (x *exchange) credentialMutation(hv *headerValues) *onward {
	remove := []string{"x-api-key", "authorization", "accept-encoding"}
	remove = append(remove, hv.internal...)
	remove = x.upstream.forward.unforwarded(hv.names, remove)
	return &onward{remove: remove}
}

// headerValues are the few headers the processor reads.
type headerValues struct {
	method, path, status string
	credentials          auth.Headers
	contentType          string
	contentLength        string
	upgrade              string
	endpoint             string
	session              string   // x-claude-code-session-id
	requestID            string   // x-request-id, as Envoy set it
	internal             []string // client-sent headers with our prefix
	// names are the names of every header the request carries.
	names headerNames
	// bodyless: the request ends with its headers.
	bodyless bool
}

// headerNames are the names of a request's headers, read in place from the
// transport's own header map.
type headerNames interface {
	Len() int
	Name(i int) string
}
