package extproc

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/modelgateway/gateway/extproc/format"
	"github.com/modelgateway/gateway/extproc/operation"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// Background responses (responses.create with "background": true) run at
// the vendor after the create request has been answered "queued". Such a
// request is not settled when it ends: it is parked (store.Park) with its
// hold, and settled once, with the vendor's final usage, when a final
// state of the response is seen: in the client's own retrieval or stream
// (GET /v1/responses/{id}, also ?stream=true), in the reply to its
// cancellation, or by the Reconciler, which polls the vendor for parked
// responses that nobody reads. A stream of a background response cut
// before its end is parked too: the vendor goes on generating. Settlement
// is idempotent by request id, so sidecars racing to settle one response
// bill it once.

// Parking keeps background responses until they end (the store implements
// it).
type Parking interface {
	Park(ctx context.Context, p account.Parked, next time.Time) error
	Parked(ctx context.Context, accountID, responseID string) (account.Parked, bool, error)
	Unpark(ctx context.Context, accountID, responseID string) error
	ClaimDue(ctx context.Context, now, next time.Time, limit int) ([]account.BackgroundRef, error)
	RenewHolds(ctx context.Context, rs []account.Renewal) ([]string, error)
}

// DefaultBackgroundPoll is how often a parked response is looked at by a
// reconciler.
const DefaultBackgroundPoll = 10 * time.Second

// park keeps the request of background response id, instead of settling
// it, with the outcome known so far as its checkpoint; it reports whether
// it did. The hold is then renewed by the reconcilers until the response
// ends.
func (x *exchange) park(id string, complete bool) bool {
	var st account.Settlement
	x.outcome(&st, complete)
	ctx, cancel := context.WithTimeout(context.Background(), x.s.settleT)
	defer cancel()
	p := account.Parked{ResponseID: id, Upstream: x.upstream.Name, Settlement: st}
	caps := usageBounds(x.price, x.bounds)
	p.MaxInput, p.MaxOutput = caps.input, caps.output // background responses bill no audio seconds
	if err := x.s.parking.Park(ctx, p, x.s.now().Add(x.s.bgPoll)); err != nil {
		// Settled now at what is known: never left unbilled.
		x.s.log.Error("parking a background response failed; settled at its estimate", "request_id", x.requestID, "err", err)
		x.s.metrics.storeErrors.WithLabelValues("park").Inc()
		return false
	}
	ck := st.Checkpoint()
	if _, err := x.s.parking.RenewHolds(ctx, []account.Renewal{{AccountID: st.AccountID, RequestID: st.RequestID, Checkpoint: ck}}); err != nil {
		x.s.log.Warn("renewing a parked hold failed; a reconciler renews it", "request_id", x.requestID, "err", err)
	}
	x.settled = true
	if x.req.Stream {
		x.s.metrics.streams.Dec()
	}
	x.s.holds.Forget(x.open)
	x.s.log.Info("background response parked", "request_id", x.requestID, "account", st.AccountID, "model", st.Priced)
	return true
}

// watchParked makes the exchange read the reply to a request on response
// id, if it is parked: its final state settles the parked request. It
// reports whether it is.
func (x *exchange) watchParked(ctx context.Context, op *operation.Operation, id string, stream bool) bool {
	if x.s.parking == nil {
		return false
	}
	p, ok, err := x.s.parking.Parked(ctx, x.key.AccountID, id)
	if err != nil {
		x.s.log.Warn("reading a parked response failed; a reconciler settles it", "err", err)
		return false
	}
	if !ok {
		return false
	}
	x.parked, x.op, x.req.Stream = &p, op, stream
	return true
}

// parkedChunk meters the reply to a request on a parked response and
// settles the parked request once the reply shows the response's final
// state. The reply passes unchanged.
func (x *exchange) parkedChunk(head *replyHead, data []byte, end bool) {
	if x.status == 0 && head != nil {
		if code := head.status; code != 0 {
			x.status = code
			if code >= 200 && code <= 299 {
				x.meter = x.op.Format.NewMeter(format.Request{Stream: x.req.Stream}, nil, replyType(x.req.Stream))
				x.stored, _ = x.meter.(format.Stored)
				x.items, _ = x.meter.(format.StoredItems)
			}
		}
	}
	if x.stored != nil && !x.settled {
		x.meter.Write(data)
		if x.req.Stream || end {
			if _, final := x.stored.Response(); final {
				x.settled = true
				// The create's reply had no items yet: its end has them.
				x.bindItems(context.Background())
				x.s.settleParked(*x.parked, x.meter.Usage(true))
			}
		}
	}
}

// settleParked settles a parked request at r, the usage of its response's
// final state, priced as at its admission (its model's current prices; the
// rates it was parked with if the model is no longer served), and then
// forgets it.
func (s *Server) settleParked(p account.Parked, r usage.Report) {
	st := p.Settlement
	st.Status = 200
	st.EndedAt = s.now()
	st.Interrupted = false
	if p.MaxOutput > 0 { // parked before its bounds were recorded: as before
		if u, ok := capUsage(r.Usage, usageCaps{input: p.MaxInput, output: p.MaxOutput}); !ok {
			r.Usage, st.Capped = u, true
		}
	}
	s.noteCapped(p.Upstream, st)
	up := s.upstreamNamed(p.Upstream)
	var price *pricing.Model
	if up != nil {
		price, _ = up.Prices.Lookup(string(st.Requested))
	}
	if price != nil {
		// The endpoint that ran the create processed the response.
		priceInto(&st, price, up.Prices, &r, up.regional[st.Endpoint])
		s.noteDearer(p.Upstream, price.Name, st)
	} else {
		st.Usage, st.Reported, st.Estimated = r.Usage, r.Model, r.Estimated
		st.Cost = pricing.CostUplifted(st.Usage, pricing.Rates(st.Rates), st.Uplift)
	}
	s.settler.enqueue(st, 0, false, func(st *account.Settlement, res ledger.SettleResult, took time.Duration) {
		if res.Err != nil {
			s.metrics.storeErrors.WithLabelValues("settle").Inc()
			s.log.Error("settling a background response failed", "request_id", st.RequestID, "account", st.AccountID, "err", res.Err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.settleT)
		defer cancel()
		if err := s.parking.Unpark(ctx, st.AccountID, p.ResponseID); err != nil {
			s.log.Warn("forgetting a settled background response failed", "request_id", st.RequestID, "err", err)
		}
		s.recordSettled(p.Upstream, string(st.Priced), *st, true)
	})
}

func (s *Server) upstreamNamed(name string) *Upstream {
	for _, u := range s.upstreams {
		if u.Name == name {
			return u
		}
	}
	return nil
}

// A Reconciler settles parked background responses whose end nobody has
// read: every poll interval it claims the parked responses that are due
// (each goes to one reconciler per interval, whichever sidecar runs it),
// reads each from the vendor through Envoy's relay listener, which adds
// the vendor credential, and settles those that have ended. The others'
// holds are renewed until they end. A response the vendor no longer knows
// (deleted, expired) is settled at what was known when it was parked,
// marked estimated.
type Reconciler struct {
	srv    *Server
	relay  string // http://host:port of the relay listener
	client *http.Client
}

// NewReconciler returns a reconciler reading the vendors through the
// relay listener at relayAddr (host:port).
func (s *Server) NewReconciler(relayAddr string) *Reconciler {
	return &Reconciler{srv: s, relay: "http://" + relayAddr, client: &http.Client{Timeout: 30 * time.Second}}
}

// Run reconciles every tick until ctx ends.
func (r *Reconciler) Run(ctx context.Context, tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Once(ctx)
		}
	}
}

// claimBatch bounds the parked responses one pass takes.
const claimBatch = 100

// Once claims the parked responses due now and looks at each; it returns
// how many it settled.
func (r *Reconciler) Once(ctx context.Context) int {
	s := r.srv
	if s.parking == nil {
		return 0
	}
	now := s.now()
	refs, err := s.parking.ClaimDue(ctx, now, now.Add(s.bgPoll), claimBatch)
	if err != nil {
		s.log.Warn("claiming background responses failed", "err", err)
		return 0
	}
	settled := 0
	for _, ref := range refs {
		if r.check(ctx, ref) {
			settled++
		}
	}
	return settled
}

// check reads one parked response from the vendor and settles it if it
// has ended; otherwise it renews the request's hold.
func (r *Reconciler) check(ctx context.Context, ref account.BackgroundRef) bool {
	s := r.srv
	p, ok, err := s.parking.Parked(ctx, ref.AccountID, ref.ResponseID)
	if err != nil {
		return false
	}
	if !ok {
		// Settled meanwhile; its schedule entry may remain.
		s.parking.Unpark(ctx, ref.AccountID, ref.ResponseID)
		return false
	}
	up := s.upstreamNamed(p.Upstream)
	op := up.polled()
	if op == nil {
		s.log.Warn("a parked response's upstream no longer serves background responses", "request_id", p.Settlement.RequestID, "upstream", p.Upstream)
		return false
	}
	u := r.relay + "/" + p.Upstream + strings.Replace(op.Poll, "{id}", url.PathEscape(p.ResponseID), 1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false
	}
	// A stored response is the vendor key's (its organisation's): read it
	// with the key that created it, which the parked settlement names.
	if c := keyClusterOf(up, p.Settlement.VendorKey); c != "" {
		req.Header.Set(config.KeyClusterHeader, c)
	}
	resp, err := r.client.Do(req)
	if err == nil {
		defer resp.Body.Close()
	}
	switch {
	case err == nil && resp.StatusCode == http.StatusOK:
		m := op.Format.NewMeter(format.Request{}, nil, resp.Header.Get("Content-Type"))
		buf := make([]byte, 32<<10)
		body := io.LimitReader(resp.Body, format.MaxJSONBody+1)
		for {
			n, rerr := body.Read(buf)
			m.Write(buf[:n])
			if rerr != nil {
				break
			}
		}
		if st, ok := m.(format.Stored); !ok {
			break
		} else if _, final := st.Response(); final {
			if items, ok := m.(format.StoredItems); ok {
				s.bindItems(ctx, p.Settlement.RequestID, items, p.Settlement.AccountID, p.Settlement.VendorKey)
			}
			s.settleParked(p, m.Usage(true))
			return true
		}
	case err == nil && resp.StatusCode == http.StatusNotFound:
		// Gone at the vendor before its end was seen: what was known.
		st := p.Settlement
		s.settleParked(p, usage.Report{Usage: st.Usage, Model: st.Reported, ServiceTier: st.ServiceTier, Estimated: true})
		return true
	case err != nil:
		s.log.Warn("polling a background response failed", "request_id", p.Settlement.RequestID, "err", err)
	}
	if _, err := s.parking.RenewHolds(ctx, []account.Renewal{{AccountID: p.Settlement.AccountID, RequestID: p.Settlement.RequestID}}); err != nil {
		s.log.Warn("renewing a parked hold failed", "request_id", p.Settlement.RequestID, "err", err)
	}
	return false
}
