package extproc

// The reply: its status and endpoint, each chunk metered and released, the stored object it names bound to the account.

import (
	"context"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
)

// replyHeaders starts metering a 2xx reply of status, served by
// endpoint, its headers ending the reply if end; any other reply ends the
// request at no charge. It reports whether the reply's body is still
// observed.
func (x *exchange) replyHeaders(status int, endpoint, contentType string, end bool) bool {
	x.status, x.endpoint = status, endpoint
	if !x.admitted {
		return true
	}
	if !x.startReply(contentType) && !x.scrub {
		return false
	}
	if end {
		x.endReply()
	}
	return true
}

// startReply begins the reply of x.status: a 2xx reply is metered from here
// on and reports true; any other ends the request at no charge.
func (x *exchange) startReply(contentType string) bool {
	if x.status < 200 || x.status > 299 {
		x.endReply()
		x.scrub = vendorRefusal(x.status)
		return false
	}
	x.meter = x.op.Format.NewMeter(x.req, x.body, contentType)
	x.stored, _ = x.meter.(format.Stored)
	x.items, _ = x.meter.(format.StoredItems)
	x.rewriter, _ = x.meter.(format.Rewriter)
	x.open.Began(x.status, x.endpoint)
	return true
}

// endReply marks the reply done, to be settled once the answer to this
// message is sent (afterSend). Its settlement is pending from here, not
// from then: a client that reads its usage (or the settlement metric) as
// soon as the last chunk reaches it waits for it.
func (x *exchange) endReply() {
	x.replyDone = true
	if x.admitted && !x.settled && !x.expected {
		x.expected = true
		x.s.settler.expect(x.key.AccountID)
	}
}

// A replyHead is what a transport reports of how a reply began, with its
// first chunk: its status (0: not reported), the endpoint and vendor key
// that served it ("" when not known), the address the vendor was reached
// at, and the vendor's lowest remaining fraction of its rate limits
// (headroom.go), if reported.
type replyHead struct {
	status                 int
	endpoint, key, address string
	headroom               float64
	hasHeadroom            bool
}

// replyChunk meters one chunk of the reply and lets it through at once:
// Envoy holds each chunk until the processor answers. head comes with
// the first chunk. A rewriting meter may replace the chunk: out, when
// changed. A refusal ends the reply (the hold's lease was lost).
func (x *exchange) replyChunk(ctx context.Context, head *replyHead, data []byte, end bool) (out []byte, changed bool, r *Refusal) {
	if x.parked != nil {
		x.parkedChunk(head, data, end)
		return nil, false, nil
	}
	if head != nil {
		if x.status == 0 && x.admitted && !x.settled {
			x.begin(*head)
		}
		x.headroom(head)
	}
	out, changed, lost := x.chunk(ctx, data, end)
	if lost {
		return nil, false, x.reject(format.Unavailable, leaseLostMessage, time.Second)
	}
	return out, changed, nil
}

// leaseLostMessage answers a request cut because its hold's lease was
// lost (leaseLost).
const leaseLostMessage = "the gateway lost its store; retry shortly"

// chunk meters one chunk of the reply, data, the last if end, whatever
// carries it: out replaces it when changed (a rewriting meter's output, or
// the gateway's error in place of a vendor's refusal of its credential);
// lost: the hold's lease was lost and nothing more is served.
func (x *exchange) chunk(ctx context.Context, data []byte, end bool) (out []byte, changed, lost bool) {
	if x.scrub {
		out = x.scrubRefusal(!x.scrubbed)
		x.scrubbed = true
		return out, true, false
	}
	// The renewer's clock, not the injectable one: leases are real time.
	if x.admitted && !x.settled && x.open.Expired(time.Now()) {
		x.leaseLost(data)
		return nil, false, true
	}
	if x.meter != nil && !x.settled {
		x.bodyBytes += int64(len(data))
		if x.rewriter != nil {
			out, changed = x.rewriter.Rewrite(data, end)
		} else {
			x.meter.Write(data)
		}
		if x.req.Stream && !end {
			// What the chunk names is bound beside the stream, started
			// once its answer is sent (afterSend): the chunk waits for no
			// Redis work, not even for sharing the CPU with it.
			x.bindDue = x.stored != nil || x.items != nil
		} else if x.stored != nil && !x.bound && end {
			x.bind(ctx, true)
		}
		if end {
			x.endReply()
			if x.binding != nil {
				<-x.binding // the last chunk waits for the bind (it has long landed)
			}
			// The items are all known only now: bound before the last
			// chunk goes, not cut by the client leaving.
			x.bindItems(context.WithoutCancel(ctx))
			if x.req.Background {
				// Parked before the reply naming the response reaches the
				// client, so that its first read finds it parked and
				// settles it.
				x.settle(true)
			}
		} else if x.checkpointAsked {
			// Once per renewal interval, not per chunk: what a crash would
			// leave the sweeper to charge. Taken once the answer to the
			// chunk after the one that found it asked for is sent
			// (afterSend): pricing the stream so far (for a Responses
			// stream, estimating its input) never delays a chunk, and a
			// reply whose end follows its body (a JSON reply) is settled
			// instead of priced twice. A checkpoint is at most one chunk
			// behind the reply.
			x.checkpointAsked, x.checkpointDue = false, true
		} else if x.open.WantCheckpoint() {
			x.checkpointAsked = true
		}
	}
	return out, changed, false
}

// leaseLost ends a request whose hold this sidecar could not renew (Redis
// unreachable) before its lease may end: a sweeper elsewhere may settle it
// and the account may spend the money again, so nothing more is served.
// The chunk in hand is metered (the vendor produced it) and withheld; the
// answer (leaseLostMessage) resets the client's stream, and the request
// settles as cut short (spooled, then reconciled with the sweep's charge).
func (x *exchange) leaseLost(data []byte) {
	if x.meter != nil {
		x.bodyBytes += int64(len(data))
		if x.rewriter != nil {
			x.rewriter.Rewrite(data, false)
		} else {
			x.meter.Write(data)
		}
	}
	x.s.metrics.leaseCuts.Inc()
	x.s.log.Warn("request cut: its hold could not be renewed", "request_id", x.requestID, "account", x.key.AccountID)
	x.settle(false)
}

// begin is replyHeaders for the bootstrap that skips the response
// headers message: Envoy sends the status and the serving endpoint's
// metadata as attributes with the first body chunk, which saves one
// message (and one wait on the processor) per request. The reply's content
// type follows from the request: a 2xx reply to a streaming request is an
// event stream.
func (x *exchange) begin(h replyHead) {
	if h.status == 0 {
		return // not reported: the response headers message carries it
	}
	x.status, x.endpoint = h.status, h.endpoint
	x.servedBy(h.key)
	// Without the endpoint's name (the reduced contract, or a cluster of
	// the operator's own): the address Envoy connected to.
	if x.endpoint == "" && x.upstream != nil && x.upstream.addrs != nil {
		x.endpoint = x.upstream.addrs.endpointOf(h.address)
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
