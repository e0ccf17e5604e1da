package extproc

import (
	"sync"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/pricing"
)

// exchange is the processor's state for one metered request: an HTTP
// request driven by Envoy's messages (envoy.go, the ext_proc adapter), or
// one call on a line (call.go, which the WebSocket transport drives). Its
// phases are its methods, one file each, in the order they run:
//
//  1. headers.go, requestHeaders: the key, the vendor path of an operation,
//     what the gateway sees of the request from there; refusals answered
//     here.
//  2. admission.go, requestBody: the operation reads the body
//     (ParseRequest), checkRequest checks it against the model and the
//     key, admit takes the hold of the operation's bounds in one store
//     step.
//  3. reply.go, replyChunk: the status and endpoint with the first
//     chunk (begin), each chunk metered and released, a stored object the
//     reply names bound to the account.
//  4. settle.go, afterSend and finish: the outcome settled exactly once,
//     off the reply's path (a background request is parked instead:
//     parked.go; the objects the vendor keeps: stored.go).
//
// Its state is split by phase, each part a small type of its own: intake
// (what the request is), holding (its hold, from admission to
// settlement), replyState (the vendor's reply and the key that served it)
// and vendorState (the objects the reply names). The operation (package
// operation) brings the wire format, paths and hold rule. Refusals are
// neutral values (refuse.go), and so are how a request goes on (onward.go)
// and the reply's side: only the adapters speak a transport.
type exchange struct {
	s *Server
	// extend asks the transport to wait d more for the exchange's answer
	// (the wait for a concurrency slot extends Envoy's message timeout);
	// nil: the transport has no such timeout.
	extend   func(d time.Duration) error
	upstream *Upstream
	op       *operation.Operation // the operation of a metered or counted path
	path     *operation.Path
	key      account.Key

	requestID string
	// envoyID is Envoy's id of the request (x-request-id), as its logs
	// name it.
	envoyID string
	started time.Time
	trace   exchangeTrace
	// transport is the ledger's name for how the client came ("" for
	// HTTP; a line's, such as "websocket"), and localRef, on a line,
	// reports the responses created on it, which it may continue (store:
	// false included).
	transport string
	localRef  func(id string) bool
	// ans is where the ext_proc adapter builds its answers (envoywire.go,
	// answer); nil until it does.
	ans *answer

	intake
	holding
	replyState
	vendorState
}

// exchanges keeps ended exchanges for the next streams: an exchange is a
// kilobyte, allocated per request otherwise. Nothing outlives its stream
// with a pointer into it (TestExchangeNotKeptPastItsStream): what the
// settlement, the binds and the renewer carry on with is copied or
// allocated apart.
var exchanges = sync.Pool{New: func() any { return new(exchange) }}

// releaseExchange gives an ended exchange back, holding nothing of its
// request (a test poisons it instead).
var releaseExchange = func(x *exchange) {
	*x = exchange{}
	exchanges.Put(x)
}

// intake is what the request is, as its headers and body said.
type intake struct {
	req         format.Request
	body        []byte
	price       *pricing.Model   // looked up once: a reload does not change a request's prices
	bounds      operation.Bounds // the request's bounds, fixed at admission
	hasLength   bool             // the client sent content-length
	contentType string           // the request's, for a multipart body's boundary
	// headerSession: the client's session header chose the vendor key;
	// creator: the vendor key that created the stored objects the request
	// names, which the request is steered to.
	headerSession bool
	creator       string
}

// holding is the request's hold, from its admission to its settlement.
type holding struct {
	adm      account.Admission // what the admitter was asked
	admitted bool
	settled  bool
	// replyDone: the reply is complete as far as billing goes (its last
	// chunk metered, or a status that is not charged); the request is
	// settled once the answer to this message has been sent (afterSend).
	replyDone bool
	// expected: its settlement is counted as pending from the moment the
	// reply is done, before the answer that ends it is sent (endReply).
	expected bool
	// checkpointAsked: a chunk found the renewer asking for a checkpoint;
	// checkpointDue: it is taken in afterSend (reply.go says when).
	checkpointAsked bool
	checkpointDue   bool
	open            *holds.Open      // the hold's renewal while the request runs
	lease           account.LeaseRef // the lease it was admitted from, if any
}

// replyState is the vendor's reply as it is metered.
type replyState struct {
	status   int    // upstream response status; 0 until the first response body chunk
	endpoint string // "primary" or "reserve", from Envoy's endpoint metadata
	// steered is the vendor key the processor chose (a pooled upstream),
	// vendorKey the one that served (Envoy may retry on another).
	steered, vendorKey string
	meter              format.Meter
	rewriter           format.Rewriter // the meter, when it also rewrites the reply
	bodyBytes          int64           // response body bytes from the vendor
	// scrub: the vendor refused its credential (vendorrefusal.go), whose
	// reply the gateway's error replaces; scrubbed once it has.
	scrub, scrubbed bool
}

// vendorState is what the reply names of the objects the vendor keeps
// (stored.go, parked.go).
type vendorState struct {
	stored  format.Stored   // the meter, when the reply names a stored response
	bound   bool            // the stored response's id is bound to the account (or being bound)
	binding <-chan struct{} // closed when the binds queued mid-stream have landed
	// bindDue: a stream's chunk may name stored objects, bound in
	// afterSend.
	bindDue bool
	// items, the meter when it reads the stored response's item ids;
	// itemsSent of them are bound (or being bound beside the stream);
	// itemsBound once the last have been.
	items      format.StoredItems
	itemsSent  int
	itemsBound bool
	parked     *account.Parked // the background response a retrieval or cancellation reads
}
