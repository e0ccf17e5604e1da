package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The matrix of the ways to the vendor: each transport of the Responses
// API (HTTP JSON, SSE, the WebSocket, a background response left to the
// poller) × vendor keys (one, a shared pool, a key pinned to the account)
// × admission (the per-request script, leases). In every cell each
// response is billed to the nano-USD from the catalogue, served by the key
// it must be (the fakes' per-key counts, request by request), and its
// ledger entry names that key.
func TestEveryWayToTheVendor(t *testing.T) {
	for _, keys := range []string{"one", "pool", "pinned"} {
		for _, leases := range []string{"off", "on"} {
			t.Run(keys+"/leases-"+leases, func(t *testing.T) { matrixCell(t, keys, leases) })
		}
	}
}

// matrixUsage is what the fakes report for every response of the matrix.
const matrixInput, matrixOutput = 240, 31

func matrixCell(t *testing.T, keys, leases string) {
	configure := func(c *config.Config) {
		c.Limits.Leases = leases
		c.Limits.BackgroundPoll = config.Duration(100 * time.Millisecond)
	}
	var s *launch.Stack
	var acct launch.Account
	want := "" // the key every response must be served by; "" for the pool: the account's
	switch keys {
	case "one":
		s = launchtest.Start(t, launch.Options{Configure: configure})
		acct, want = s.NewAccount(100, noLimits), "default"
	case "pool":
		s = launchtest.Start(t, launch.Options{Pool: 3, Configure: configure})
		acct = s.NewAccount(100, noLimits)
	case "pinned":
		s, acct = startPinned(t, "beta", configure)
		want = "k3"
	}
	waitHealthRoute(t, s, "primary")
	entry := servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses")[backgroundModel]
	if entry == nil {
		t.Fatalf("%s is not served on responses", backgroundModel)
	}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"input_tokens": matrixInput, "output_tokens": matrixOutput})
	}
	cost := expectedNano(t, entry, billed{input: matrixInput, output: matrixOutput})
	body := fmt.Sprintf(`{"model":%q,"input":"Say something."`, backgroundModel)

	ways := []struct {
		name string
		run  func(t *testing.T) // one response, to its end at the vendor
	}{
		{"http-json", func(t *testing.T) {
			resp, out := s.Do("POST", responsesPath, chatCompletionsHeaders(acct.Key), []byte(body+`}`))
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			matrixSaw(t, out, false)
		}},
		{"sse", func(t *testing.T) {
			resp, out := s.Do("POST", responsesPath, chatCompletionsHeaders(acct.Key), []byte(body+`,"stream":true}`))
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			matrixSaw(t, out, true)
		}},
		{"websocket", func(t *testing.T) {
			w := mustDialSocket(t, s, acct.Key, nil)
			evs := w.create(body + `}`)
			matrixSaw(t, evs[len(evs)-1].Response, false)
			w.c.Close(websocket.StatusNormalClosure, "")
		}},
		{"background", func(t *testing.T) {
			id := createBackground(t, s, acct.Key, `{"background_polls":2}`)
			waitUnparked(t, s, acct.ID, id)
		}},
	}
	for _, w := range ways {
		before := betaKeyCounts(s)
		w.run(t)
		s.WaitSettled()
		served := keysThatRose(before, betaKeyCounts(s))
		if len(served) != 1 {
			t.Errorf("%s: served by keys %v; want exactly one", w.name, served)
			continue
		}
		if want == "" {
			want = served[0] // the pool: the account's key, for every way
		}
		if served[0] != want {
			t.Errorf("%s: served by %s; want %s", w.name, served[0], want)
		}
	}

	entries := allLedgerEntries(t, s, acct.ID)
	if len(entries) != len(ways) {
		t.Fatalf("%d ledger entries; want one per way, %d", len(entries), len(ways))
	}
	sockets := 0
	for _, e := range entries {
		if e.Transport == "websocket" {
			sockets++
		}
		if e.VendorKey != want || e.Cost != cost || e.Estimated || e.Status != 200 {
			t.Errorf("ledger entry %s (%s): vendor key %q (want %q), cost %d (want %d), estimated %v, status %d",
				e.RequestID, e.Transport, e.VendorKey, want, e.Cost, cost, e.Estimated, e.Status)
		}
	}
	if sockets != 1 {
		t.Errorf("%d ledger entries on the WebSocket; want 1", sockets)
	}
	// Every message Envoy sent for them, under the shipped configuration,
	// took the sidecar's own decoder (extproc/wire), not protobuf's.
	if pb, hand := metricValue(t, s, `gateway_extproc_messages_decoded_total{decoder="protobuf"}`),
		metricValue(t, s, `gateway_extproc_messages_decoded_total{decoder="hand"}`); pb != 0 || hand < float64(2*len(ways)) {
		t.Errorf("Envoy's messages: %.0f decoded by protobuf, %.0f by hand; want none by protobuf", pb, hand)
	}
	// And every reply to them took its own encoder: only an immediate
	// response (a refusal, none so far) is protobuf's.
	if pb, hand := metricValue(t, s, `gateway_extproc_replies_encoded_total{encoder="protobuf"}`),
		metricValue(t, s, `gateway_extproc_replies_encoded_total{encoder="hand"}`); pb != 0 || hand < float64(2*len(ways)) {
		t.Errorf("the sidecar's replies: %.0f encoded by protobuf, %.0f by hand; want none by protobuf", pb, hand)
	}

	// A refusal on the socket says when to retry, in every cell: the
	// account's request rate made spent (a lease taken before the change
	// may admit a few more until it is renewed).
	if err := s.Store.SetLimits(t.Context(), acct.ID, account.Limits{RPM: 1}); err != nil {
		t.Fatal(err)
	}
	w := mustDialSocket(t, s, acct.Key, nil)
	defer w.c.Close(websocket.StatusNormalClosure, "")
	eventually.That(t, 15*time.Second, "the socket's rate refusal", func() (bool, string) {
		e := w.create(body + `}`)[0]
		if e.Type != "error" {
			return false, string(e.raw)
		}
		secs, err := strconv.Atoi(e.Headers["retry-after"])
		return e.Status == 429 && err == nil && secs >= 1 && secs <= 60 && e.Headers["x-should-retry"] != "false", string(e.raw)
	})
}

// matrixSaw checks the usage a reply showed the client: the fakes' figures.
func matrixSaw(t *testing.T, reply []byte, stream bool) {
	t.Helper()
	if b, _, _ := responsesBilled(t, reply, stream); b.input != matrixInput || b.output != matrixOutput {
		t.Errorf("the reply reported %d in, %d out; want %d and %d", b.input, b.output, matrixInput, matrixOutput)
	}
}

// betaKeyCounts is the API requests each of beta's vendor keys carried, at
// both fakes, by key name ("default" for the single key).
func betaKeyCounts(s *launch.Stack) map[string]int64 {
	names := map[string]string{launch.BetaVendorKey: "default"}
	secrets := []string{launch.BetaVendorKey}
	for _, k := range poolKeys {
		names[launch.PoolSecret("beta", k)] = k
		secrets = append(secrets, launch.PoolSecret("beta", k))
	}
	out := map[string]int64{}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for secret, st := range f.Keys(secrets...) {
			out[names[secret]] += st.Requests
		}
	}
	return out
}

// keysThatRose names the keys whose counts grew from before to after.
func keysThatRose(before, after map[string]int64) []string {
	var out []string
	for k, n := range after {
		if n > before[k] {
			out = append(out, k)
		}
	}
	return out
}
