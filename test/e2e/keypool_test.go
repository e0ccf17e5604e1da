package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// poolKeys are the three keys of the pools these tests start.
var poolKeys = launch.PoolKeys(3)

func alphaSecrets() []string {
	var out []string
	for _, k := range poolKeys {
		out = append(out, launch.PoolSecret("alpha", k))
	}
	return out
}

// sessionRequest sends one non-streaming alpha request in session and
// returns its status.
func sessionRequest(t *testing.T, s *launch.Stack, key, session string) int {
	t.Helper()
	h := messagesHeaders(key)
	h["x-claude-code-session-id"] = session
	resp, body := s.Do("POST", alphaPath, h, messagesBody(false, ""))
	if resp.StatusCode != 200 {
		t.Logf("session %s: %d %s", session, resp.StatusCode, body)
	}
	return resp.StatusCode
}

// poolHealth reads /health's vendor keys of upstream.
func poolHealth(t *testing.T, s *launch.Stack, upstream string) map[string]keypool.KeyState {
	t.Helper()
	_, b := s.Do("GET", "/health", nil, nil)
	var h struct {
		VendorKeys map[string][]keypool.KeyState `json:"vendor_keys"`
	}
	mustJSON(t, b, &h)
	out := map[string]keypool.KeyState{}
	for _, k := range h.VendorKeys[upstream] {
		out[k.Name] = k
	}
	return out
}

// assertCredentials fails unless every API request the fakes received
// carried one of the pool's valid secrets.
func assertCredentials(t *testing.T, s *launch.Stack, valid []string) {
	t.Helper()
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, rec := range f.RequestsTo(config.FormatMessages, "/v1/messages") {
			if k := header(rec.Headers, "x-api-key"); !slices.Contains(valid, k) {
				t.Errorf("%s received a request with credential %q", f.Name, k)
			}
		}
	}
}

// Three keys, one answering 429 with retry-after: no client sees a 429,
// the 429ing key cools down for its retry-after (5 s) and serves again
// after it,
// and no request is generated twice (the 429 comes before generation).
func TestKeyPoolRidesOutRateLimits(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	limited := launch.PoolSecret("alpha", "k2")
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(limited, 429, "5")
	}
	const n = 60
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := range n {
		wg.Go(func() { statuses[i] = sessionRequest(t, s, acct.Key, fmt.Sprintf("rl-%d", i)) })
	}
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Errorf("request %d: %d; want 200 while other keys have room", i, st)
		}
	}
	stats := s.Primary.Keys(alphaSecrets()...)
	forced := stats[limited].Forced
	if forced == 0 {
		t.Fatalf("no request reached the limited key: %+v (the test shows nothing)", stats)
	}
	generated := int64(0)
	for _, st := range stats {
		generated += st.Requests - st.Forced
	}
	if generated != n {
		t.Errorf("%d generations for %d requests; want each once (%+v)", generated, n, stats)
	}
	// The sidecar hears of k2's 429s from Envoy's upstream log, which Envoy
	// flushes every 50 ms: after the requests, not with them.
	var h map[string]keypool.KeyState
	eventually.That(t, 5*time.Second, "k2 cooling after its 429", func() (bool, string) {
		h = poolHealth(t, s, "alpha")
		return h["k2"].State == keypool.Cooling && h["k2"].Status == 429, fmt.Sprintf("/health says k2 is %+v", h["k2"])
	})
	t.Logf("%d requests with k2 answering 429: all 200, k2 tried %d times (then cooling %v), keys %+v", n, forced, time.Until(h["k2"].Until).Round(100*time.Millisecond), stats)
	if got := sidecarMetric(t, s, "gateway_vendor_key_rate_limited_total", `upstream="alpha"`, `key="k2"`); got < 1 {
		t.Errorf("gateway_vendor_key_rate_limited_total{k2} = %v", got)
	}
	if got := sidecarMetric(t, s, "gateway_vendor_key_state", `key="k2"`, `state="cooling"`); got != 1 {
		t.Errorf("gateway_vendor_key_state{k2,cooling} = %v", got)
	}

	// The limit lifts; after its retry-after k2 serves again, its own
	// sessions first.
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(limited, 0, "")
	}
	before := sidecarMetric(t, s, "gateway_vendor_key_requests_total", `upstream="alpha"`, `key="k2"`)
	eventually.That(t, 10*time.Second, "k2's retry-after over", func() (bool, string) {
		h := poolHealth(t, s, "alpha")
		return h["k2"].State == keypool.Active, fmt.Sprintf("%+v", h["k2"])
	})
	for i := range n {
		if st := sessionRequest(t, s, acct.Key, fmt.Sprintf("rl-%d", i)); st != 200 {
			t.Errorf("after the limit lifted, request %d: %d", i, st)
		}
	}
	after := sidecarMetric(t, s, "gateway_vendor_key_requests_total", `upstream="alpha"`, `key="k2"`)
	// Every session that tried k2 first is its (a session sent after the
	// cool-down began went elsewhere at once): all come back.
	if int64(after-before) < stats[limited].Requests {
		t.Errorf("after its retry-after k2 served %v of the %d sessions; want at least the %d that tried it", after-before, n, stats[limited].Requests)
	}
	s.WaitSettled()
	entries, _, err := s.Store.Ledger(t.Context(), acct.ID, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]int{}
	for _, e := range entries {
		byKey[e.VendorKey]++
	}
	if byKey[""] > 0 || len(byKey) != 3 {
		t.Errorf("ledger entries by vendor key %v; want each named, all three keys", byKey)
	}
	t.Logf("ledger entries by vendor key: %v", byKey)
	assertCredentials(t, s, alphaSecrets())
}

// A key the vendor refuses (401) is taken out after its first refusal,
// alerted once across two sidecars, and no client sees the 401.
func TestKeyPoolRefusedKeyAlertsOnce(t *testing.T) {
	const secret = "whsec-pool-4c1d"
	recv := newWebhookReceiver(t, secret)
	recv.failing = "none" // answer every delivery
	conf := func(c *config.Config) {
		c.Alerts.Interval = config.Duration(200 * time.Millisecond)
		c.Alerts.Webhooks = []config.Webhook{{URL: recv.srv.URL, SecretEnv: "GATEWAY_WEBHOOK_SECRET"}}
	}
	env := []string{"GATEWAY_WEBHOOK_SECRET=" + secret}
	a := launchtest.Start(t, launch.Options{Pool: 3, Configure: conf, SidecarEnv: env})
	b := launchtest.Start(t, launch.Options{Pool: 3, RedisAddr: a.RedisAddr, Configure: conf, SidecarEnv: env})
	acct := a.NewAccount(100, noLimits)
	waitHealthRoute(t, a, "primary")
	waitHealthRoute(t, b, "primary")
	revoked := launch.PoolSecret("alpha", "k3")
	for _, s := range []*launch.Stack{a, b} {
		for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
			f.ForceKey(revoked, 401, "")
		}
	}
	send := func(from, to int) {
		for i := from; i < to; i++ {
			s := []*launch.Stack{a, b}[i%2]
			if st := sessionRequest(t, s, acct.Key, fmt.Sprintf("rf-%d", i)); st != 200 {
				t.Errorf("request %d: %d; want 200 from another key", i, st)
			}
		}
	}
	send(0, 20)
	// Each sidecar hears of the 401 from its Envoy's upstream log (flushed
	// every 50 ms): the requests sent before it did may try the key, and
	// none after.
	tried := map[*launch.Stack]int64{}
	for _, s := range []*launch.Stack{a, b} {
		eventually.That(t, 5*time.Second, "k3 disabled", func() (bool, string) {
			h := poolHealth(t, s, "alpha")
			return h["k3"].State == keypool.Disabled && h["k3"].Status == 401, fmt.Sprintf("%+v", h["k3"])
		})
		tried[s] = s.Primary.Keys(revoked)[revoked].Forced
		if tried[s] == 0 {
			t.Fatalf("no request of this stack reached the revoked key: the test shows nothing")
		}
	}
	send(20, 40)
	for _, s := range []*launch.Stack{a, b} {
		if now := s.Primary.Keys(revoked)[revoked].Forced; now != tried[s] {
			t.Errorf("the revoked key was tried %d more times on one stack after it was taken out; want none", now-tried[s])
		}
	}
	// One alert across both sidecars.
	var got []alerts.Event
	deadline := time.After(5 * time.Second)
collect:
	for {
		select {
		case ev := <-recv.got:
			if ev.Type == alerts.VendorKeyRefused {
				got = append(got, ev)
			}
		case <-deadline:
			break collect
		}
	}
	if len(got) != 1 || got[0].Data["vendor_key"] != "k3" || got[0].Data["upstream"] != "alpha" {
		t.Fatalf("vendor_key.refused events %+v; want one, for alpha's k3", got)
	}
	for _, s := range []*launch.Stack{a, b} {
		assertCredentials(t, s, alphaSecrets())
	}
	t.Logf("k3 answering 401: 40 requests over two sidecars all 200; one alert %v", got[0].Data)
}

// secretsIn fails when any of secrets appears in text, naming where; it
// fails too when text is empty (the search would prove nothing).
func secretsIn(t *testing.T, where string, text []byte, secrets []string) {
	t.Helper()
	if len(text) == 0 {
		t.Errorf("%s is empty: nothing searched", where)
	}
	for _, s := range secrets {
		if bytes.Contains(text, []byte(s)) {
			t.Errorf("a vendor secret (%s...) appears in %s", s[:10], where)
		}
	}
}

// processMemory reads every readable mapping of a process's memory.
func processMemory(t *testing.T, pid int) []byte {
	t.Helper()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatalf("maps of %d: %v", pid, err)
	}
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	if err != nil {
		t.Fatalf("memory of %d: %v", pid, err)
	}
	defer mem.Close()
	var out []byte
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[1], "r") {
			continue
		}
		var lo, hi uint64
		if _, err := fmt.Sscanf(f[0], "%x-%x", &lo, &hi); err != nil || hi-lo > 1<<30 {
			continue
		}
		buf := make([]byte, hi-lo)
		n, _ := mem.ReadAt(buf, int64(lo))
		out = append(out, buf[:n]...)
	}
	return out
}

func getOK(t *testing.T, c *http.Client, url string) []byte {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return b
}

// With a pool of three keys, one limited and one refused, no vendor secret
// is in the sidecar's memory, environment or config, Envoy's config_dump,
// any log, either metrics page, the ledger, /health or the operator
// console's pages; and the vendor saw every request with a valid one.
func TestKeyPoolSecretsNowhere(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Pool: 3, SidecarEnv: []string{"GATEWAY_ADMIN_TOKEN=" + adminToken}})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(launch.PoolSecret("alpha", "k2"), 429, "30")
		f.ForceKey(launch.PoolSecret("alpha", "k3"), 401, "")
	}
	for i := range 20 {
		if st := sessionRequest(t, s, acct.Key, fmt.Sprintf("sec-%d", i)); st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
		stream(t, s, betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(true, true, ""))
	}
	eventually.That(t, 5*time.Second, "k2 cooling and k3 disabled", func() (bool, string) {
		h := poolHealth(t, s, "alpha")
		return h["k2"].State == keypool.Cooling && h["k3"].State == keypool.Disabled, fmt.Sprint(h)
	})
	s.WaitSettled()
	var secrets []string
	for _, u := range []string{"alpha", "beta"} {
		for _, k := range poolKeys {
			secrets = append(secrets, launch.PoolSecret(u, k))
		}
	}

	cfg, err := os.ReadFile(s.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	secretsIn(t, "the sidecar's config", cfg, secrets)
	pid := s.Sidecar.Cmd.Process.Pid
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	secretsIn(t, "the sidecar's environment", environ, secrets)
	mem := processMemory(t, pid)
	if !bytes.Contains(mem, []byte(acct.Key)) && !bytes.Contains(mem, []byte("vendor_key")) {
		t.Fatal("the sidecar's memory as read holds neither the client's key nor a field name: the search proves nothing")
	}
	secretsIn(t, "the sidecar's memory", mem, secrets)
	t.Logf("searched %d MB of the sidecar's memory", len(mem)>>20)

	c := http.DefaultClient
	dump := getOK(t, c, s.AdminURL+"/config_dump?include_eds")
	if !bytes.Contains(dump, []byte("alpha--k2--primary")) {
		t.Fatal("config_dump has no pool cluster: the search proves nothing")
	}
	secretsIn(t, "Envoy's config_dump", dump, secrets)
	secretsIn(t, "Envoy's stats", getOK(t, c, s.AdminURL+"/stats/prometheus"), secrets)
	secretsIn(t, "the sidecar's metrics", getOK(t, c, s.ControlURL+"/metrics"), secrets)
	health := getOK(t, c, s.URL+"/health")
	if !bytes.Contains(health, []byte(`"k3"`)) {
		t.Fatalf("/health names no key: %s", health)
	}
	secretsIn(t, "/health", health, secrets)
	secretsIn(t, "the sidecar's log", []byte(s.Sidecar.Log()), secrets)
	secretsIn(t, "Envoy's log", []byte(s.Envoy.Log()+" "), secrets)
	access, _ := os.ReadFile(filepath.Join(s.Dir, "envoy-access.log"))
	secretsIn(t, "Envoy's access log", append(access, ' '), secrets)
	entries, _, err := s.Store.Ledger(t.Context(), acct.ID, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	ledger, _ := json.Marshal(entries)
	if !bytes.Contains(ledger, []byte(`"VendorKey":"k1"`)) {
		t.Fatalf("no ledger entry names k1: %.300s", ledger)
	}
	secretsIn(t, "the ledger", ledger, secrets)
	secretsIn(t, "Redis", []byte(findAnyInRedis(t, s, secrets)+" "), secrets)

	// The operator console lists the keys, by name.
	jar, _ := cookiejar.New(nil)
	oc := &http.Client{Jar: jar}
	console := "http://" + s.Config.Listeners.Console
	resp, err := oc.PostForm(console+"/signin", url.Values{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	page := getOK(t, oc, console+"/vendor-keys")
	for _, want := range []string{"k1", "k2", "k3", "cooling", "disabled"} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the console's vendor keys page lacks %q", want)
		}
	}
	secretsIn(t, "the console's vendor keys page", page, secrets)
	secretsIn(t, "the console's accounts page", getOK(t, oc, console+"/"), secrets)
	secretsIn(t, "the console's account page", getOK(t, oc, console+"/accounts/"+acct.ID), secrets)
	assertCredentials(t, s, alphaSecrets())
}

// findAnyInRedis returns where any of secrets is in Redis, "" when nowhere.
func findAnyInRedis(t *testing.T, s *launch.Stack, secrets []string) string {
	t.Helper()
	for _, sec := range secrets {
		if where := findInRedis(t, s, sec); where != "" {
			return where + " " + sec
		}
	}
	return ""
}
