package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// backgroundModel is served on responses only.
const backgroundModel = "gpt-5.1-codex"

// createBackground starts a background response and returns its id; the
// answer is "queued", without usage.
func createBackground(t *testing.T, s *launch.Stack, key, controls string) string {
	t.Helper()
	h := chatCompletionsHeaders(key)
	if controls != "" {
		h["x-fake-controls"] = controls
	}
	resp, out := s.Do("POST", responsesPath, h, []byte(fmt.Sprintf(`{"model":%q,"background":true,"input":"Work on this"}`, backgroundModel)))
	var r struct {
		ID, Status string
		Usage      any
	}
	if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil || r.Status != "queued" || r.Usage != nil {
		t.Fatalf("background create: %d %s", resp.StatusCode, out)
	}
	return r.ID
}

// waitUnparked polls until the response's request has settled and been
// forgotten, within a bound.
func waitUnparked(t *testing.T, s *launch.Stack, accountID, id string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, parked, err := s.Store.Parked(context.Background(), accountID, id)
		if err != nil {
			t.Fatal(err)
		}
		if !parked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still parked after 30s", id)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// A background response is held when created, and billed once, with the
// vendor's final usage, when its client reads it to its end; reads before
// and after bill nothing. A cancelled one pays the usage its cancellation
// reports.
func TestBackgroundResponseSettledByItsClient(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.BackgroundPoll = config.Duration(time.Hour / 2) // no reconciler in this test
		c.Limits.HoldLease = config.Duration(time.Hour)
	}})
	acct := s.NewAccount(100, noLimits)
	ctx := context.Background()
	entry := servedModels(t, s.Config.Catalogue, "openai", []string{"chat", "responses"}, "/v1/responses")[backgroundModel]

	id := createBackground(t, s, acct.Key, `{"background_polls":1}`)
	if n, _, _ := s.Store.OpenHolds(ctx, acct.ID); n != 1 {
		t.Fatalf("%d open holds after the create, want 1", n)
	}
	statuses := []string{}
	var final []byte
	for range 3 {
		resp, out := s.Do("GET", responsesPath+"/"+id, chatCompletionsHeaders(acct.Key), nil)
		var r struct{ Status string }
		if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil {
			t.Fatalf("retrieve: %d %s", resp.StatusCode, out)
		}
		statuses = append(statuses, r.Status)
		if r.Status == "completed" && final == nil {
			final = out
		}
	}
	if fmt.Sprint(statuses) != "[in_progress completed completed]" {
		t.Fatalf("statuses %v", statuses)
	}
	waitUnparked(t, s, acct.ID, id)
	entries, _, err := s.Store.Ledger(ctx, acct.ID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	u, _, _ := responsesBilled(t, final, false)
	if len(entries) != 1 || entries[0].Cost != expectedNano(t, entry, u) || entries[0].Estimated || entries[0].Usage.Output != u.output {
		t.Fatalf("ledger %+v; want one entry of %d nano-USD", entries, expectedNano(t, entry, u))
	}
	if n, _, _ := s.Store.OpenHolds(ctx, acct.ID); n != 0 {
		t.Fatalf("%d open holds after the settlement", n)
	}

	// Cancelled before it ends: the cancellation's reply settles it.
	id = createBackground(t, s, acct.Key, `{"background_polls":5}`)
	resp, out := s.Do("POST", responsesPath+"/"+id+"/cancel", chatCompletionsHeaders(acct.Key), nil)
	var c struct{ Status string }
	if resp.StatusCode != 200 || json.Unmarshal(out, &c) != nil || c.Status != "cancelled" {
		t.Fatalf("cancel: %d %s", resp.StatusCode, out)
	}
	waitUnparked(t, s, acct.ID, id)
	entries, _, _ = s.Store.Ledger(ctx, acct.ID, "", 10)
	cu, _, _ := responsesBilled(t, out, false)
	if len(entries) != 2 || entries[1].Cost != expectedNano(t, entry, cu) || entries[1].Usage.Output != 0 || entries[1].Usage.Input == 0 {
		t.Fatalf("ledger after the cancellation %+v", entries)
	}
}

// A background response its client never reads is settled by the
// sidecars' reconcilers, exactly once, with two sidecars (each with its
// Envoy) on one Redis and one vendor.
func TestBackgroundResponseNeverPolledSettledOnce(t *testing.T) {
	fast := func(c *config.Config) { c.Limits.BackgroundPoll = config.Duration(100 * time.Millisecond) }
	a := launchtest.Start(t, launch.Options{Configure: fast})
	b := launchtest.Start(t, launch.Options{RedisAddr: a.RedisAddr, Configure: func(c *config.Config) {
		fast(c)
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			u.Primary.URL, u.Reserve.URL = a.Primary.Addrs.URL(u.Format), a.Reserve.Addrs.URL(u.Format)
		}
	}})
	acct := a.NewAccount(100, noLimits)
	ctx := context.Background()
	id := createBackground(t, a, acct.Key, `{"background_polls":3}`)
	waitUnparked(t, a, acct.ID, id)

	entries, _, err := b.Store.Ledger(ctx, acct.ID, "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Estimated || entries[0].Usage.Output == 0 || entries[0].Status != 200 {
		t.Fatalf("ledger %+v; want the response billed once from its final usage", entries)
	}
	if n, _, _ := a.Store.OpenHolds(ctx, acct.ID); n != 0 {
		t.Fatalf("%d open holds", n)
	}
	polls := 0
	for _, r := range a.Primary.RequestsTo(config.FormatChatCompletions, "/v1/responses/"+id) {
		if r.Method == "GET" {
			polls++
		}
	}
	if polls < 4 { // three in progress, one completed
		t.Fatalf("the vendor was polled %d times", polls)
	}
}

// A background response whose final state claims more output than its
// request allowed is charged for max_output_tokens at most, flagged capped
// and counted, as a reply read in one exchange is.
func TestBackgroundResponseUsageIsCapped(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.BackgroundPoll = config.Duration(100 * time.Millisecond)
	}})
	acct := s.NewAccount(10, noLimits)
	h := chatCompletionsHeaders(acct.Key)
	h["x-fake-controls"] = `{"background_polls":1,"output_tokens":9000000000000000000}`
	resp, out := s.Do("POST", responsesPath, h,
		[]byte(fmt.Sprintf(`{"model":%q,"background":true,"max_output_tokens":300,"input":"Work on this"}`, backgroundModel)))
	var r struct{ ID string }
	if resp.StatusCode != 200 || json.Unmarshal(out, &r) != nil || r.ID == "" {
		t.Fatalf("background create: %d %s", resp.StatusCode, out)
	}
	waitUnparked(t, s, acct.ID, r.ID)
	entries := checkBooks(t, s, acct.ID, 10_000_000_000, map[string]bool{})
	if len(entries) != 1 || !entries[0].Capped || entries[0].Usage.Output != 300 {
		t.Fatalf("ledger %+v; want one entry of 300 output tokens, capped", entries)
	}
	if n := sidecarMetric(t, s, "gateway_usage_capped_total"); n != 1 {
		t.Errorf("gateway_usage_capped_total %v, want 1", n)
	}
}
