package alerts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
)

// Store is what the watcher reads and claims (store.Store).
type Store interface {
	ListAccounts(ctx context.Context) ([]account.Account, error)
	Account(ctx context.Context, id string) (account.Account, error)
	Usage(ctx context.Context, accountID string, p ledger.Period) (ledger.UsageReport, error)
	ListKeys(ctx context.Context, accountID string) ([]account.Key, error)
	KeyStates(ctx context.Context, accountID string, keyIDs ...string) ([]ledger.KeyState, error)
	ListProjects(ctx context.Context, accountID string) ([]account.Project, error)
	ProjectStates(ctx context.Context, accountID string, ids ...string) ([]ledger.KeyState, error)
	ClaimAlert(ctx context.Context, accountID, name string, ttl time.Duration) (bool, error)
	ReleaseAlert(ctx context.Context, accountID, name string) error
}

// Publisher delivers events (Dispatcher), those of one call in order.
type Publisher interface{ Publish(...Event) }

// ExpiryNotice is how long before a key's expiry key.expiring fires.
const ExpiryNotice = 7 * 24 * time.Hour

// Thresholds are the shares of a budget (percent) at which
// budget.threshold fires.
var Thresholds = []int64{80, 100}

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// StoreUnreachableAfter is how long the store must fail every probe
	// before store.unreachable fires; zero never fires it.
	StoreUnreachableAfter time.Duration
	// Sidecar names this process in store.unreachable (which cannot be
	// deduplicated in the store it is about: each sidecar sends its own).
	Sidecar string
}

// Watcher looks at every account's balance, budgets (the account's, its
// projects' and its keys'), and keys, publishes
// each crossing once (claimed in the store, so once across all sidecars)
// and exports what is left of each budget. It runs off the request path:
// a refusal only nudges it (Refused) without waiting.
type Watcher struct {
	st  Store
	pub Publisher
	o   WatcherOptions

	remaining *prometheus.GaugeVec
	published *prometheus.CounterVec
	nudges    chan nudge

	mu        sync.Mutex
	seen      map[[3]string]bool // remaining's label sets set by the last pass
	downSince time.Time
	downSent  bool
}

// nudge is a refusal by a budget: admission found its settled + held
// spend with the request's worst case above the limit, so the budget is
// spent as far as clients see and its 100 % fires now (after its 80 %).
type nudge struct {
	accountID, keyID string
	level            account.Level
	outcome          account.Outcome
}

// NewWatcher returns a watcher publishing to pub.
func NewWatcher(st Store, pub Publisher, o WatcherOptions) *Watcher {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	w := &Watcher{st: st, pub: pub, o: o, nudges: make(chan nudge, 256), seen: map[[3]string]bool{}}
	w.remaining = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_budget_remaining_usd",
		Help: "What is left of each spend budget that is set (settled spend only), by account, key (empty for the account's own) and window (daily, monthly, total). A budget not set has no series: never +Inf.",
	}, []string{"account", "key", "window"})
	w.published = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_alerts_total", Help: "Alert events this sidecar published (claimed first), by type.",
	}, []string{"type"})
	for _, t := range Types {
		w.published.WithLabelValues(t)
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(w.remaining, w.published)
	}
	return w
}

// Refused tells the watcher a request was refused; a refusal by a spend
// budget makes its 100 % fire at the next look. Never blocks.
func (w *Watcher) Refused(accountID, keyID string, level account.Level, outcome account.Outcome) {
	switch outcome {
	case account.DailyLimited, account.MonthlyLimited, account.TotalLimited:
	default:
		return
	}
	select {
	case w.nudges <- nudge{accountID, keyID, level, outcome}:
	default: // the next pass sees the budget anyway
	}
}

// Run checks every account each interval, and an account nudged by a
// refusal at once, until ctx ends.
func (w *Watcher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	w.CheckAll(ctx)
	// A budget refuses every request until its window ends: one look per
	// budget and interval is enough, however many refusals come.
	looked := map[nudge]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case n := <-w.nudges:
			now := w.o.Now()
			if at, ok := looked[n]; ok && now.Sub(at) < interval {
				continue
			}
			looked[n] = now
			if err := w.CheckAccount(ctx, n.accountID, []nudge{n}); err != nil {
				w.o.Logger.Warn("alerts: account check failed", "account", n.accountID, "err", err)
			}
		case <-t.C:
			w.CheckAll(ctx)
			clear(looked)
		}
	}
}

// CheckAll checks every account once.
func (w *Watcher) CheckAll(ctx context.Context) {
	accounts, err := w.st.ListAccounts(ctx)
	if err != nil {
		w.o.Logger.Warn("alerts: listing accounts failed", "err", err)
		return
	}
	w.mu.Lock()
	prev := w.seen
	w.seen = map[[3]string]bool{}
	w.mu.Unlock()
	for _, a := range accounts {
		if err := w.checkAccount(ctx, a, nil); err != nil {
			w.o.Logger.Warn("alerts: account check failed", "account", a.ID, "err", err)
		}
	}
	// Budgets removed since the last pass lose their series.
	w.mu.Lock()
	for l := range prev {
		if !w.seen[l] {
			w.remaining.DeleteLabelValues(l[0], l[1], l[2])
		}
	}
	w.mu.Unlock()
}

// CheckAccount checks one account, with the refusals that nudged it.
func (w *Watcher) CheckAccount(ctx context.Context, accountID string, refused []nudge) error {
	a, err := w.st.Account(ctx, accountID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return w.checkAccount(ctx, a, refused)
}

// budget is one spend limit of an account, project or key in its current
// window.
type budget struct {
	level     account.Level
	keyID     string
	projectID string
	window    string // daily, monthly, total
	stamp     string // the window's UTC day or month; "" for total
	ttl       time.Duration
	limit     int64 // nano-USD
	used      int64 // settled spend of the window
	held      int64 // the holds of requests running now
	hit       bool  // a request was refused by it
}

func (w *Watcher) checkAccount(ctx context.Context, a account.Account, refused []nudge) error {
	now := w.o.Now().UTC()
	u, err := w.st.Usage(ctx, a.ID, ledger.Day)
	if err != nil {
		return err
	}
	day, month := now.Format("20060102"), now.Format("200601")
	dayTTL, monthTTL := 48*time.Hour, 40*24*time.Hour
	var budgets []budget
	add := func(b budget) {
		if b.limit > 0 {
			budgets = append(budgets, b)
		}
	}
	add(budget{level: account.AccountLevel, window: "daily", stamp: day, ttl: dayTTL, limit: u.Limits.DailyNanoUSD, used: u.DailyUsed, held: u.Held})
	add(budget{level: account.AccountLevel, window: "monthly", stamp: month, ttl: monthTTL, limit: u.Limits.MonthlyNanoUSD, used: u.MonthUsed, held: u.Held})

	keys, err := w.st.ListKeys(ctx, a.ID)
	if err != nil {
		return err
	}
	if err := w.projectBudgets(ctx, a.ID, add, day, month, dayTTL, monthTTL); err != nil {
		return err
	}
	var limited []account.Key
	projectOf := map[string]string{} // a key's project, for its project's refusals
	for _, k := range keys {
		projectOf[k.ID] = k.ProjectID
		if !k.RevokedAt.IsZero() {
			continue
		}
		if k.Kind == account.ModelKey && (k.Limits.DailyNanoUSD > 0 || k.Limits.MonthlyNanoUSD > 0 || k.Limits.TotalNanoUSD > 0) {
			limited = append(limited, k)
		}
		if exp := k.ExpiresAt; !exp.IsZero() && exp.After(now) && exp.Sub(now) <= ExpiryNotice {
			w.fire(ctx, a.ID, "expiring:"+k.ID+":"+strconv.FormatInt(exp.UnixMilli(), 10), ExpiryNotice+24*time.Hour, Event{
				Type: KeyExpiring, AccountID: a.ID, KeyID: k.ID,
				Data: map[string]any{"label": k.Label, "kind": string(k.Kind), "expires_at": exp.UTC().Format(time.RFC3339)},
			})
		}
	}
	if len(limited) > 0 {
		ids := make([]string, len(limited))
		for i, k := range limited {
			ids[i] = k.ID
		}
		states, err := w.st.KeyStates(ctx, a.ID, ids...)
		if err != nil {
			return err
		}
		for i, k := range limited {
			s := states[i]
			add(budget{level: account.KeyLevel, keyID: k.ID, window: "daily", stamp: day, ttl: dayTTL, limit: k.Limits.DailyNanoUSD, used: s.Day.Cost, held: s.Held})
			add(budget{level: account.KeyLevel, keyID: k.ID, window: "monthly", stamp: month, ttl: monthTTL, limit: k.Limits.MonthlyNanoUSD, used: s.Month.Cost, held: s.Held})
			add(budget{level: account.KeyLevel, keyID: k.ID, window: "total", limit: k.Limits.TotalNanoUSD, used: s.Total.Cost, held: s.Held})
		}
	}
	for _, n := range refused {
		window := map[account.Outcome]string{account.DailyLimited: "daily", account.MonthlyLimited: "monthly", account.TotalLimited: "total"}[n.outcome]
		for i := range budgets {
			b := &budgets[i]
			if b.level != n.level || b.window != window {
				continue
			}
			switch n.level {
			case account.AccountLevel:
				b.hit = true
			case account.KeyLevel:
				b.hit = b.hit || b.keyID == n.keyID
			case account.ProjectLevel:
				b.hit = b.hit || b.projectID == projectOf[n.keyID]
			}
		}
	}
	for _, b := range budgets {
		if b.level != account.ProjectLevel { // the gauge's labels have no project
			w.mu.Lock()
			w.seen[[3]string{a.ID, b.keyID, b.window}] = true
			w.mu.Unlock()
			w.remaining.WithLabelValues(a.ID, b.keyID, b.window).Set(pricing.USD(max(b.limit-b.used, 0)))
		}
		// Spend is settled + held, as admission counts it. Thresholds are
		// claimed and published lowest first, all in one call, so that a
		// receiver never gets a budget's 100 % before its 80 %: the first
		// look that finds 100 % (a refusal, say) sends both, in order.
		var evs []Event
		for _, t := range Thresholds {
			if (b.used+b.held)*100 < t*b.limit && !b.hit {
				break
			}
			// The name carries the window and the limit: a new window, or
			// a limit raised and reached again, is a new crossing. At most
			// one of keyID and projectID is set (by the level).
			name := fmt.Sprintf("budget:%s:%s:%s:%s:%d:%d", b.level, b.keyID+b.projectID, b.window, b.stamp, b.limit, t)
			ok, err := w.claim(ctx, a.ID, name, b.ttl)
			if err != nil {
				break // a higher threshold alone would arrive first
			}
			if ok {
				evs = append(evs, w.event(Event{
					Type: BudgetThreshold, AccountID: a.ID, KeyID: b.keyID, ProjectID: b.projectID,
					Data: map[string]any{
						"level": b.level.String(), "window": b.window, "percent": t,
						"limit_usd": pricing.USD(b.limit), "used_usd": pricing.USD(b.used), "held_usd": pricing.USD(b.held),
					},
				}))
			}
		}
		if len(evs) > 0 {
			w.pub.Publish(evs...)
		}
	}

	if a.BalanceAlert > 0 {
		name := "balance:" + strconv.FormatInt(a.BalanceAlert, 10)
		if u.Balance < a.BalanceAlert {
			w.fire(ctx, a.ID, name, 0, Event{
				Type: BalanceLow, AccountID: a.ID,
				Data: map[string]any{"balance_usd": pricing.USD(u.Balance), "threshold_usd": pricing.USD(a.BalanceAlert)},
			})
		} else if err := w.st.ReleaseAlert(ctx, a.ID, name); err != nil {
			return err // a top-up re-arms the alert
		}
	}
	return nil
}

// projectBudgets adds the spend budgets of the account's projects that
// set any. The default project has no limits of its own (its spend is the
// account's), so it is left out.
func (w *Watcher) projectBudgets(ctx context.Context, accountID string, add func(budget), day, month string, dayTTL, monthTTL time.Duration) error {
	projects, err := w.st.ListProjects(ctx, accountID)
	if err != nil {
		return err
	}
	var limited []account.Project
	for _, p := range projects {
		if p.ID != account.DefaultProject && (p.Limits.DailyNanoUSD > 0 || p.Limits.MonthlyNanoUSD > 0 || p.Limits.TotalNanoUSD > 0) {
			limited = append(limited, p)
		}
	}
	if len(limited) == 0 {
		return nil
	}
	ids := make([]string, len(limited))
	for i, p := range limited {
		ids[i] = p.ID
	}
	states, err := w.st.ProjectStates(ctx, accountID, ids...)
	if err != nil {
		return err
	}
	for i, p := range limited {
		s, lvl := states[i], account.ProjectLevel
		add(budget{level: lvl, projectID: p.ID, window: "daily", stamp: day, ttl: dayTTL, limit: p.Limits.DailyNanoUSD, used: s.Day.Cost, held: s.Held})
		add(budget{level: lvl, projectID: p.ID, window: "monthly", stamp: month, ttl: monthTTL, limit: p.Limits.MonthlyNanoUSD, used: s.Month.Cost, held: s.Held})
		add(budget{level: lvl, projectID: p.ID, window: "total", limit: p.Limits.TotalNanoUSD, used: s.Total.Cost, held: s.Held})
	}
	return nil
}

// fire publishes ev if this sidecar is the first to claim name.
func (w *Watcher) fire(ctx context.Context, accountID, name string, ttl time.Duration, ev Event) {
	if ok, _ := w.claim(ctx, accountID, name, ttl); ok {
		w.pub.Publish(w.event(ev))
	}
}

// claim reports whether this sidecar is the first to claim name; a
// failure is logged here.
func (w *Watcher) claim(ctx context.Context, accountID, name string, ttl time.Duration) (bool, error) {
	ok, err := w.st.ClaimAlert(ctx, accountID, name, ttl)
	if err != nil {
		w.o.Logger.Warn("alerts: claim failed", "account", accountID, "err", err)
	}
	return ok, err
}

// event stamps ev to be published, and counts it.
func (w *Watcher) event(ev Event) Event {
	ev.ID, ev.CreatedAt = NewEventID(), w.o.Now().UTC()
	w.published.WithLabelValues(ev.Type).Inc()
	return ev
}

// gatewayAlerts is the pseudo-account under which alerts about the gateway
// itself (not an account) are claimed.
const gatewayAlerts = "gateway"

// VendorKeyRefused publishes vendor_key.refused once across every sidecar
// per refusal of a pooled vendor key (401, 402, 403): claimed in the store
// for the key's probe interval, so a key still refused at its next probe
// alerts again, once.
func (w *Watcher) VendorKeyRefused(ctx context.Context, upstream, key string, status int, probe time.Duration) {
	w.fire(ctx, gatewayAlerts, "vendor_key:"+upstream+":"+key, max(probe, time.Second), Event{
		Type: VendorKeyRefused,
		Data: map[string]any{"upstream": upstream, "vendor_key": key, "status": status, "probe_in_seconds": int64(probe.Seconds())},
	})
}

// VendorKeyLimited publishes vendor_key.limited once across every sidecar
// when a pooled vendor key starts cooling down on the vendor's evidence
// (its rate limit spent, an overload), at most once per key per window
// (the pool's corroborate_window): a key limited again and again alerts
// once a window, not per cool-down.
func (w *Watcher) VendorKeyLimited(ctx context.Context, upstream, key string, status int, until time.Time, window time.Duration) {
	w.fire(ctx, gatewayAlerts, "vendor_key_limited:"+upstream+":"+key, max(window, time.Second), Event{
		Type: VendorKeyLimited,
		Data: map[string]any{"upstream": upstream, "vendor_key": key, "status": status, "until": until.UTC().Format(time.RFC3339)},
	})
}

// ModelMismatchEvery is how often model.mismatch fires at most for one
// account, upstream, requested and served model, across every sidecar: a
// relay or vendor that serves another model does so on every request.
const ModelMismatchEvery = 10 * time.Minute

// ModelMismatch publishes model.mismatch for a reply settled at the price
// of priced, the dearer catalogue model it names, instead of requested,
// the model priced at admission; at most once per ModelMismatchEvery for
// the account, upstream and pair of models, across every sidecar.
func (w *Watcher) ModelMismatch(ctx context.Context, upstream, accountID, keyID string, requested, priced usage.PricedModel) {
	w.fire(ctx, accountID, "model_mismatch:"+upstream+":"+string(requested)+":"+string(priced), ModelMismatchEvery, Event{
		Type: ModelMismatch, AccountID: accountID, KeyID: keyID,
		Data: map[string]any{"upstream": upstream, "requested_model": string(requested), "priced_model": string(priced)},
	})
}

// Publish sends an event no store claim stands for (an admin action,
// which happens once): suspended, resumed.
func (w *Watcher) Publish(ev Event) {
	w.pub.Publish(w.event(ev))
}

// StoreResult takes each store probe's result: a store failing every probe
// for StoreUnreachableAfter fires store.unreachable once per outage.
func (w *Watcher) StoreResult(up bool) {
	if w.o.StoreUnreachableAfter <= 0 {
		return
	}
	now := w.o.Now()
	w.mu.Lock()
	if up {
		w.downSince, w.downSent = time.Time{}, false
		w.mu.Unlock()
		return
	}
	if w.downSince.IsZero() {
		w.downSince = now
	}
	send := !w.downSent && now.Sub(w.downSince) >= w.o.StoreUnreachableAfter
	if send {
		w.downSent = true
	}
	since := w.downSince
	w.mu.Unlock()
	if send {
		w.Publish(Event{Type: StoreUnreachable, Data: map[string]any{
			"since": since.UTC().Format(time.RFC3339), "sidecar": w.o.Sidecar,
		}})
	}
}

// reconcileDriftKeep is how long a window's reconcile.drift claim lasts:
// longer than a window is ever run again.
const reconcileDriftKeep = 90 * 24 * time.Hour

// ReconcileDrift publishes reconcile.drift once across every sidecar and
// run per vendor key and window whose unexplained difference is over the
// configured threshold.
func (w *Watcher) ReconcileDrift(ctx context.Context, upstream, vendorKey, vendorKeyID string, start time.Time, width string, tokens, nanoUSD int64) {
	w.fire(ctx, gatewayAlerts, "reconcile_drift:"+upstream+":"+vendorKeyID+":"+width+":"+start.UTC().Format(time.RFC3339), reconcileDriftKeep, Event{
		Type: ReconcileDrift,
		Data: map[string]any{
			"upstream": upstream, "vendor_key": vendorKey, "vendor_key_id": vendorKeyID,
			"window_start": start.UTC().Format(time.RFC3339), "bucket_width": width,
			"unexplained_tokens": tokens, "unexplained_nano_usd": nanoUSD,
		},
	})
}
