// Package alerts tells operators and customers, by webhook, what they must
// act on before requests fail: a balance below its threshold, a budget at
// 80 % and at 100 %, a key about to expire, an account suspended or
// resumed, the store unreachable.
//
// Events are found off the request path (Watcher) and delivered off it
// (Dispatcher): a bounded queue, retries with backoff, at-least-once with
// an event id for the receiver to deduplicate. Each crossing is claimed in
// the store first (store.ClaimAlert), so one fires once across every
// sidecar. No payload carries a prompt, a reply, a secret or a token.
package alerts

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Event types.
const (
	BalanceLow        = "balance.low"
	BudgetThreshold   = "budget.threshold"
	KeyExpiring       = "key.expiring"
	AccountSuspended  = "account.suspended"
	AccountResumed    = "account.resumed"
	StoreUnreachable  = "store.unreachable"
	VendorKeyRefused  = "vendor_key.refused"
	VendorKeyLimited  = "vendor_key.limited"
	ModelMismatch     = "model.mismatch"
	ReconcileDrift    = "reconcile.drift"
	signatureVersion  = "v1"
	maxResponseToRead = 4 << 10
)

// Types are every event type, in the order the docs list them.
var Types = []string{BalanceLow, BudgetThreshold, KeyExpiring, AccountSuspended, AccountResumed, StoreUnreachable, VendorKeyRefused, VendorKeyLimited, ModelMismatch, ReconcileDrift}

// Event is one alert, as its webhook body: JSON with these fields.
type Event struct {
	// ID is unique per crossing; a retried delivery carries the same id, so
	// a receiver deduplicates by it.
	ID        string    `json:"id"`
	Type      string    `json:"type"`
	CreatedAt time.Time `json:"created_at"`
	AccountID string    `json:"account_id,omitempty"`
	KeyID     string    `json:"key_id,omitempty"`
	// ProjectID names the project of a project's budget.threshold.
	ProjectID string         `json:"project_id,omitempty"`
	Data      map[string]any `json:"data"`
}

// NewEventID returns a fresh event id.
func NewEventID() string {
	var b [12]byte
	rand.Read(b[:]) // never fails
	return "evt_" + hex.EncodeToString(b[:])
}

// Endpoint is one webhook receiver.
type Endpoint struct {
	URL    string
	Secret []byte   // the HMAC key of every delivery's signature (Sign; ParseSecret)
	Events []string // the types sent there; empty: every type
}

func (e Endpoint) wants(typ string) bool { return len(e.Events) == 0 || slices.Contains(e.Events, typ) }

// SecretPrefix starts a signing secret in the Standard Webhooks form:
// the base64 of the HMAC key follows it.
const SecretPrefix = "whsec_"

// ParseSecret returns the HMAC key of a configured signing secret. A
// secret in the Standard Webhooks form ("whsec_" and base64, padded or
// not) is its decoded bytes, as the official libraries read it. Any other
// string is its own bytes, as before the form was supported, so that
// receivers set up with it keep verifying; the libraries verify those with
// StandardSecret of the same bytes.
func ParseSecret(s string) ([]byte, error) {
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		if s == "" {
			return nil, errors.New("empty signing secret")
		}
		return []byte(s), nil
	}
	key, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(b64, "="))
	if err != nil {
		return nil, fmt.Errorf("signing secret: %s followed by invalid base64: %w", SecretPrefix, err)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("signing secret: nothing after %s", SecretPrefix)
	}
	return key, nil
}

// StandardSecret is key in the Standard Webhooks form, which receivers
// give the official libraries.
func StandardSecret(key []byte) string {
	return SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

// Sign returns the signature header of a delivery, in the Standard
// Webhooks scheme: "v1," followed by the base64 HMAC-SHA256, under key
// (ParseSecret), of id "." timestamp "." body.
func Sign(key []byte, id string, timestamp int64, body []byte) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%d.", id, timestamp)
	m.Write(body)
	return signatureVersion + "," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Headers of a delivery.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp" // unix seconds
	HeaderSignature = "webhook-signature"
)

// DispatcherOptions configure a Dispatcher. Zero values pick the defaults.
type DispatcherOptions struct {
	QueueSize  int           // deliveries waiting, retries included; default 1000
	Workers    int           // deliveries in flight at once; default 4
	Attempts   int           // tries per delivery; default 8
	Backoff    time.Duration // the first retry's wait, doubled each time (up to MaxBackoff); default 1s
	MaxBackoff time.Duration // default 5m
	Timeout    time.Duration // one attempt; default 10s
	Client     *http.Client  // default: one with Timeout
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	Now        func() time.Time

	onResult func(result string) // tests: hears each attempt's outcome once counted
}

// Dispatcher delivers events to the endpoints that want them. Publish never
// blocks: a full queue drops the delivery (counted), so a receiver that is
// down or slow never slows a request or another receiver for long.
type Dispatcher struct {
	endpoints []Endpoint
	o         DispatcherOptions
	queue     chan *delivery

	mu      sync.Mutex
	timers  map[*time.Timer]struct{}
	closed  bool
	wg      sync.WaitGroup
	stop    context.CancelFunc
	stopCtx context.Context

	deliveries *prometheus.CounterVec
	depth      prometheus.GaugeFunc
}

type delivery struct {
	ep      Endpoint
	ev      Event
	body    []byte
	attempt int
	// then are the deliveries to the same endpoint published together with
	// this one, after it: the next is queued once this one is delivered or
	// has failed for good, so that the receiver gets them in order (a
	// budget's 80 % before its 100 %), retries included.
	then []*delivery
}

// NewDispatcher starts delivering to endpoints; Close stops it.
func NewDispatcher(endpoints []Endpoint, o DispatcherOptions) *Dispatcher {
	if o.QueueSize <= 0 {
		o.QueueSize = 1000
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Attempts <= 0 {
		o.Attempts = 8
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: o.Timeout}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	d := &Dispatcher{endpoints: endpoints, o: o, queue: make(chan *delivery, o.QueueSize), timers: map[*time.Timer]struct{}{}}
	d.stopCtx, d.stop = context.WithCancel(context.Background())
	d.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_webhook_deliveries_total",
		Help: "Webhook delivery attempts by result: delivered, retried (a failed attempt that will be tried again), failed (attempts exhausted), dropped (queue full).",
	}, []string{"result"})
	for _, r := range []string{"delivered", "retried", "failed", "dropped"} {
		d.deliveries.WithLabelValues(r)
	}
	d.depth = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gateway_webhook_queue_depth", Help: "Webhook deliveries waiting in the queue.",
	}, func() float64 { return float64(len(d.queue)) })
	if o.Registerer != nil {
		o.Registerer.MustRegister(d.deliveries, d.depth)
	}
	for range o.Workers {
		d.wg.Add(1)
		go d.work()
	}
	return d
}

// Publish queues evs for every endpoint that wants their types. Each
// endpoint gets the events of one call in their order: one is sent only
// once the one before it is delivered or has failed for good.
func (d *Dispatcher) Publish(evs ...Event) {
	bodies := make([][]byte, len(evs))
	for i := range evs {
		if evs[i].Data == nil {
			evs[i].Data = map[string]any{}
		}
		body, err := json.Marshal(evs[i])
		if err != nil {
			d.o.Logger.Error("alerts: event not encodable", "type", evs[i].Type, "err", err)
			continue
		}
		bodies[i] = body
	}
	for _, ep := range d.endpoints {
		var chain []*delivery
		for i, ev := range evs {
			if bodies[i] != nil && ep.wants(ev.Type) {
				chain = append(chain, &delivery{ep: ep, ev: ev, body: bodies[i]})
			}
		}
		if len(chain) > 0 {
			chain[0].then = chain[1:]
			d.enqueue(chain[0])
		}
	}
}

func (d *Dispatcher) enqueue(dl *delivery) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	select {
	case d.queue <- dl:
	default:
		// What would have followed it is dropped too: sent alone, it would
		// arrive out of order.
		for _, x := range append([]*delivery{dl}, dl.then...) {
			d.count("dropped")
			d.o.Logger.Warn("alerts: webhook queue full; delivery dropped", "event", x.ev.ID, "type", x.ev.Type)
		}
	}
}

// next queues the delivery that follows dl, if any.
func (d *Dispatcher) next(dl *delivery) {
	if len(dl.then) == 0 {
		return
	}
	n := dl.then[0]
	n.then = dl.then[1:]
	d.enqueue(n)
}

func (d *Dispatcher) work() {
	defer d.wg.Done()
	for {
		select {
		case <-d.stopCtx.Done():
			return
		case dl := <-d.queue:
			d.attempt(dl)
		}
	}
}

// attempt makes one delivery attempt and schedules the next on failure.
func (d *Dispatcher) attempt(dl *delivery) {
	dl.attempt++
	err := d.post(dl)
	if err == nil {
		d.count("delivered")
		d.next(dl)
		return
	}
	if dl.attempt >= d.o.Attempts {
		d.count("failed")
		d.o.Logger.Error("alerts: webhook delivery failed", "event", dl.ev.ID, "type", dl.ev.Type, "attempts", dl.attempt, "err", err)
		d.next(dl)
		return
	}
	d.count("retried")
	wait := d.o.Backoff << (dl.attempt - 1)
	if wait > d.o.MaxBackoff || wait <= 0 {
		wait = d.o.MaxBackoff
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		d.mu.Lock()
		delete(d.timers, t)
		d.mu.Unlock()
		d.enqueue(dl)
	})
	d.timers[t] = struct{}{}
}

func (d *Dispatcher) count(result string) {
	d.deliveries.WithLabelValues(result).Inc()
	if d.o.onResult != nil {
		d.o.onResult(result)
	}
}

// post sends one attempt; a 2xx answer delivers it.
func (d *Dispatcher) post(dl *delivery) error {
	ctx, cancel := context.WithTimeout(d.stopCtx, d.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.ep.URL, bytes.NewReader(dl.body))
	if err != nil {
		return err
	}
	ts := d.o.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "model-gateway-webhooks")
	req.Header.Set(HeaderID, dl.ev.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(dl.ep.Secret, dl.ev.ID, ts, dl.body))
	resp, err := d.o.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var discard [maxResponseToRead]byte
	resp.Body.Read(discard[:]) // let the connection be reused for a short answer
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return nil
}

// Close stops the workers and pending retries; deliveries not yet made are
// dropped (at-least-once holds while the process runs).
func (d *Dispatcher) Close() {
	d.mu.Lock()
	d.closed = true
	for t := range d.timers {
		t.Stop()
	}
	d.mu.Unlock()
	d.stop()
	d.wg.Wait()
}
