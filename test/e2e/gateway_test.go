package e2e

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The vendor receives the client's body byte for byte, the vendor
// credential, and none of the client's credentials or our internal headers.
func TestForwardsBodiesAndSwapsCredentials(t *testing.T) {
	s := sharedStack(t, "gateway")
	acct := s.NewAccount(10, noLimits)

	// Odd spacing, unicode and a tool definition must survive untouched.
	tools := `,"tools":[{"name":"get_weather","description":"Wetter für eine Stadt ☀","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]`
	body := append(messagesBody(false, tools), []byte("  \n")...)
	h := messagesHeaders(acct.Key)
	h["x-gateway-endpoint"] = "spoofed"
	h["x-gateway-account"] = "spoofed"
	resp, out := s.Do("POST", alphaPath, h, body)
	if resp.StatusCode != 200 {
		t.Fatalf("alpha: %d %s", resp.StatusCode, out)
	}
	rec := s.Primary.LastRequest(config.FormatMessages, "/v1/messages")
	if !bytes.Equal(rec.Body, body) {
		t.Fatalf("vendor received a different body:\n got %q\nwant %q", rec.Body, body)
	}
	if got := header(rec.Headers, "x-api-key"); got != launch.AlphaVendorKey {
		t.Fatalf("vendor x-api-key = %q, want the vendor credential", got)
	}
	if got := header(rec.Headers, "anthropic-version"); got != "2023-06-01" {
		t.Fatalf("version header not forwarded: %q", got)
	}
	for k := range rec.Headers {
		if strings.HasPrefix(strings.ToLower(k), "x-gateway-") {
			t.Fatalf("internal header %s reached the vendor", k)
		}
	}

	bbody := chatCompletionsBody(false, false, "")
	resp, out = s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), bbody)
	if resp.StatusCode != 200 {
		t.Fatalf("beta: %d %s", resp.StatusCode, out)
	}
	rec = s.Primary.LastRequest(config.FormatChatCompletions, "/v1/chat/completions")
	if !bytes.Equal(rec.Body, bbody) {
		t.Fatalf("vendor received a different body")
	}
	if got := header(rec.Headers, "authorization"); got != "Bearer "+launch.BetaVendorKey {
		t.Fatalf("vendor authorization = %q, want the vendor credential", got)
	}
	if strings.Contains(strings.Join(flatten(rec.Headers), "\n"), acct.Key) {
		t.Fatal("the client's key reached the vendor")
	}
}

func TestStreamingBothRoutes(t *testing.T) {
	s := sharedStack(t, "gateway")
	acct := s.NewAccount(10, noLimits)

	resp, evs := stream(t, s, alphaPath, messagesHeaders(acct.Key), messagesBody(true, ""))
	if resp.StatusCode != 200 || len(evs) == 0 || evs[len(evs)-1].Name != "message_stop" {
		t.Fatalf("alpha stream: %d, %d events", resp.StatusCode, len(evs))
	}
	if ct := resp.Header.Get("content-type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("content-type %q", ct)
	}
	resp, evs = stream(t, s, betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(true, true, ""))
	if resp.StatusCode != 200 || len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("beta stream: %d, %d events", resp.StatusCode, len(evs))
	}
}

// With the vendor pacing events apart, the client receives them spread out
// the same way, not in one burst at the end.
func TestSSEIsNotBuffered(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 200, "reply_words": 6})

	for _, tc := range []struct {
		path   string
		header map[string]string
		body   []byte
	}{
		{alphaPath, messagesHeaders(acct.Key), messagesBody(true, "")},
		{betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(true, true, "")},
	} {
		start := time.Now()
		_, evs := stream(t, s, tc.path, tc.header, tc.body)
		if len(evs) < 6 {
			t.Fatalf("%s: %d events", tc.path, len(evs))
		}
		total := evs[len(evs)-1].At.Sub(start)
		spread := evs[len(evs)-1].At.Sub(evs[0].At)
		// Buffered delivery would put every event at the end: spread ≈ 0.
		if spread < total/2 {
			t.Fatalf("%s: events arrived within %v of a %v reply: buffered", tc.path, spread, total)
		}
		var avg time.Duration = spread / time.Duration(len(evs)-1)
		bunched := 0
		for i := 1; i < len(evs); i++ {
			if evs[i].At.Sub(evs[i-1].At) < avg/10 {
				bunched++
			}
		}
		if bunched > 1 {
			t.Fatalf("%s: %d of %d events arrived bunched with the previous one", tc.path, bunched, len(evs))
		}
	}
}

func TestHealthNeedsNoKey(t *testing.T) {
	s := sharedStack(t, "gateway")
	resp, body := s.Do("GET", "/health", nil, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("health: %d %s", resp.StatusCode, body)
	}
	var h struct {
		Status    string   `json:"status"`
		Region    string   `json:"region"`
		Upstreams []string `json:"upstreams"`
		TS        string   `json:"ts"`
	}
	mustJSON(t, body, &h)
	if h.Status != "ok" || h.Region != s.Config.Region || strings.Join(h.Upstreams, ",") != "alpha,beta" {
		t.Fatalf("health = %+v", h)
	}
	if _, err := time.Parse(time.RFC3339, h.TS); err != nil {
		t.Fatalf("ts %q is not ISO 8601: %v", h.TS, err)
	}
}

// SIGTERM to the sidecar during a slow stream: the stream completes, then
// the sidecar exits.
func TestSIGTERMLetsStreamsFinish(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 100, "reply_words": 15})

	resp := open(t, t.Context(), s, alphaPath, messagesHeaders(acct.Key), messagesBody(true, ""))
	defer resp.Body.Close()
	buf := make([]byte, 1)
	if _, err := resp.Body.Read(buf); err != nil { // the stream has started
		t.Fatal(err)
	}
	s.Sidecar.Signal(syscall.SIGTERM)
	rest := new(bytes.Buffer)
	if _, err := rest.ReadFrom(resp.Body); err != nil {
		t.Fatalf("stream cut after SIGTERM: %v", err)
	}
	if !strings.Contains(rest.String(), "message_stop") {
		t.Fatalf("stream did not complete:\n%s", rest)
	}
	if !s.Sidecar.Wait(30 * time.Second) {
		t.Fatal("sidecar did not exit after SIGTERM")
	}
	// The finished stream was settled before the sidecar exited.
	entries, _, err := s.Store.Ledger(t.Context(), acct.ID, "", 10)
	if err != nil || len(entries) != 1 || entries[0].Status != 200 || entries[0].Estimated {
		t.Fatalf("ledger = %+v, %v; want one exact entry", entries, err)
	}
}

func header(h map[string][]string, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func flatten(h map[string][]string) []string {
	var out []string
	for k, vs := range h {
		for _, v := range vs {
			out = append(out, k+": "+v)
		}
	}
	return out
}
