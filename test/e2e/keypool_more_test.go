package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// alphaPool returns alpha's upstream in c, failing the test without one.
func alphaPool(t *testing.T, c *config.Config) *config.Upstream {
	t.Helper()
	for i := range c.Upstreams {
		if c.Upstreams[i].Name == "alpha" {
			return &c.Upstreams[i]
		}
	}
	t.Fatal("gateway.yaml has no upstream alpha")
	return nil
}

// keyGenerations sums the fakes' figures per key of alpha's pool: what each
// key generated (requests the fake answered with a reply, not a forced
// status) and how many it answered with its forced status.
func keyGenerations(s *launch.Stack) (generated, forced map[string]int64) {
	generated, forced = map[string]int64{}, map[string]int64{}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for secret, st := range f.Keys(alphaSecrets()...) {
			k := keyOfSecret(secret)
			generated[k] += st.Requests - st.Forced
			forced[k] += st.Forced
		}
	}
	return generated, forced
}

// keyOfSecret names the alpha pool key whose secret is secret, "" for none.
func keyOfSecret(secret string) string {
	for _, k := range poolKeys {
		if launch.PoolSecret("alpha", k) == secret {
			return k
		}
	}
	return ""
}

// ledgerByKey counts an account's ledger entries by vendor key and status.
func ledgerByKey(t *testing.T, s *launch.Stack, acct string) (byKey map[string]int, byStatus map[int]int) {
	t.Helper()
	byKey, byStatus = map[string]int{}, map[int]int{}
	for _, e := range allLedgerEntries(t, s, acct) {
		byKey[e.VendorKey]++
		byStatus[e.Status]++
	}
	return byKey, byStatus
}

// Three keys, k2 overloaded (529, no retry-after): no client sees the 529,
// each request is generated once, k2 cools down for the pool's backoff and
// comes back on its own, and the ledger names the key that served.
func TestKeyPoolRidesOutOverload(t *testing.T) {
	// The default backoff (10 s) would make the test wait that long for
	// the cool-down to end; a short one shows the same.
	const coolDown, maxCoolDown = time.Second, 4 * time.Second
	s := launchtest.Start(t, launch.Options{Pool: 3, Configure: func(c *config.Config) {
		alphaPool(t, c).Pool.CoolDown = config.Duration(coolDown)
		alphaPool(t, c).Pool.MaxCoolDown = config.Duration(maxCoolDown)
		// A 529 is a 5xx: Envoy's outlier detection also ejects k2's host
		// from its clusters, for base_ejection_time (10 s by default).
		alphaPool(t, c).Failover.BaseEjectionTime = config.Duration(coolDown)
	}})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	overloaded := launch.PoolSecret("alpha", "k2")
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(overloaded, 529, "") // no retry-after: the pool's backoff decides
	}
	const n = 60
	var wg sync.WaitGroup
	statuses := make([]int, n)
	start := time.Now()
	for i := range n {
		wg.Go(func() { statuses[i] = sessionRequest(t, s, acct.Key, fmt.Sprintf("ov-%d", i)) })
	}
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Errorf("request %d: %d; want 200 while other keys have room", i, st)
		}
	}
	generated, forced := keyGenerations(s)
	if forced["k2"] == 0 {
		t.Fatalf("no request reached the overloaded key: generated %v forced %v (the test shows nothing)", generated, forced)
	}
	if forced["k1"]+forced["k3"] != 0 {
		t.Fatalf("keys other than k2 answered forced statuses: %v", forced)
	}
	total := int64(0)
	for _, g := range generated {
		total += g
	}
	if total != n || generated["k2"] != 0 {
		t.Errorf("generations by key %v for %d requests; want each once, none on k2", generated, n)
	}

	// Envoy's upstream log reaches the sidecar on its 50 ms flush: after
	// the requests, not with them.
	var h map[string]keypool.KeyState
	eventually.That(t, 5*time.Second, "k2 cooling after its 529", func() (bool, string) {
		h = poolHealth(t, s, "alpha")
		return h["k2"].State == keypool.Cooling && h["k2"].Status == 529, fmt.Sprintf("/health says k2 is %+v", h["k2"])
	})
	// No retry-after: the backoff, at least cool_down from the first 529
	// (which came after start), never past the pool's maximum.
	if until := h["k2"].Until; until.Before(start.Add(coolDown)) || until.After(time.Now().Add(maxCoolDown)) {
		t.Errorf("k2 cooling until %v after the first request; want between cool_down %v and max_cool_down %v", until.Sub(start), coolDown, maxCoolDown)
	}
	for k, st := range h {
		if k != "k2" && st.State != keypool.Active {
			t.Errorf("%s is %+v; only k2 was overloaded", k, st)
		}
	}
	// Every 529 attempt is counted, once the log has arrived.
	eventually.That(t, 5*time.Second, "every 529 counted", func() (bool, string) {
		got := sidecarMetric(t, s, "gateway_vendor_key_rate_limited_total", `upstream="alpha"`, `key="k2"`)
		return got == float64(forced["k2"]), fmt.Sprintf("gateway_vendor_key_rate_limited_total{k2} = %v, the fakes answered 529 %d times", got, forced["k2"])
	})
	for _, k := range []string{"k1", "k3"} {
		if got := sidecarMetric(t, s, "gateway_vendor_key_rate_limited_total", `upstream="alpha"`, `key="`+k+`"`); got != 0 {
			t.Errorf("gateway_vendor_key_rate_limited_total{%s} = %v; want 0", k, got)
		}
	}
	if got := sidecarMetric(t, s, "gateway_vendor_key_cooldowns_total", `upstream="alpha"`, `key="k2"`); got != 1 {
		t.Errorf("gateway_vendor_key_cooldowns_total{k2} = %v; want 1 (one cool-down, however many attempts were in flight)", got)
	}
	if got := sidecarMetric(t, s, "gateway_vendor_key_state", `upstream="alpha"`, `key="k2"`, `state="cooling"`); got != 1 {
		t.Errorf("gateway_vendor_key_state{k2,cooling} = %v", got)
	}

	// The ledger names the serving key of every entry: never k2, which
	// refused every request it saw, and per key what the fakes generated.
	byKey, byStatus := ledgerByKey(t, s, acct.ID)
	if byStatus[200] != n || len(byStatus) != 1 {
		t.Errorf("ledger entries by status %v; want %d, all 200", byStatus, n)
	}
	for _, k := range poolKeys {
		if int64(byKey[k]) != generated[k] {
			t.Errorf("ledger entries by vendor key %v, generations by key %v: want the same", byKey, generated)
			break
		}
	}
	if byKey["k2"] != 0 || byKey[""] != 0 {
		t.Errorf("ledger entries by vendor key %v; want none on k2 or unnamed", byKey)
	}

	// What the vendor said is Anthropic's overloaded error, without a
	// retry-after (the premise of the backoff above).
	req, _ := http.NewRequest("POST", s.Primary.Addrs.URL(config.FormatMessages)+"/v1/messages", strings.NewReader(string(messagesBody(false, ""))))
	for k, v := range messagesHeaders(overloaded) {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var vendorErr struct {
		Type  string `json:"type"`
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	mustJSON(t, body, &vendorErr)
	if resp.StatusCode != 529 || vendorErr.Type != "error" || vendorErr.Error.Type != "overloaded_error" || resp.Header.Get("retry-after") != "" {
		t.Fatalf("the fake's answer on k2: %d retry-after %q %s; want 529 overloaded_error without retry-after", resp.StatusCode, resp.Header.Get("retry-after"), body)
	}

	// The cool-down ends on its own, with no traffic to end it.
	eventually.That(t, maxCoolDown+2*time.Second, "k2's backoff over", func() (bool, string) {
		h := poolHealth(t, s, "alpha")
		return h["k2"].State == keypool.Active, fmt.Sprintf("%+v", h["k2"])
	})
	back := time.Since(start)
	// The vendor recovers; k2 serves its sessions again.
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(overloaded, 0, "")
	}
	// k2 serves its sessions again once both its cool-down and Envoy's
	// ejection of its host are over; every request succeeds meanwhile.
	var after map[string]int64
	eventually.That(t, 10*time.Second, "k2 serving its sessions again", func() (bool, string) {
		for i := range n {
			if st := sessionRequest(t, s, acct.Key, fmt.Sprintf("ov-%d", i)); st != 200 {
				t.Errorf("after the backoff, request %d: %d", i, st)
			}
		}
		after, _ = keyGenerations(s)
		return after["k2"] > 0, fmt.Sprintf("generations %v", after)
	})
	byKey, _ = ledgerByKey(t, s, acct.ID)
	if int64(byKey["k2"]) != after["k2"] {
		t.Errorf("ledger entries on k2 %d, k2's generations %d: want the same", byKey["k2"], after["k2"])
	}
	if got := sidecarMetric(t, s, "gateway_vendor_key_state", `upstream="alpha"`, `key="k2"`, `state="active"`); got != 1 {
		t.Errorf("gateway_vendor_key_state{k2,active} = %v once k2 serves again", got)
	}
	t.Logf("%d requests with k2 answering 529: all 200, k2 tried %d times, cooling until %v after the first request, active again after %v; generations %v then %v",
		n, forced["k2"], h["k2"].Until.Sub(start).Round(100*time.Millisecond), back.Round(100*time.Millisecond), generated, after)
	assertCredentials(t, s, alphaSecrets())
}

// newAccountIn creates an account of balance (nano-USD) with a model key in st, before any
// gateway runs: its id is then known to the configuration.
func newAccountIn(t *testing.T, st *store.Store, balance int64) launch.Account {
	t.Helper()
	a, err := st.CreateAccount(t.Context(), "pinned", balance, noLimits)
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := st.CreateKey(t.Context(), a.ID, account.ModelKey, account.KeyOptions{Label: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return launch.Account{ID: a.ID, Key: key}
}

// markedRequest sends one alpha request in session, its body marked with
// the session (metadata.user_id, which the session header outranks for
// steering) so that the fakes' records tell whose it was.
func markedRequest(t *testing.T, s *launch.Stack, key, session string) int {
	t.Helper()
	h := messagesHeaders(key)
	h["x-claude-code-session-id"] = session
	resp, body := s.Do("POST", alphaPath, h, messagesBody(false, fmt.Sprintf(`,"metadata":{"user_id":%q}`, session)))
	if resp.StatusCode != 200 {
		t.Logf("session %s: %d %.200s", session, resp.StatusCode, body)
	}
	return resp.StatusCode
}

// attemptsByOwner counts the alpha attempts the fakes received by the
// session prefix of their mark ("pin-a", "pin-b") and key.
func attemptsByOwner(t *testing.T, s *launch.Stack) map[string]map[string]int {
	t.Helper()
	out := map[string]map[string]int{}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, rec := range f.RequestsTo(config.FormatMessages, "/v1/messages") {
			owner := "unmarked"
			for _, o := range []string{"pin-a", "pin-b"} {
				if strings.Contains(string(rec.Body), `"user_id":"`+o+`-`) {
					owner = o
				}
			}
			if out[owner] == nil {
				out[owner] = map[string]int{}
			}
			k := keyOfSecret(header(rec.Headers, "x-api-key"))
			if k == "" {
				k = "other"
			}
			out[owner][k]++
		}
	}
	return out
}

// startPinned starts a stack with a pool of three keys per upstream and an
// account A whose key k3 of upstream is pinned to it; configure, if not
// nil, changes the configuration further. The pin names an account id, and
// accounts are created at runtime: A is created in the stack's Redis before
// the gateway reads its config.
func startPinned(t *testing.T, upstream string, configure func(*config.Config)) (*launch.Stack, launch.Account) {
	t.Helper()
	rs := redistest.NewServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	t.Cleanup(func() { rdb.Close() })
	a := newAccountIn(t, store.New(rdb, store.Options{}), pricing.NanoUSD(100))
	s := launchtest.Start(t, launch.Options{Pool: 3, RedisAddr: rs.Addr, Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			if u := &c.Upstreams[i]; u.Name == upstream {
				for j := range u.VendorKeys {
					if u.VendorKeys[j].Name == "k3" {
						u.VendorKeys[j].Accounts = []string{a.ID}
					}
				}
			}
		}
		if configure != nil {
			configure(c)
		}
	}})
	return s, a
}

// A key pinned to an account (accounts: [A]) is a pool of its own: A's
// sessions are served by it alone, no other account's request reaches it,
// and A is never spread onto the shared keys, not even when its key is
// limited; nor is anyone else spread onto A's key when theirs are.
func TestKeyPoolPinnedTenant(t *testing.T) {
	s, a := startPinned(t, "alpha", nil)
	b := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	if h := poolHealth(t, s, "alpha"); !h["k3"].Pinned || h["k1"].Pinned || h["k2"].Pinned {
		t.Fatalf("/health's alpha keys %+v; want k3 alone pinned", h)
	}

	// Several sessions each: A's all on k3, B's (enough to land on every
	// key of three were k3 shared) never.
	const na, nb = 12, 30
	for i := range na {
		if st := markedRequest(t, s, a.Key, fmt.Sprintf("pin-a-%d", i)); st != 200 {
			t.Errorf("A's request %d: %d", i, st)
		}
	}
	for i := range nb {
		if st := markedRequest(t, s, b.Key, fmt.Sprintf("pin-b-%d", i)); st != 200 {
			t.Errorf("B's request %d: %d", i, st)
		}
	}
	got := attemptsByOwner(t, s)
	if got["pin-a"]["k3"] != na || len(got["pin-a"]) != 1 {
		t.Errorf("A's attempts by key %v; want all %d on k3", got["pin-a"], na)
	}
	if got["pin-b"]["k3"] != 0 || got["pin-b"]["k1"]+got["pin-b"]["k2"] != nb || got["pin-b"]["k1"] == 0 || got["pin-b"]["k2"] == 0 {
		t.Errorf("B's attempts by key %v; want all %d on k1 and k2 (both used), none on k3", got["pin-b"], nb)
	}
	if len(got["unmarked"]) != 0 {
		t.Errorf("unmarked attempts at the fakes: %v", got["unmarked"])
	}
	generated, _ := keyGenerations(s)
	if generated["k3"] != na {
		t.Errorf("k3 generated %d replies; want A's %d", generated["k3"], na)
	}
	byKey, _ := ledgerByKey(t, s, a.ID)
	if byKey["k3"] != na || len(byKey) != 1 {
		t.Errorf("A's ledger entries by vendor key %v; want %d, all k3", byKey, na)
	}
	byKey, _ = ledgerByKey(t, s, b.ID)
	if byKey["k3"] != 0 || byKey["k1"]+byKey["k2"] != nb {
		t.Errorf("B's ledger entries by vendor key %v; want %d on k1 and k2", byKey, nb)
	}

	// k3 limited: A's requests stay on it and A sees the vendor's 429
	// (every key A may use answered one); the shared keys never see A.
	pinned := launch.PoolSecret("alpha", "k3")
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(pinned, 429, "30")
	}
	for i := range na {
		if st := markedRequest(t, s, a.Key, fmt.Sprintf("pin-a-%d", i)); st != 429 {
			t.Errorf("A's request %d with its key limited: %d; want the vendor's 429 (no shared key for A)", i, st)
		}
	}
	for i := range nb {
		if st := markedRequest(t, s, b.Key, fmt.Sprintf("pin-b-%d", i)); st != 200 {
			t.Errorf("B's request %d while k3 is limited: %d", i, st)
		}
	}
	eventually.That(t, 5*time.Second, "k3 cooling after its 429", func() (bool, string) {
		h := poolHealth(t, s, "alpha")
		return h["k3"].State == keypool.Cooling && h["k3"].Status == 429, fmt.Sprintf("/health says k3 is %+v", h["k3"])
	})
	got = attemptsByOwner(t, s)
	if got["pin-a"]["k1"]+got["pin-a"]["k2"]+got["pin-a"]["other"] != 0 {
		t.Errorf("A's attempts by key %v; A spread onto keys not pinned to it", got["pin-a"])
	}
	if got["pin-b"]["k3"] != 0 {
		t.Errorf("B's attempts by key %v; B reached A's key", got["pin-b"])
	}
	// A's key cooling: A goes on asking it (it has no other), and each of
	// these requests too is a 429 from k3 alone.
	if got["pin-a"]["k3"] < 2*na {
		t.Errorf("A's attempts on k3 %d; want at least the %d of both rounds", got["pin-a"]["k3"], 2*na)
	}

	// The shared keys limited, k3 well again: B sees 429 (every key B may
	// use answered one) and is never spread onto k3; A is served by k3,
	// whose cool-down the pool cannot route A around.
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(pinned, 0, "")
		for _, k := range []string{"k1", "k2"} {
			f.ForceKey(launch.PoolSecret("alpha", k), 429, "30")
		}
	}
	for i := range 6 {
		if st := markedRequest(t, s, b.Key, fmt.Sprintf("pin-b-%d", i)); st != 429 {
			t.Errorf("B's request %d with every shared key limited: %d; want the vendor's 429", i, st)
		}
	}
	for i := range na {
		if st := markedRequest(t, s, a.Key, fmt.Sprintf("pin-a-%d", i)); st != 200 {
			t.Errorf("A's request %d with the shared keys limited: %d; want 200 from k3", i, st)
		}
	}
	got = attemptsByOwner(t, s)
	if got["pin-b"]["k3"] != 0 || got["pin-a"]["k1"]+got["pin-a"]["k2"]+got["pin-a"]["other"] != 0 {
		t.Errorf("attempts by owner and key %v; want A on k3 alone, B never on k3", got)
	}
	byKey, byStatus := ledgerByKey(t, s, a.ID)
	if byKey["k3"] != len(allLedgerEntries(t, s, a.ID)) || byStatus[200] != 2*na {
		t.Errorf("A's ledger entries by vendor key %v by status %v; want every one on k3, %d served", byKey, byStatus, 2*na)
	}
	byKey, _ = ledgerByKey(t, s, b.ID)
	if byKey["k3"] != 0 {
		t.Errorf("B's ledger entries by vendor key %v; want none on k3", byKey)
	}
	t.Logf("attempts at the fakes by owner and key: %v; A's ledger %v, B's ledger %v", got, ledgerByKeyStatus(t, s, a.ID), byKey)
	assertCredentials(t, s, alphaSecrets())
}

// ledgerByKeyStatus summarises an account's ledger as "key/status" counts.
func ledgerByKeyStatus(t *testing.T, s *launch.Stack, acct string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range allLedgerEntries(t, s, acct) {
		out[fmt.Sprintf("%s/%d", e.VendorKey, e.Status)]++
	}
	return out
}
