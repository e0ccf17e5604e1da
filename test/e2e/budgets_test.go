package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Budgets through the money paths that settle a request later than its
// reply: a reconciliation after a sweep, and a background response settled
// by the reconciler (issue #33). Each budget is exceeded by no more than
// docs/billing.md's bound, and each threshold of each budget is announced
// once, across two sidecars.

const budgetWebhookSecret = "whsec-e2e-budgets-3c9d"

// alertedStacks configures both sidecars of a test to look for crossings
// every 200 ms and deliver them to recv.
func alertedStacks(recv *webhookReceiver, more func(*config.Config)) (func(*config.Config), []string) {
	return func(c *config.Config) {
		c.Alerts.Interval = config.Duration(200 * time.Millisecond)
		c.Alerts.Webhooks = []config.Webhook{{URL: recv.srv.URL, SecretEnv: "GATEWAY_WEBHOOK_SECRET"}}
		if more != nil {
			more(c)
		}
	}, []string{"GATEWAY_WEBHOOK_SECRET=" + budgetWebhookSecret}
}

// budgetEvents collects the budget.threshold events of one account as the
// receiver accepts them, by event id (a retried delivery is the same
// event).
type budgetEvents struct {
	recv    *webhookReceiver
	account string
	byID    map[string]alerts.Event
}

func (b *budgetEvents) drain() {
	for {
		select {
		case ev := <-b.recv.got:
			if ev.Type == alerts.BudgetThreshold && ev.AccountID == b.account {
				b.byID[ev.ID] = ev
			}
		default:
			return
		}
	}
}

// settle waits until every budget event the sidecars will ever publish for
// the account's state as it is now has been published and delivered, then
// returns them. Explicit signals, no sleep: the account's own monthly
// budget (set high, never reached) is raised twice, and each sidecar's
// gateway_budget_remaining_usd is watched for each raise. A sidecar's
// watcher looks at accounts one at a time, so once it shows the second
// raise, the look that saw the first (which read the state after the
// caller's last change) has finished, and published whatever it claimed.
// Then every event the sidecars counted in gateway_alerts_total must
// arrive.
func (b *budgetEvents) settle(t *testing.T, st *store.Store, pairs []*launch.Stack, acctLimits account.Limits) map[string]alerts.Event {
	t.Helper()
	ctx := context.Background()
	for _, usd := range []int64{2000, 3000} {
		l := acctLimits
		l.MonthlyNanoUSD = usd * 1_000_000_000
		if err := st.SetLimits(ctx, b.account, l); err != nil {
			t.Fatal(err)
		}
		for _, p := range pairs {
			eventually.That(t, 20*time.Second, "a sidecar's watcher to see the account's monthly budget raised", func() (bool, string) {
				v := sidecarMetric(t, p, "gateway_budget_remaining_usd", `account="`+b.account+`"`, `key=""`, `window="monthly"`)
				return v > float64(usd)-500, fmt.Sprint(v)
			})
		}
	}
	eventually.That(t, 30*time.Second, "every published budget event to be delivered", func() (bool, string) {
		b.drain()
		published := 0.0
		for _, p := range pairs {
			published += sidecarMetric(t, p, "gateway_alerts_total", `type="budget.threshold"`)
		}
		return float64(len(b.byID)) == published, fmt.Sprintf("%d delivered, %v published", len(b.byID), published)
	})
	return b.byID
}

// onceEach checks that the events hold exactly one 80 % and one 100 % for
// each (key, window) of want, and nothing else; the 80 % is not created
// after the 100 %.
func onceEach(t *testing.T, evs map[string]alerts.Event, want map[string]string) {
	t.Helper()
	seen := map[string]alerts.Event{}
	for _, ev := range evs {
		k := fmt.Sprintf("%s/%v/%v", ev.KeyID, ev.Data["window"], ev.Data["percent"])
		if prev, ok := seen[k]; ok {
			t.Errorf("%s fired twice: %s and %s", k, prev.ID, ev.ID)
		}
		seen[k] = ev
	}
	for key, window := range want {
		lo, okLo := seen[key+"/"+window+"/80"]
		hi, okHi := seen[key+"/"+window+"/100"]
		if !okLo || !okHi {
			t.Errorf("key %s, %s budget: 80 %% seen %v, 100 %% seen %v; want each once", key, window, okLo, okHi)
			continue
		}
		if lo.CreatedAt.After(hi.CreatedAt) {
			t.Errorf("key %s, %s budget: 80 %% created at %v, after the 100 %% at %v", key, window, lo.CreatedAt, hi.CreatedAt)
		}
	}
	if len(seen) != 2*len(want) {
		t.Errorf("budget events %v; want an 80 %% and a 100 %% for each of %v", seen, want)
	}
}

// fillUntilRefused sends small requests with key to s, one after another,
// until one is refused; each refusal must be status naming message.
func fillUntilRefused(t *testing.T, s *launch.Stack, path string, header map[string]string, body []byte, status int, message string) int {
	t.Helper()
	for served := 0; served < 1000; served++ {
		resp, b := s.Do("POST", path, header, body)
		switch {
		case resp.StatusCode == 200:
			// Settled before the next, so that a refusal is by what was
			// spent, not by a hold not yet released.
			s.WaitSettled()
		case resp.StatusCode == status && strings.Contains(string(b), message):
			return served
		default:
			t.Fatalf("filling the budget: %d %s; want 200 or %d naming %q", resp.StatusCode, b, status, message)
		}
	}
	t.Fatalf("1000 requests and no refusal naming %q", message)
	return 0
}

// A key's lifetime budget and another key's monthly budget, each crossed by
// the reconciliation of requests swept while they still ran. Sidecar A is
// cut off from Redis (a proxy that hangs) with two streams of each key
// open; B's sweeper settles them at their checkpoints, which frees the rest
// of their holds; B spends what was freed until each budget refuses; the
// partition heals, A's spool replays, and the difference between each
// stream's real cost and its checkpoint is posted as a reconciled entry.
// Spend may then exceed the budget, by at most what the sweeps freed (for
// each swept request, its hold less its checkpoint: docs/billing.md), never
// by more; each budget's 80 % and 100 % are announced once, across both
// sidecars, not again when the reconciliation takes spend past the limit.
func TestBudgetCrossedByReconciliationAfterSweep(t *testing.T) {
	rs := redistest.NewServer(t)
	px := startProxy(t, rs.Addr)
	const lease = 4 * time.Second
	recv := newWebhookReceiver(t, budgetWebhookSecret)
	conf, env := alertedStacks(recv, func(c *config.Config) {
		c.Limits.HoldLease = config.Duration(lease)
		c.Limits.BackgroundPoll = config.Duration(lease / 4)
	})
	a := launchtest.Start(t, launch.Options{RedisAddr: px.Addr(), Configure: conf, SidecarEnv: env})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf, SidecarEnv: env})
	pairs := []*launch.Stack{a, b}
	ctx := context.Background()
	st := b.Store.Store // reads that do not go through A's proxy, and do not wait

	// A's streams: 150 output tokens at most, 50 ms apart, longer than the
	// partition's cut. B's filler: a small request with a small hold, so
	// that what a budget has left when it refuses is less than one filler's
	// hold, less than the reconciliations will add.
	streamBody := []byte(fmt.Sprintf(`{"model":%q,"max_tokens":150,"stream":true,"messages":[{"role":"user","content":"Hello there, gateway"}]}`, alphaModel))
	fillBody := []byte(fmt.Sprintf(`{"model":%q,"max_tokens":16,"messages":[{"role":"user","content":"Hi"}]}`, alphaModel))
	price := priceOf(t, b, "alpha", alphaModel)
	hold := price.Hold(int64(len(streamBody)), 150)
	limit := 2*hold + hold/2 // two streams fit, a third does not

	acctLimits := account.Limits{MonthlyNanoUSD: 1000 * 1_000_000_000} // the settle marker; never reached
	acct, err := st.CreateAccount(ctx, "budgets-swept", 100_000_000_000, acctLimits)
	if err != nil {
		t.Fatal(err)
	}
	type budgetKey struct {
		key, id, window string
		status          int
		message         string
		spent           func(ledger.KeyState) int64
	}
	keys := []*budgetKey{
		{window: "total", status: 402, message: "lifetime spend limit for this key: $", spent: func(s ledger.KeyState) int64 { return s.Total.Cost }},
		{window: "monthly", status: 429, message: "monthly spend limit for this key: $", spent: func(s ledger.KeyState) int64 { return s.Month.Cost }},
	}
	for _, k := range keys {
		l := account.Limits{TotalNanoUSD: limit}
		if k.window == "monthly" {
			l = account.Limits{MonthlyNanoUSD: limit}
		}
		if k.key, _, err = st.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: k.window, Limits: l}); err != nil {
			t.Fatal(err)
		}
		k.id = keyID(t, b, k.key)
	}
	state := func(k *budgetKey) ledger.KeyState {
		s, err := st.KeyStates(ctx, acct.ID, k.id)
		if err != nil {
			t.Fatal(err)
		}
		return s[0]
	}
	events := &budgetEvents{recv: recv, account: acct.ID, byID: map[string]alerts.Event{}}

	// Two streams of each key on A, checkpointed with output.
	const perKey = 2
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var wg, started sync.WaitGroup
	replies := make([]clientReply, perKey*len(keys))
	started.Add(len(replies))
	for i := range replies {
		k := keys[i%len(keys)]
		wg.Go(func() {
			h := messagesHeaders(k.key)
			h["x-fake-controls"] = `{"event_delay_ms":50,"reply_words":150}`
			var once sync.Once
			replies[i] = postAndRead(client, a.URL+alphaPath, h, streamBody, 0, func() { once.Do(started.Done) })
			once.Do(started.Done)
		})
	}
	started.Wait()
	eventually.True(t, 20*time.Second, "A's streams to be checkpointed", func() bool {
		cs, _ := st.Checkpoints(ctx, acct.ID)
		n := 0
		for _, c := range cs {
			if c.Usage.Output > 0 {
				n++
			}
		}
		return n == len(replies)
	})
	for _, k := range keys {
		if s := state(k); s.InFlight != perKey || s.Held != perKey*hold {
			t.Fatalf("key %s before the partition: %d in flight holding %d; want %d holding %d", k.window, s.InFlight, s.Held, perKey, perKey*hold)
		}
	}
	px.Hang()
	wg.Wait() // cut before their leases end: A cannot renew
	for i, r := range replies {
		if r.status != 200 || r.complete {
			t.Fatalf("A's stream %d: status %d, complete %v; want a 200 cut short", i, r.status, r.complete)
		}
	}
	eventually.True(t, 30*time.Second, "B's sweeper to settle A's streams", func() bool {
		n := 0
		for _, e := range allLedgerEntries(t, b, acct.ID) {
			if e.Interrupted {
				n++
			}
		}
		return n == len(replies)
	})

	// B spends what the sweeps freed, until each budget refuses.
	before := map[string]int64{}
	for _, k := range keys {
		served := fillUntilRefused(t, b, alphaPath, messagesHeaders(k.key), fillBody, k.status, k.message)
		b.WaitSettled()
		s := state(k)
		before[k.window] = k.spent(s)
		if before[k.window] > limit || s.Held != 0 {
			t.Fatalf("key %s after B filled it: spent %d of %d, %d held", k.window, before[k.window], limit, s.Held)
		}
		t.Logf("key %s: B served %d after the sweep; spent %d of %d", k.window, served, before[k.window], limit)
	}

	px.Heal()
	eventually.True(t, 30*time.Second, "A's spool to be replayed", func() bool {
		return sidecarMetric(t, a, "gateway_spool_depth") == 0
	})
	a.WaitSettled()
	waitNoHolds(t, b, acct.ID)

	entries := checkBooks(t, b, acct.ID, 100_000_000_000, map[string]bool{})
	swept := map[string]int64{} // request id -> what its sweep charged
	byKey := map[string]string{}
	for _, e := range entries {
		if e.Interrupted {
			swept[e.RequestID] = e.Cost
			byKey[e.RequestID] = e.KeyID
		}
	}
	reconciled := map[string]int64{}
	for _, e := range entries {
		if e.Reconciled {
			if _, ok := swept[e.RequestID]; !ok {
				t.Errorf("reconciled entry of %s, which was not swept", e.RequestID)
			}
			reconciled[e.RequestID] += e.Cost
		}
	}
	if len(reconciled) != len(replies) {
		t.Fatalf("%d requests reconciled, want %d: %s", len(reconciled), len(replies), ledgerSummary(entries))
	}
	for _, k := range keys {
		// docs/billing.md's bound: what the sweeps freed while the requests
		// still ran, each swept request's hold less its checkpoint.
		var freed, posted int64
		for id, c := range swept {
			if byKey[id] == k.id {
				freed += hold - c
				posted += reconciled[id]
			}
		}
		after := k.spent(state(k))
		t.Logf("key %s budget %d: spent %d before the reconciliations, %d after (%+d past the budget); reconciliations posted %d; bound %d (the swept holds less their checkpoints)",
			k.window, limit, before[k.window], after, after-limit, posted, freed)
		if after != before[k.window]+posted || posted <= 0 {
			t.Errorf("key %s: spend moved from %d to %d; the reconciliations posted %d", k.window, before[k.window], after, posted)
		}
		if after <= limit {
			t.Errorf("key %s: spent %d of %d after the reconciliations: the budget was not crossed, the path not exercised", k.window, after, limit)
		}
		if after > limit+freed {
			t.Errorf("key %s: spent %d, past the budget %d by more than the bound %d", k.window, after, limit, freed)
		}
		// Still refused: the budget is spent.
		for _, p := range pairs {
			if resp, body := p.Do("POST", alphaPath, messagesHeaders(k.key), fillBody); resp.StatusCode != k.status || !strings.Contains(string(body), k.message) {
				t.Errorf("key %s past its budget: %d %s", k.window, resp.StatusCode, body)
			}
		}
	}
	want := map[string]string{}
	for _, k := range keys {
		want[k.id] = k.window
	}
	onceEach(t, events.settle(t, st, pairs, acctLimits), want)
}

// A background response nobody reads, settled by the reconcilers (the
// vendor polled through the relay), under a key's monthly budget, with two
// sidecars on one Redis. Its hold counts against the budget while it is
// parked, so a request that would not fit beside it is refused (100 %);
// the reconciler's settlement charges the vendor's final usage, never more
// than the hold (bound 0: the budget is never exceeded); the room it frees
// is spent until the budget refuses again; each threshold is announced
// once, not again when the budget is reached a second time.
func TestBudgetCrossedByBackgroundReconciler(t *testing.T) {
	recv := newWebhookReceiver(t, budgetWebhookSecret)
	fast := func(c *config.Config) { c.Limits.BackgroundPoll = config.Duration(100 * time.Millisecond) }
	confA, env := alertedStacks(recv, fast)
	a := launchtest.Start(t, launch.Options{Configure: confA, SidecarEnv: env})
	confB, _ := alertedStacks(recv, func(c *config.Config) {
		fast(c)
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			u.Primary.URL, u.Reserve.URL = a.Primary.Addrs.URL(u.Format), a.Reserve.Addrs.URL(u.Format)
		}
	})
	b := launchtest.Start(t, launch.Options{RedisAddr: a.RedisAddr, Configure: confB, SidecarEnv: env})
	pairs := []*launch.Stack{a, b}
	ctx := context.Background()
	st := a.Store.Store

	const maxOut = 2000
	bgBody := []byte(fmt.Sprintf(`{"model":%q,"background":true,"max_output_tokens":%d,"input":"Work on this"}`, backgroundModel, maxOut))
	probeBody := []byte(fmt.Sprintf(`{"model":%q,"max_output_tokens":%d,"input":"Work on this!!"}`, backgroundModel, maxOut))
	price := priceOf(t, a, "beta", backgroundModel)
	bgHold := price.Hold(int64(len(bgBody)), maxOut)
	probeHold := price.Hold(int64(len(probeBody)), maxOut)
	limit := bgHold + bgHold/8 // the parked response is at 89 %; a probe beside it does not fit

	acctLimits := account.Limits{MonthlyNanoUSD: 1000 * 1_000_000_000} // the settle marker; never reached
	acct, err := st.CreateAccount(ctx, "budgets-background", 100_000_000_000, acctLimits)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := st.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: "agent", Limits: account.Limits{MonthlyNanoUSD: limit}})
	if err != nil {
		t.Fatal(err)
	}
	id := keyID(t, a, key)
	events := &budgetEvents{recv: recv, account: acct.ID, byID: map[string]alerts.Event{}}
	state := func() ledger.KeyState {
		s, err := st.KeyStates(ctx, acct.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		return s[0]
	}
	// The most settled spend seen, sampled until the end.
	var most atomic.Int64
	sampling, stop := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if s, err := st.KeyStates(ctx, acct.ID, id); err == nil && s[0].Month.Cost > most.Load() {
				most.Store(s[0].Month.Cost)
			}
			time.Sleep(10 * time.Millisecond) // sampling interval
		}
	}()

	h := chatCompletionsHeaders(key)
	h["x-fake-controls"] = `{"background_polls":30}` // about 3 s parked at the reconcilers' pace
	resp, out := a.Do("POST", responsesPath, h, bgBody)
	var created struct{ ID, Status string }
	if resp.StatusCode != 200 || json.Unmarshal(out, &created) != nil || created.Status != "queued" {
		t.Fatalf("background create: %d %s", resp.StatusCode, out)
	}
	// Admitted from a lease, the create's hold is in the key state once
	// its record lands.
	eventually.That(t, 5*time.Second, "the parked create's hold in the key state", func() (bool, string) {
		s := state()
		return s.Held == bgHold && s.InFlight == 1, fmt.Sprintf("key holds %d in %d requests; want the create's hold %d", s.Held, s.InFlight, bgHold)
	})
	// Beside the parked hold a probe does not fit, on either sidecar.
	const refusal = "monthly spend limit for this key: $"
	for _, p := range pairs {
		if resp, body := p.Do("POST", responsesPath, chatCompletionsHeaders(key), probeBody); resp.StatusCode != 429 || !strings.Contains(string(body), refusal) {
			t.Fatalf("a probe beside the parked response: %d %s", resp.StatusCode, body)
		}
	}
	if _, parked, err := st.Parked(ctx, acct.ID, created.ID); err != nil || !parked {
		t.Fatalf("the response was settled before the refusals (parked %v, %v): the scenario needs it parked", parked, err)
	}
	waitUnparked(t, a, acct.ID, created.ID)
	entries := allLedgerEntries(t, a, acct.ID)
	if len(entries) != 1 || entries[0].Estimated || entries[0].Status != 200 || entries[0].Cost <= 0 || entries[0].Cost > bgHold {
		t.Fatalf("ledger %s; want the response settled once from the vendor's final usage, within its hold %d", ledgerSummary(entries), bgHold)
	}
	settledBg := entries[0].Cost
	if s := state(); s.Held != 0 || s.Month.Cost != settledBg {
		t.Fatalf("after the reconciler: key spent %d, holds %d; want %d, 0", s.Month.Cost, s.Held, settledBg)
	}
	// The room the settlement freed is spent until the budget refuses again,
	// alternating between the sidecars.
	served := 0
	for i := 0; ; i++ {
		resp, body := pairs[i%2].Do("POST", responsesPath, chatCompletionsHeaders(key), probeBody)
		if resp.StatusCode == 429 && strings.Contains(string(body), refusal) {
			break
		}
		if resp.StatusCode != 200 || i > 500 {
			t.Fatalf("probe %d after the settlement: %d %s", i, resp.StatusCode, body)
		}
		// Settled before the next probe, so that each is refused only by
		// what was spent, not by a hold not yet released.
		pairs[i%2].WaitSettled()
		served++
	}
	a.WaitSettled()
	b.WaitSettled()
	stop()
	<-sampled
	final := state()
	t.Logf("monthly budget %d, background hold %d, probe hold %d: the reconciler settled %d; %d probes then fit; spent %d (most seen %d)",
		limit, bgHold, probeHold, settledBg, served, final.Month.Cost, most.Load())
	if served == 0 {
		t.Error("no probe fit after the reconciler's settlement: the hold was not released")
	}
	if final.Month.Cost > limit || most.Load() > limit || final.Month.Cost+probeHold <= limit {
		t.Errorf("spent %d (most seen %d) of %d; want within the budget, and too close to it for one more probe (%d)", final.Month.Cost, most.Load(), limit, probeHold)
	}
	checkBooks(t, a, acct.ID, 100_000_000_000, map[string]bool{})
	onceEach(t, events.settle(t, st, pairs, acctLimits), map[string]string{id: "monthly"})
}

// A key's concurrency limit lowered with gatewayctl while 100 requests race
// on two sidecars. The first 50 (25 on each) are sent as the change is
// made; both the old limit (80) and the new one (60) admit all of them, so
// they are all admitted whichever each sidecar saw. Once each sidecar is
// seen to hold the new limit (its /v1/usage answers from the same key
// cache admission reads, so that is when the change is seen there, within
// the cache's lifetime), the other 50 are sent, and exactly the 10 the
// new limit leaves are admitted (the old limit would admit 30); the vendor
// never has more than 60 in flight. The audit trail names who changed it.
//
// With leases on, seats another sidecar's lease holds free count as in
// flight, so a request may be refused early by at most those seats
// (docs/billing.md: S × seat room ÷ lease_share, plus what is left of the
// eighth set aside); a refusal is then the key's concurrency limit, and
// the second wave admits at most what the new limit leaves of the first.
func TestBudgetKeyLimitsChangedMidRace(t *testing.T) {
	a := launchtest.Start(t, launch.Options{SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken}})
	b := launchtest.Start(t, launch.Options{RedisAddr: a.RedisAddr})
	pairs := []*launch.Stack{a, b}
	ctl := adminCtl(t, a, "GATEWAY_ADMIN_ACTOR=ops-bob")
	ctx := context.Background()
	acct, err := a.Store.CreateAccount(ctx, "race", 100_000_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	const oldLimit, newLimit, wave = 80, 60, 50
	key, _, err := a.Store.CreateKey(ctx, acct.ID, account.ModelKey, account.KeyOptions{Label: "racer", Limits: account.Limits{Concurrency: oldLimit}})
	if err != nil {
		t.Fatal(err)
	}
	id := keyID(t, a, key)
	for _, p := range pairs {
		p.Primary.Reset()
		p.Primary.Control(map[string]any{"event_delay_ms": 600_000, "reply_words": 3})
	}
	body := messagesBody(true, "")

	changed := make(chan error, 1)
	go func() {
		_, errOut, err := ctl.run("keys", "limits", acct.ID, id, "--concurrency", fmt.Sprint(newLimit))
		if err != nil {
			err = fmt.Errorf("%v: %s", err, errOut)
		}
		changed <- err
	}()
	first, end1 := burst(t, pairs, wave, key, body)
	defer end1()
	if err := <-changed; err != nil {
		t.Fatalf("gatewayctl keys limits: %v", err)
	}
	leases := a.Config.Limits.LeasesOn()
	refusal := ""
	if leases {
		refusal = "concurrent request limit reached for this key"
	}
	n1 := admittedOf(t, first, refusal)
	if !leases && n1 != wave {
		t.Fatalf("first wave: %d of %d admitted; both limits admit all", n1, wave)
	}
	// The early-refusal bound of docs/billing.md at the old limit: each of
	// the S leases' free seats at most the seat room ÷ lease_share, plus
	// what is left of the eighth set aside.
	share := a.Config.Limits.LeaseShare
	if bound := int64(len(pairs)) * oldLimit / share * 9 / 8; int64(wave-n1) > bound {
		t.Fatalf("first wave: %d of %d admitted; leases may refuse early at most %d", n1, wave, bound)
	}
	if n1 != wave {
		t.Logf("first wave: %d of %d admitted, %d refused early for seats other leases held free", n1, wave, wave-n1)
	}
	// The change is seen on each sidecar.
	for _, p := range pairs {
		eventually.That(t, 2*config.DefaultKeyCacheTTL+time.Second, "the sidecar's key cache to hold the new limit", func() (bool, string) {
			u := p.Usage(key, "day")
			c := num(t, u, "key.limits.concurrency")
			return c == newLimit, fmt.Sprint(c)
		})
	}
	second, end2 := burst(t, pairs, wave, key, body)
	defer end2()
	n2 := admittedOf(t, second, "concurrent request limit reached for this key")
	if n1+n2 > newLimit || !leases && n2 != newLimit-n1 {
		t.Fatalf("second wave, after the change was seen: %d of %d admitted; want exactly %d (the new limit %d less the %d in flight), fewer only with leases",
			n2, wave, newLimit-n1, newLimit, n1)
	}
	if peak := peakInFlight(pairs); peak != n1+n2 {
		t.Fatalf("the vendors had %d in flight at most; want the %d admitted", peak, n1+n2)
	}
	// A request admitted from a lease (GATEWAY_TEST_LEASES=on) is in the
	// key state's holds once its record lands, just after its reply began.
	eventually.That(t, 5*time.Second, "the key state to count every request in flight", func() (bool, string) {
		s, err := a.Store.KeyStates(ctx, acct.ID, id)
		if err != nil {
			return false, err.Error()
		}
		return s[0].InFlight == int64(n1+n2), fmt.Sprintf("%d in flight, want %d", s[0].InFlight, n1+n2)
	})
	found := false
	for _, e := range ctl.json("audit")["entries"].([]any) {
		m := e.(map[string]any)
		if m["action"] == "key.limits" && m["key_id"] == id && m["actor"] == "ops-bob" &&
			strings.Contains(fmt.Sprint(m["detail"]), fmt.Sprintf("concurrency=%d", newLimit)) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no audit entry of the change by ops-bob")
	}
}

// admittedOf counts the 200s of a burst; every other reply must be a 429
// naming refusal (none expected when refusal is empty).
func admittedOf(t *testing.T, res []burstResult, refusal string) int {
	t.Helper()
	n := 0
	for _, r := range res {
		switch {
		case r.status == 200:
			n++
		case refusal == "" || r.status != 429 || !strings.Contains(r.body, refusal):
			t.Errorf("refusal %d %s; want 429 naming %q", r.status, r.body, refusal)
		}
	}
	return n
}
