package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/vendorusage"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// reconcileStack is a stack whose pooled keys name the fake's ids for them
// and whose upstreams have admin keys, which Envoy injects on the relay.
// The fake bills the test's models at the catalogue's prices.
func reconcileStack(t *testing.T, more ...func(*config.Config)) *launch.Stack {
	return reconcileStackWith(t, launch.Options{}, more...)
}

// reconcileStackWith is reconcileStack with o's Redis and sidecar
// environment.
func reconcileStackWith(t *testing.T, o launch.Options, more ...func(*config.Config)) *launch.Stack {
	s := launchtest.Start(t, launch.Options{Pool: 3, RedisAddr: o.RedisAddr, SidecarEnv: append(o.SidecarEnv, "GATEWAY_ADMIN_TOKEN="+adminToken), Configure: func(c *config.Config) {
		for _, f := range more {
			f(c)
		}
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			u.AdminCredentialEnv = launch.AdminKeyEnv(u.Name)
			for j := range u.VendorKeys {
				k := &u.VendorKeys[j]
				k.VendorKeyID = launch.VendorKeyID(launch.PoolSecret(u.Name, k.Name))
			}
		}
	}})
	s.Primary.SetPrice(config.FormatMessages, alphaModel, priceOf(t, s, "alpha", alphaModel), 1)
	s.Primary.SetPrice(config.FormatChatCompletions, betaModel, priceOf(t, s, "beta", betaModel), 1)
	s.Primary.SetPrice("embeddings", embeddingModel, priceOf(t, s, "beta", embeddingModel), 1)
	s.Primary.SetPrice("audio_transcriptions", "whisper-1", priceOf(t, s, "beta", "whisper-1"), 1)
	for _, m := range []string{imageModel, tokenTranscribeModel} {
		s.Primary.SetPrice(config.FormatChatCompletions, m, priceOf(t, s, "beta", m), 1)
	}
	return s
}

// The embedding, image and token-priced transcription models the
// reconciliation tests send.
const (
	embeddingModel       = "text-embedding-3-small"
	imageModel           = "gpt-image-1"
	tokenTranscribeModel = "gpt-4o-transcribe"
)

// catalogueCost is u of the upstream's model at the catalogue's standard
// rates, as the reconciliation prices a difference.
func catalogueCost(t *testing.T, s *launch.Stack, upstream string, u usage.Usage) int64 {
	t.Helper()
	if u == (usage.Usage{}) {
		return 0
	}
	return priceOf(t, s, upstream, upstreamModel[upstream]).Price(u, "", "").Cost
}

// reconcileHours reads both vendors' hourly reports of [from, to) through
// the relay, and the account's ledger, and reconciles each upstream.
func reconcileHours(t *testing.T, s *launch.Stack, acct string, from, to time.Time) map[string][]reconcile.Row {
	t.Helper()
	s.WaitSettled()
	var ledger []account.Settlement
	after := ""
	for {
		page, next, err := s.Store.LedgerBetween(t.Context(), acct, from, to, after, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page {
			ledger = append(ledger, e.Settlement)
		}
		if next == "" {
			break
		}
		after = next
	}
	out := map[string][]reconcile.Row{}
	for _, u := range s.Config.Upstreams {
		rows, err := vendorusage.Fetch(t.Context(), http.DefaultClient, "http://"+s.Config.Listeners.Relay+"/"+u.Name, u.Format, from, to, vendorusage.Hour)
		if err != nil {
			t.Fatalf("%s: %v", u.Name, err)
		}
		p := priceOf(t, s, u.Name, upstreamModel[u.Name])
		in := reconcile.Input{Keys: map[string]string{}, Vendor: rows, Width: time.Hour,
			Price: func(_ string, u usage.Usage) int64 { return p.Price(u, "", "").Cost }}
		for _, k := range u.Keys() {
			in.Keys[k.Name] = k.VendorKeyID
		}
		for _, st := range ledger {
			// The test's models tell the upstreams apart: alpha's is the
			// only one alpha serves.
			if (string(st.Priced) == alphaModel) == (u.Name == "alpha") {
				in.Ledger = append(in.Ledger, st)
			}
		}
		out[u.Name] = reconcile.Reconcile(in)
	}
	return out
}

// Mixed requests on both vendors and a pool of three keys reconcile to
// nothing unexplained, per key, model and hour, the vendors' totals equal
// to the ledger's; usage billed to a key outside the gateway shows as
// exactly that much unexplained, on that key alone.
func TestReconcileVendorReports(t *testing.T) {
	s := reconcileStack(t, func(c *config.Config) { c.Limits.BackgroundPoll = config.Duration(100 * time.Millisecond) })
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	from := time.Now().UTC().Truncate(time.Hour)

	n := 490 // and the ten others below: 500 requests
	for i := range n {
		session := fmt.Sprintf("rc-%d", i)
		stream := i%2 == 1
		var (
			resp *http.Response
			body []byte
		)
		if i%4 < 2 {
			h := messagesHeaders(acct.Key)
			h["x-claude-code-session-id"] = session
			resp, body = s.Do("POST", alphaPath, h, messagesBody(stream, ""))
		} else {
			h := chatCompletionsHeaders(acct.Key)
			h["x-claude-code-session-id"] = session
			resp, body = s.Do("POST", betaPath, h, chatCompletionsBody(stream, stream, ""))
		}
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	// The Responses API on beta, which the completions report counts: a
	// reply, a stream, a background response (settled by the sidecar's
	// polls) and a response over the WebSocket.
	for _, stream := range []bool{false, true} {
		body := fmt.Sprintf(`{"model":%q,"input":"What does it cost?","stream":%v}`, betaModel, stream)
		if resp, out := s.Do("POST", responsesPath, chatCompletionsHeaders(acct.Key), []byte(body)); resp.StatusCode != 200 {
			t.Fatalf("responses (stream %v): %d %s", stream, resp.StatusCode, out)
		}
	}
	bgResp, bgOut := s.Do("POST", responsesPath, chatCompletionsHeaders(acct.Key), []byte(fmt.Sprintf(`{"model":%q,"background":true,"input":"Work on this"}`, betaModel)))
	var bg struct{ ID string }
	if bgResp.StatusCode != 200 || json.Unmarshal(bgOut, &bg) != nil || bg.ID == "" {
		t.Fatalf("background: %d %s", bgResp.StatusCode, bgOut)
	}
	waitUnparked(t, s, acct.ID, bg.ID)
	ws := mustDialSocket(t, s, acct.Key, nil)
	if evs := ws.create(fmt.Sprintf(`{"model":%q,"input":"Over the socket."}`, betaModel)); evs[len(evs)-1].Type != "response.completed" {
		t.Fatalf("socket response: %s", evs[len(evs)-1].raw)
	}
	ws.c.Close(websocket.StatusNormalClosure, "")
	// An embedding and a transcription, which their own reports count.
	if resp, out := s.Do("POST", "/beta/v1/embeddings", chatCompletionsHeaders(acct.Key), []byte(`{"model":"`+embeddingModel+`","input":["one","two"]}`)); resp.StatusCode != 200 {
		t.Fatalf("embeddings: %d %s", resp.StatusCode, out)
	}
	form, hdr := transcriptionForm(t, acct.Key, 40_000, "model", "whisper-1") // 2.5 s: billed 3
	if resp, out := s.Do("POST", transcriptionsPath, hdr, form); resp.StatusCode != 200 {
		t.Fatalf("transcription: %d %s", resp.StatusCode, out)
	}
	// Images and transcriptions priced by tokens, which the completions
	// report counts: JSON and streamed each.
	for _, body := range []string{
		`{"model":"` + imageModel + `","prompt":"A lighthouse at dawn","n":2,"quality":"low"}`,
		`{"model":"` + imageModel + `","prompt":"A lighthouse","stream":true,"partial_images":1,"quality":"low"}`,
	} {
		if resp, out := s.Do("POST", imagesPath, chatCompletionsHeaders(acct.Key), []byte(body)); resp.StatusCode != 200 {
			t.Fatalf("images: %d %.300s", resp.StatusCode, out)
		}
	}
	for _, stream := range []string{"false", "true"} {
		form, hdr := transcriptionForm(t, acct.Key, 16_000, "model", tokenTranscribeModel, "stream", stream, "prompt", "Names: Ada.")
		if resp, out := s.Do("POST", transcriptionsPath, hdr, form); resp.StatusCode != 200 {
			t.Fatalf("transcription (%s, stream %s): %d %s", tokenTranscribeModel, stream, resp.StatusCode, out)
		}
	}
	const others = 10
	n += others
	to := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)

	check := func(outside map[string]usage.Usage) {
		t.Helper()
		byUpstream := reconcileHours(t, s, acct.ID, from, to)
		entries := 0
		for name, rows := range byUpstream {
			var vendor, ledger usage.Usage
			keys := map[string]bool{}
			for _, r := range rows {
				vendor, ledger = vendor.Add(r.Vendor), ledger.Add(r.Ledger)
				entries += r.Entries
				if r.Entries > 0 {
					keys[r.VendorKey] = true
				}
				want := outside[name+"/"+r.VendorKey]
				if r.Unexplained.Usage != want || r.Unexplained.Cost != catalogueCost(t, s, name, want) || r.Explained != nil ||
					r.VendorCost != r.LedgerCost+r.Unexplained.Cost {
					t.Errorf("%s key %s (%s) %s %s: unexplained %+v, explained %+v; want %+v unexplained (vendor %+v, ledger %+v)",
						name, r.VendorKey, r.VendorKeyID, r.Model, r.Start.Format(time.RFC3339), r.Unexplained, r.Explained, want, r.Vendor, r.Ledger)
				}
			}
			var extra usage.Usage
			for k, u := range outside {
				if len(k) > len(name) && k[:len(name)+1] == name+"/" {
					extra = extra.Add(u)
				}
			}
			if vendor != ledger.Add(extra) {
				t.Errorf("%s: the vendor counted %+v, the ledger %+v (and %+v outside)", name, vendor, ledger, extra)
			}
			if len(keys) < 2 {
				t.Errorf("%s: the requests used the keys %v; the test wants a pool in use", name, keys)
			}
			t.Logf("%s: %d rows, vendor %d tokens, ledger %d, keys %v", name, len(rows), reconcile.Tokens(vendor), reconcile.Tokens(ledger), keys)
		}
		if entries != n {
			t.Errorf("%d ledger entries reconciled; want %d", entries, n)
		}
	}
	check(nil)

	// Ten requests sent to the vendor with k2 directly, not through the
	// gateway: unexplained on k2 alone, exactly what the fake's own log
	// billed for them.
	before := len(s.Primary.Billed(config.FormatMessages))
	for i := range 10 {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", s.Primary.Addrs.URL(config.FormatMessages)+"/v1/messages",
			bytes.NewReader(messagesBody(i%2 == 1, "")))
		for k, v := range messagesHeaders(launch.PoolSecret("alpha", "k2")) {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("direct request %d: %d %.300s", i, resp.StatusCode, out)
		}
	}
	var direct usage.Usage
	var directBilled int64
	k2 := launch.VendorKeyID(launch.PoolSecret("alpha", "k2"))
	directLog := s.Primary.Billed(config.FormatMessages)[before:]
	for _, b := range directLog {
		if b.KeyID != k2 {
			t.Fatalf("the fake billed %+v to %s; want the direct requests' key %s", b.Usage(), b.KeyID, k2)
		}
		direct, directBilled = direct.Add(b.Usage()), directBilled+b.NanoUSD
	}
	if len(directLog) != 10 || direct == (usage.Usage{}) {
		t.Fatalf("the fake billed %d entries (%+v) for the ten direct requests", len(directLog), direct)
	}
	// The reconciliation prices the sum once, the fake each request
	// rounded up: at most one nano-USD apart per request.
	if d := directBilled - catalogueCost(t, s, "alpha", direct); d < 0 || d > 10 {
		t.Errorf("the direct requests: the fake billed %d nano-USD, the catalogue prices their %+v at %d", directBilled, direct, catalogueCost(t, s, "alpha", direct))
	}
	check(map[string]usage.Usage{"alpha/k2": direct})
	t.Logf("ten direct requests on k2: %d tokens, %d nano-USD billed", reconcile.Tokens(direct), directBilled)

	// A client leaves a beta stream mid-way: its entry is settled at an
	// estimate, while the vendor bills all it generated. That difference is
	// explained, to the token; nothing else changes.
	s.Primary.Control(map[string]any{"format": "chat_completions", "event_delay_ms": 50, "reply_words": 40})
	cutBody := chatCompletionsBody(true, true, "")
	ctx, cancel := context.WithCancel(t.Context())
	h := chatCompletionsHeaders(acct.Key)
	h["x-claude-code-session-id"] = "rc-cut"
	cutResp := open(t, ctx, s, betaPath, h, cutBody)
	buf := make([]byte, 2048)
	for read := 0; read < 600; { // the first chunks, a few words
		m, err := cutResp.Body.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		read += m
	}
	cancel()
	cutResp.Body.Close()
	s.Primary.Control(map[string]any{"format": "chat_completions", "event_delay_ms": 0, "reply_words": 0})
	var cut account.Settlement
	eventually.That(t, 20*time.Second, "the cut stream's estimated entry", func() (bool, string) {
		entries, _, err := s.Store.Ledger(t.Context(), acct.ID, "", 1000)
		for _, e := range entries {
			if e.Estimated {
				cut = e.Settlement
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d entries, none estimated (%v)", len(entries), err)
	})
	// What the fake billed for it: ceil(len(body)/8) input, 40 words.
	explained := usage.Usage{Input: int64(len(cutBody)+7)/8 - cut.Usage.Input, Output: 40 - cut.Usage.Output}
	if explained.Output <= 0 {
		t.Fatalf("the cut entry counts %+v: the client saw the whole reply, the test shows nothing", cut.Usage)
	}
	found := false
	for name, rows := range reconcileHours(t, s, acct.ID, from, to) {
		for _, r := range rows {
			wantUnexplained := usage.Usage{}
			if name == "alpha" && r.VendorKey == "k2" {
				wantUnexplained = direct
			}
			if r.Unexplained.Usage != wantUnexplained {
				t.Errorf("%s %s %s: unexplained %+v; want %+v", name, r.VendorKey, r.Start.Format(time.RFC3339), r.Unexplained, wantUnexplained)
			}
			if r.Estimated == 0 {
				if r.Explained != nil {
					t.Errorf("%s %s: explained %+v without an estimated entry", name, r.VendorKey, r.Explained)
				}
				continue
			}
			found = true
			d := r.Explained[reconcile.ClientDisconnect]
			if name != "beta" || r.VendorKey != cut.VendorKey || d.Usage != explained || d.Cost != catalogueCost(t, s, name, explained) || len(r.Explained) != 1 {
				t.Errorf("%s %s: explained %+v; want %+v as %s on beta %s", name, r.VendorKey, r.Explained, explained, reconcile.ClientDisconnect, cut.VendorKey)
			}
		}
	}
	if !found {
		t.Error("no row holds the estimated entry")
	}
	t.Logf("cut stream on %s: ledger %+v, explained %+v", cut.VendorKey, cut.Usage, explained)

	// gatewayctl reconcile, through the sidecar's admin API, shows the same:
	// k2's direct usage unexplained, nothing else.
	out := adminCtl(t, s).ok("reconcile", "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339), "--json")
	var resp struct {
		Rows []struct {
			Upstream    string            `json:"upstream"`
			VendorKey   string            `json:"vendor_key"`
			Model       string            `json:"model"`
			Entries     int               `json:"entries"`
			Unexplained map[string]string `json:"unexplained"`
			Explained   []any             `json:"explained"`
		} `json:"rows"`
	}
	mustJSON(t, []byte(out), &resp)
	entries, explainedRows, unexplained := 0, 0, map[string]map[string]string{}
	for _, r := range resp.Rows {
		entries += r.Entries
		if len(r.Unexplained) > 0 {
			unexplained[r.Upstream+"/"+r.VendorKey+"/"+r.Model] = r.Unexplained
		}
		explainedRows += len(r.Explained)
	}
	want := map[string]string{}
	for _, k := range usage.Kinds {
		if q := k.Of(direct); q != 0 {
			want[k.Name] = strconv.FormatInt(q, 10)
		}
	}
	if got := unexplained["alpha/k2/"+alphaModel]; len(unexplained) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gatewayctl reconcile: unexplained %v; want %v on alpha/k2 alone\n%s", unexplained, want, out)
	}
	if entries != n+1 || explainedRows != 1 {
		t.Errorf("gatewayctl reconcile: %d entries, %d explained differences; want %d and 1", entries, explainedRows, n+1)
	}

	// The whole day, with the cost reports: alpha's bill is the ledger's
	// charges and k2's direct usage at the catalogue's prices, to the
	// nano-USD. beta's holds the cut reply, which the fake rounds up once
	// and the report in two parts (the estimate and the rest). Then beta's
	// price is doubled at the vendor: the next reply's extra cost, from the
	// fake's own log, is unexplained on beta's day.
	dayFrom := from.Truncate(24 * time.Hour)
	dayCosts := func() map[string]int64 {
		t.Helper()
		out := adminCtl(t, s).ok("reconcile", "--from", dayFrom.Format(time.RFC3339), "--to", dayFrom.Add(24*time.Hour).Format(time.RFC3339), "--json")
		var resp struct {
			Costs []struct {
				Upstream    string `json:"upstream"`
				Billed      string `json:"billed_nano_usd"`
				Unexplained string `json:"unexplained_nano_usd"`
			} `json:"costs"`
		}
		mustJSON(t, []byte(out), &resp)
		got := map[string]int64{}
		for _, c := range resp.Costs {
			if c.Billed == "" || c.Billed == "0" {
				t.Errorf("%s: the vendor billed nothing for the day\n%s", c.Upstream, out)
			}
			var n int64
			fmt.Sscan(c.Unexplained, &n)
			got[c.Upstream] += n
		}
		if len(resp.Costs) != 2 {
			t.Errorf("cost rows %+v; want one per upstream\n%s", resp.Costs, out)
		}
		return got
	}
	billed := s.Primary.Billed(config.FormatChatCompletions)
	var cutBilled int64
	for _, b := range billed {
		if b.Usage() == cut.Usage.Add(explained) && b.KeyID == launch.VendorKeyID(launch.PoolSecret("beta", cut.VendorKey)) {
			cutBilled = b.NanoUSD
		}
	}
	rounding := cutBilled - cut.Cost - catalogueCost(t, s, "beta", explained)
	if rounding < -1 || rounding > 1 {
		t.Errorf("the cut reply: the fake billed %d nano-USD, the ledger %d and the rest %d", cutBilled, cut.Cost, catalogueCost(t, s, "beta", explained))
	}
	if got := dayCosts(); got["alpha"] != 0 || got["beta"] != rounding {
		t.Errorf("the day's unexplained costs %v; want alpha 0 and beta %d", got, rounding)
	}
	s.Primary.SetPrice(config.FormatChatCompletions, betaModel, priceOf(t, s, "beta", betaModel), 2)
	if resp, body := s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, "")); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	billed = s.Primary.Billed(config.FormatChatCompletions)
	last := billed[len(billed)-1]
	raised := last.NanoUSD - catalogueCost(t, s, "beta", last.Usage())
	if raised <= 0 {
		t.Fatalf("the raised price billed %d nano-USD for %+v", last.NanoUSD, last.Usage())
	}
	if got := dayCosts(); got["alpha"] != 0 || got["beta"] != rounding+raised {
		t.Errorf("after a price raise, the day's unexplained costs %v; want alpha 0 and beta %d", got, rounding+raised)
	}
	t.Logf("beta's price doubled: %d nano-USD unexplained on the day (rounding %d)", raised, rounding)

	// The sidecar read the reports, and never held an admin key.
	admins := []string{launch.AlphaAdminKey, launch.BetaAdminKey}
	cfg, err := os.ReadFile(s.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	secretsIn(t, "the sidecar's config", cfg, admins)
	pid := s.Sidecar.Cmd.Process.Pid
	environ, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	secretsIn(t, "the sidecar's environment", environ, admins)
	mem := processMemory(t, pid)
	if !bytes.Contains(mem, []byte(launch.VendorKeyID(launch.PoolSecret("alpha", "k2")))) {
		t.Fatal("the sidecar's memory as read holds no vendor key id it reconciled: the search proves nothing")
	}
	secretsIn(t, "the sidecar's memory", mem, admins)
	dump := getOK(t, http.DefaultClient, s.AdminURL+"/config_dump?include_eds")
	if !bytes.Contains(dump, []byte("alpha--admin")) {
		t.Fatal("config_dump has no admin cluster: the search proves nothing")
	}
	secretsIn(t, "Envoy's config_dump", dump, admins)
	secretsIn(t, "the sidecar's metrics", getOK(t, http.DefaultClient, s.ControlURL+"/metrics"), admins)
	secretsIn(t, "the sidecar's log", []byte(s.Sidecar.Log()), admins)
	secretsIn(t, "Envoy's log", []byte(s.Envoy.Log()+" "), admins)
	if where := findAnyInRedis(t, s, admins); where != "" {
		t.Errorf("an admin key is in Redis: %s", where)
	}
	jar, _ := cookiejar.New(nil)
	oc := &http.Client{Jar: jar}
	console := "http://" + s.Config.Listeners.Console
	signIn, err := oc.PostForm(console+"/signin", url.Values{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	signIn.Body.Close()
	page := getOK(t, oc, console+"/reconcile")
	if !bytes.Contains(page, []byte("<h2>Reconciliation</h2>")) {
		t.Fatalf("the console's reconciliation page: %s", page)
	}
	secretsIn(t, "the console's reconciliation page", page, admins)
}

// The usage reports are reachable only through the relay, which adds the
// admin key: the public listener does not route them, and the relay
// refuses other methods.
func TestReconcileReportsOnlyOnTheRelay(t *testing.T) {
	s := reconcileStack(t)
	acct := s.NewAccount(100, noLimits)
	q := "?starting_at=" + time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339)
	resp, body := s.Do("GET", "/alpha"+vendorusage.AnthropicPath+q, messagesHeaders(acct.Key), nil)
	if resp.StatusCode == 200 {
		t.Errorf("the public listener served the usage report: %s", body)
	}
	req, _ := http.NewRequest("POST", "http://"+s.Config.Listeners.Relay+"/alpha"+vendorusage.AnthropicPath+q, nil)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 404 {
		t.Errorf("the relay answered a POST of the usage report with %d, want 404", r.StatusCode)
	}
	for _, rec := range s.Primary.Requests() {
		if rec.Path == vendorusage.AnthropicPath {
			t.Errorf("the fake received a usage report request as an API request: %+v", rec.Path)
		}
	}
}
