package main

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// reconcileTimeout bounds one report page through the relay.
const reconcileTimeout = 30 * time.Second

// newReconciler reconciles the upstreams that have an admin key, reading
// their reports through the relay; nil when none has one.
func newReconciler(c *config.Config, st *store.Store, prices pricing.Book) *reconcile.Runner {
	r := &reconcile.Runner{
		Relay:    "http://" + c.Listeners.Relay,
		Client:   &http.Client{Timeout: reconcileTimeout},
		Ledger:   st,
		Settling: c.Limits.MaxRequestDuration.D(),
	}
	for _, u := range c.Upstreams {
		if u.AdminCredentialEnv == "" {
			continue
		}
		keys := map[string]string{}
		for _, k := range u.Keys() {
			keys[k.Name] = k.VendorKeyID
		}
		table := prices[u.Name]
		r.Upstreams = append(r.Upstreams, reconcile.Upstream{
			Name: u.Name, Format: u.Format, Keys: keys,
			Serves: func(model string) bool {
				_, ok := table.Lookup(model)
				return ok
			},
			Price: func(model string, use usage.Usage) int64 {
				m, ok := table.Lookup(model)
				if !ok {
					return 0
				}
				return m.Price(use, "", "").Cost
			},
			Costs: true,
		})
	}
	if len(r.Upstreams) == 0 {
		return nil
	}
	return r
}

// abandonedQueue bounds the abandoned attempts waiting for the store: a
// store outage drops the excess (logged), never blocks Envoy's log.
const abandonedQueue = 4096

// abandonedRecorder writes the attempts Envoy abandoned to the store, off
// Envoy's log stream.
type abandonedRecorder struct {
	st  *store.Store
	log *slog.Logger
	ch  chan account.AbandonedAttempt
}

func newAbandonedRecorder(st *store.Store, log *slog.Logger) *abandonedRecorder {
	r := &abandonedRecorder{st: st, log: log, ch: make(chan account.AbandonedAttempt, abandonedQueue)}
	go r.run()
	return r
}

// Record queues a; it never blocks.
func (r *abandonedRecorder) Record(a account.AbandonedAttempt) {
	select {
	case r.ch <- a:
	default:
		r.log.Warn("abandoned attempt not recorded: the queue to the store is full", "upstream", a.Upstream, "vendor_key", a.VendorKey, "reason", a.Reason)
	}
}

func (r *abandonedRecorder) run() {
	for a := range r.ch {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.st.RecordAbandoned(ctx, a); err != nil {
			r.log.Warn("abandoned attempt not recorded", "upstream", a.Upstream, "vendor_key", a.VendorKey, "reason", a.Reason, "err", err)
		}
		cancel()
	}
}
