package extproc

// Settlement: what the request comes to, recorded exactly once, off the path of the reply.

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// afterSend runs once an answer has been handed to Envoy: a complete reply is
// settled now, off the path of the chunk the answer released. It is the one
// place a reply that ended normally settles (finish settles the others); the
// binds and the checkpoint a stream's chunk asked for start here, off its
// path too.
func (x *exchange) afterSend(ctx context.Context) {
	if x.replyDone {
		x.settle(true)
		return
	}
	if x.bindDue {
		x.bindDue = false
		if x.stored != nil && !x.bound {
			x.bind(ctx, false)
		}
		x.bindNewItems()
	}
	if x.checkpointDue {
		x.checkpointDue = false
		if !x.settled {
			x.open.Checkpoint(x.checkpoint())
		}
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
// It runs on a stream's goroutine (afterSend), and the stack the pricing
// needs is kept for as long as the stream is open: one settlement, filled
// in place, lies under the pricing (TestStreamStackStaysSmall).
func (x *exchange) checkpoint() *account.Checkpoint {
	var st account.Settlement
	x.outcome(&st, false)
	return st.Checkpoint()
}

// settle records the request's outcome exactly once. It does not wait for
// the store: the settlement is queued and applied (or spooled) in a batch
// after the reply's last chunk has been released, and a usage read on this
// sidecar waits for the queued settlements of its account.
func (x *exchange) settle(complete bool) {
	if !x.admitted || x.settled {
		return
	}
	expected := x.expected
	x.expected = false
	if x.req.Background && x.stored != nil && x.s.parking != nil && x.status >= 200 && x.status <= 299 && !x.req.NoStore {
		// A background response that has not ended is settled when it
		// does.
		if id, final := x.stored.Response(); id != "" && !final && x.park(id, complete) {
			if expected {
				x.s.settler.forgo(x.key.AccountID)
			}
			return
		}
	}
	x.settled = true
	if x.req.Stream {
		x.s.metrics.streams.Dec()
	}
	// A reply cut short binds the items it showed (a whole one bound them
	// before its last chunk).
	x.bindItems(context.Background())
	var st account.Settlement
	x.outcome(&st, complete)
	x.s.noteCapped(x.upstream.Name, st)
	x.s.noteDearer(x.upstream.Name, x.price.Name, st)
	// Renewed until the hold is gone: if the settlement waits in the queue
	// or the spool, a sweep in the meantime charges the same.
	x.s.holds.Finish(x.open, st.Checkpoint())
	s, upstream, model, open := x.s, x.upstream.Name, string(st.Priced), x.open
	traced := x.traceSettlement(st)
	var record int32 // the outbox entry of its record, once the record is dropped
	if l, ok := s.admitter.(leaseSettler); ok && st.Lease.ID != "" {
		// Its hold need not be recorded: the settlement settles it from
		// the lease.
		record = l.Settled(st.Lease)
	}
	s.settler.enqueue(st, record, expected, func(st *account.Settlement, r ledger.SettleResult, took time.Duration) {
		traced(r)
		s.metrics.settleSeconds.Observe(took.Seconds())
		if err := r.Err; err != nil {
			s.metrics.storeErrors.WithLabelValues("settle").Inc()
			s.log.Error("settlement failed", "request_id", st.RequestID, "account", st.AccountID, "err", err)
		} else if !r.Spooled {
			// The store took it (or had it already): the hold is gone,
			// nothing is left to renew.
			s.holds.Forget(open)
			if !r.Applied {
				// A request's own first settlement always applies (or
				// reconciles its sweep): one found done already is lost
				// money to look into, never to pass in silence.
				s.log.Warn("settlement not applied: the store had its request settled already", "request_id", st.RequestID, "account", st.AccountID)
			}
		}
		s.recordSettled(upstream, model, *st, false)
	})
}

// noteCapped counts and logs a settlement whose usage was capped.
func (s *Server) noteCapped(upstream string, st account.Settlement) {
	if st.Capped {
		s.metrics.capped.WithLabelValues(upstream).Inc()
		s.log.Warn("usage beyond what the request allowed was capped", "request_id", st.RequestID, "account", st.AccountID, "model", st.Priced)
	}
}

// noteDearer counts, logs and alerts a settlement priced at the dearer
// model its reply named (priceInto) rather than at requested, the model
// priced at admission.
func (s *Server) noteDearer(upstream string, requested usage.PricedModel, st account.Settlement) {
	if st.Priced == requested {
		return
	}
	s.metrics.dearerModel.WithLabelValues(upstream).Inc()
	s.log.Warn("the reply names a dearer model than the one requested: settled at its price", "request_id", st.RequestID,
		"account", st.AccountID, "upstream", upstream, "requested", requested, "priced", st.Priced, "reported", st.Reported)
	if s.onDearer != nil {
		s.onDearer(upstream, st.AccountID, st.KeyID, requested, st.Priced)
	}
}

// recordSettled counts a settlement the store took (or spooled) in the
// metrics and writes the request's log line; background marks a
// background response's.
//
// The line is written here rather than by Envoy's access log, which ends
// with the stream, before the settlement: it never knows the account, the
// key, the usage or the cost. Its attributes are built in a pooled buffer
// and passed as slog.Values (no boxing), so that the line allocates nothing
// of its own but the 8 bytes the JSON handler boxes cost_usd in (it writes
// floats through encoding/json); its buffer is pooled too.
func (s *Server) recordSettled(upstream, model string, st account.Settlement, background bool) {
	s.metrics.observe(upstream, model, st)
	ctx := context.Background()
	if !s.settler.lines.Enabled(ctx, slog.LevelInfo) {
		return
	}
	p := requestLines.Get().(*[]slog.Attr)
	// The usage's attributes first (usage.Usage.LogValue's: the kinds not
	// zero), then the line's, which hold them as a group.
	a := (*p)[:0]
	for _, k := range usage.Kinds {
		if v := k.Of(st.Usage); v != 0 {
			a = append(a, slog.Int64(k.Name, v))
		}
	}
	u := len(a)
	a = append(a,
		slog.String("request_id", st.RequestID), slog.String("account", st.AccountID), slog.String("key", st.KeyID),
		slog.String("upstream", upstream), slog.String("endpoint", st.Endpoint), slog.String("model", string(st.Priced)),
		slog.Int("status", st.Status), slog.Bool("stream", st.Stream))
	if u > 0 {
		// (An empty group is left out, by the handler or here.)
		a = append(a, slog.Attr{Key: "usage", Value: slog.GroupValue(a[:u:u]...)})
	}
	a = append(a, slog.String("service_tier", st.ServiceTier), slog.Float64("cost_usd", pricing.USD(st.Cost)),
		slog.Bool("estimated", st.Estimated), slog.Bool("interrupted", st.Interrupted),
		slog.Int64("duration_ms", st.EndedAt.Sub(st.StartedAt).Milliseconds()))
	if background {
		a = append(a, slog.Bool("background", true))
	}
	// One group without a name: the handler writes its attributes inline.
	s.settler.lines.LogAttrs(ctx, slog.LevelInfo, "request", slog.Attr{Value: slog.GroupValue(a[u:]...)})
	clear(a)
	*p = a[:0]
	requestLines.Put(p)
}

// requestLines are the buffers of the request log lines' attributes.
var requestLines = sync.Pool{New: func() any { return new([]slog.Attr) }}

// outcome fills st, a zero settlement, with what the request comes to if
// it ends now: complete is false when its stream ended early (the meter
// then estimates what it did not see).
func (x *exchange) outcome(st *account.Settlement, complete bool) {
	// Field by field: a composite literal would be built in a second
	// settlement on this frame, under the pricing at a stream's deepest.
	st.RequestID = x.requestID
	st.AccountID = x.key.AccountID
	st.KeyID = x.key.ID
	st.ProjectID = x.key.ProjectID
	st.Requested = usage.RequestedModel(x.req.Model)
	st.Priced = x.price.Name
	st.Fallback = x.price.Fallback()
	st.Status = x.status
	st.Endpoint = x.endpoint
	st.VendorKey = x.vendorKey
	st.Stream = x.req.Stream
	st.Transport = x.transport
	st.StartedAt = x.started
	st.EndedAt = x.s.now()
	st.Lease = x.lease
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
		if u, ok := capUsage(r.Usage, usageBounds(x.price, x.bounds)); !ok {
			r.Usage, st.Capped = u, true
		}
		priceInto(st, x.price, x.upstream.Prices, &r, x.upstream.regional[x.endpoint])
	}
}

// priceInto records on st the reply's usage r and its cost at the tier the
// reply reports and the serving endpoint's region, at price, the requested
// model's; or at the model the reply names, if that is a catalogue model
// (prices has it by name, not the fallback) whose price for this usage is
// higher: whatever made the vendor serve a dearer model than the one
// priced at admission, the account pays what was served. st.Priced then
// names that model, so the ledger entry is priced from the catalogue as
// recorded.
func priceInto(st *account.Settlement, price *pricing.Model, prices *pricing.Table, r *usage.Report, region string) {
	// The reply's own strings are the vendor's, not checked at the door.
	st.Usage, st.Reported, st.Estimated = r.Usage, usage.ReportedModel(usage.Clean(string(r.Model))), r.Estimated
	c := price.Price(r.Usage, r.ServiceTier, region)
	st.Priced = price.Name
	if m, ok := prices.Lookup(string(st.Reported)); ok && st.Reported != "" && !m.Fallback() && m.Name != price.Name {
		if d := m.Price(r.Usage, r.ServiceTier, region); d.Cost > c.Cost {
			c, st.Priced = d, m.Name
		}
	}
	st.Cost, st.Rates, st.ServiceTier, st.LongContext = c.Cost, usage.Usage(c.Rates), usage.Clean(c.Tier), c.Above
	st.TierUnknown, st.Uplift, st.Region = c.UnknownTier, c.Uplift, ""
	if c.Uplift > 0 {
		st.Region = region
	}
}

// leaseSettler is an Admitter that admits from leases (internal/leases):
// told of a leased request's settlement, it drops the request's hold
// record if not sent yet, and hands over the record's outbox entry (0:
// none), for the settler to drop once the settlement takes its place.
type leaseSettler interface {
	Settled(account.LeaseRef) (record int32)
}
