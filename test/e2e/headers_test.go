package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// What reaches vendors and clients: the client's headers a vendor
// documents (and nothing that picks where the operator's spend lands), and
// never a vendor's refusal naming the operator's key.

// dropped are client headers no vendor hears: organisation, project and
// workspace (they pick whose spend it is), alternative credentials, and
// headers no vendor documents.
var dropped = map[string]string{
	"openai-organization": "org-tenant", "openai-project": "proj_tenant", "anthropic-workspace-id": "wrkspc_tenant",
	"api-key": "tenant-azure-key", "proxy-authorization": "Basic dGVuYW50", "cookie": "session=tenant", "x-tenant-anything": "1",
}

// The fake's log of each request shows the dropped headers absent and the
// documented ones present, on both vendors' HTTP paths and on the
// WebSocket handshake the sidecar makes itself.
func TestClientHeadersAllowList(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	allowedAlpha := map[string]string{"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31",
		"x-stainless-os": "Linux", "user-agent": "Anthropic/Python 0.1", "idempotency-key": "stainless-retry-1", "x-claude-code-session-id": "sess-1"}
	allowedBeta := map[string]string{"openai-beta": "assistants=v2", "x-stainless-lang": "python", "user-agent": "OpenAI/Python 1.0",
		"x-client-request-id": "client-1", "originator": "codex_cli_rs"}
	for _, c := range []struct {
		path, format, vendorPath string
		h                        map[string]string
		allowed                  map[string]string
		body                     []byte
	}{
		{alphaPath, config.FormatMessages, "/v1/messages", messagesHeaders(acct.Key), allowedAlpha, messagesBody(false, "")},
		{betaPath, config.FormatChatCompletions, "/v1/chat/completions", chatCompletionsHeaders(acct.Key), allowedBeta, chatCompletionsBody(false, false, "")},
	} {
		for k, v := range dropped {
			c.h[k] = v
		}
		for k, v := range c.allowed {
			c.h[k] = v
		}
		resp, b := s.Do("POST", c.path, c.h, c.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.path, resp.StatusCode, b)
		}
		fake := s.Primary
		if resp.Header.Get("x-gateway-endpoint") == "reserve" {
			fake = s.Reserve
		}
		checkForwarded(t, c.path, fake.LastRequest(c.format, c.vendorPath).Headers, c.allowed)
	}

	// The socket's handshake to the vendor.
	extra := map[string]string{"originator": "codex_cli_rs"} // dialSocket sends openai-beta
	for k, v := range dropped {
		extra[k] = v
	}
	w := mustDialSocket(t, s, acct.Key, extra)
	socketBilled(t, w.create(`{"model":"gpt-6-sol","input":"hi"}`))
	var hs []launch.Record
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		for _, r := range f.RequestsTo(config.FormatChatCompletions, "/v1/responses") {
			if r.Method == "GET" {
				hs = append(hs, r)
			}
		}
	}
	if len(hs) != 1 {
		t.Fatalf("%d socket handshakes reached the fakes", len(hs))
	}
	checkForwarded(t, "the socket", hs[0].Headers, map[string]string{"openai-beta": "responses_websockets=2026-02-06", "originator": "codex_cli_rs"})
}

func checkForwarded(t *testing.T, what string, got map[string][]string, allowed map[string]string) {
	t.Helper()
	heard := map[string]string{}
	for k, vs := range got {
		heard[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	for k := range dropped {
		if v, ok := heard[k]; ok {
			t.Errorf("%s: the vendor heard %s: %q", what, k, v)
		}
	}
	for k, v := range allowed {
		if heard[k] != v {
			t.Errorf("%s: the vendor heard %s %q, want %q", what, k, heard[k], v)
		}
	}
}

// A vendor's 401 or 403 naming the operator's key by its last characters
// reaches the client as the gateway's own error in the vendor's format,
// status kept: JSON and streamed requests, on both vendors, and the
// socket's handshake.
func TestVendorRefusalNeverNamesTheKey(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	masked := []string{"********", launch.AlphaVendorKey[:8], launch.BetaVendorKey[:8], "cret"}
	clean := func(what string, b []byte) {
		t.Helper()
		for _, m := range masked {
			if bytes.Contains(b, []byte(m)) {
				t.Errorf("%s: the client got the vendor's refusal: %s", what, b)
			}
		}
	}
	for _, status := range []int{401, 403} {
		for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
			f.ForceKey(launch.AlphaVendorKey, status, "")
			f.ForceKey(launch.BetaVendorKey, status, "")
		}
		alphaType, betaCode := "authentication_error", "invalid_api_key"
		if status == 403 {
			alphaType, betaCode = "permission_error", ""
		}
		for _, streaming := range []bool{false, true} {
			for _, c := range []struct {
				path string
				h    map[string]string
				body []byte
			}{
				{alphaPath, messagesHeaders(acct.Key), messagesBody(streaming, "")},
				{betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(streaming, streaming, "")},
			} {
				what := c.path + " " + strconv.Itoa(status) + " stream=" + strconv.FormatBool(streaming)
				resp, b := s.Do("POST", c.path, c.h, c.body)
				clean(what, b)
				checkError(t, c.path, resp.StatusCode, resp.Header.Get("content-type"), b, status, alphaType, betaCode)
				if !bytes.Contains(b, []byte("your key was accepted")) {
					t.Errorf("%s: %s", what, b)
				}
			}
		}
		_, resp, err := dialSocket(t, s, acct.Key, nil)
		if err == nil || resp == nil || resp.StatusCode != status {
			t.Fatalf("socket handshake: %v %v", resp, err)
		}
		b, _ := io.ReadAll(resp.Body)
		clean("socket handshake", b)
	}
	if n := sidecarMetric(t, s, "gateway_vendor_credential_refusals_total"); n < 10 {
		t.Errorf("gateway_vendor_credential_refusals_total %v, want at least 10", n)
	}
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.ForceKey(launch.AlphaVendorKey, 0, "")
		f.ForceKey(launch.BetaVendorKey, 0, "")
	}
}

// bigBodies are how many request bodies of bigBodySize are sent at once
// to a key whose rate is spent (the figures of issue 42).
const (
	bigBodies   = 8
	bigBodySize = 16 << 20
)

// earlyRefusalRSSBound is the growth of Envoy's and the sidecar's peak
// RSS those bodies may cause when refused at their headers: what Envoy
// takes in of each while its headers are checked (the route's buffer
// limit applies from the route's choice on, so a slower check lets more
// in: 11 to 14 MiB on a quiet machine, 35 on a loaded one) and headroom
// for the runtimes; half of the 128 MiB the bodies are, which each
// process held (and more) when they were buffered.
const earlyRefusalRSSBound = 64 << 20

// Eight 16 MiB bodies sent at once on a key whose request rate is spent
// are refused at their headers (gateway_header_refusals_total), the
// refusal the body phase gave, and cost neither Envoy nor the sidecar a
// buffer: their peak RSS grows less than earlyRefusalRSSBound.
func TestSpentKeyRefusedBeforeItsBody(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, account.Limits{RPM: 1, WindowMinutes: 1})
	if r, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, "")); r.StatusCode != 200 {
		t.Fatalf("first request: %d %s", r.StatusCode, b)
	}
	atBody, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	checkError(t, alphaPath, atBody.StatusCode, atBody.Header.Get("content-type"), b, 429, "rate_limit_error", "")
	early0 := sidecarMetric(t, s, "gateway_header_refusals_total", `kind="rpm"`)
	answers := sendBigBodies(t, s, acct.Key)
	if got := sidecarMetric(t, s, "gateway_header_refusals_total", `kind="rpm"`) - early0; got != bigBodies {
		t.Errorf("%v of %d refused at their headers", got, bigBodies)
	}
	for _, resp := range answers {
		if resp.StatusCode != atBody.StatusCode || resp.Header.Get("x-should-retry") != atBody.Header.Get("x-should-retry") ||
			resp.Header.Get("retry-after") == "" || resp.Header.Get("content-type") != atBody.Header.Get("content-type") {
			t.Errorf("refused at the headers: %d %v; at the body: %d %v", resp.StatusCode, resp.Header, atBody.StatusCode, atBody.Header)
		}
	}
}

// sendBigBodies sends bigBodies bodies of bigBodySize at once on key, which
// must be refused at their headers: their peak RSS growth, Envoy's and the
// sidecar's, stays under earlyRefusalRSSBound and none reaches the vendor.
// It returns the answers the client read (Envoy may answer before the body
// is sent, and the client then see its write cut instead).
func sendBigBodies(t *testing.T, s *launch.Stack, key string) []*http.Response {
	t.Helper()
	apiRequests := s.Primary.APIRequests() + s.Reserve.APIRequests()
	pad := bytes.Repeat([]byte("x"), bigBodySize-200)
	body := append(append([]byte(`{"model":"`+alphaModel+`","max_tokens":16,"messages":[{"role":"user","content":"`), pad...), `"}]}`...)
	pids := []int{s.Envoy.Cmd.Process.Pid, s.Sidecar.Cmd.Process.Pid}
	var before [2]int64
	for i, pid := range pids {
		before[i] = procStatusKB(t, pid, "VmRSS")
		resetPeakRSS(t, pid)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
	var wg sync.WaitGroup
	answers := make(chan *http.Response, bigBodies)
	for range bigBodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(context.Background(), "POST", s.URL+alphaPath, bytes.NewReader(body))
			for k, v := range messagesHeaders(key) {
				req.Header.Set(k, v)
			}
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				answers <- resp
			}
		}()
	}
	wg.Wait()
	close(answers)
	for i, pid := range pids {
		grew := (procStatusKB(t, pid, "VmHWM") - before[i]) << 10
		t.Logf("%s: peak RSS %d MiB above %d MiB", []string{"envoy", "sidecar"}[i], grew>>20, before[i]>>10)
		if grew > earlyRefusalRSSBound {
			t.Errorf("%s: peak RSS grew %d MiB under %d refused bodies of %d MiB, more than %d MiB",
				[]string{"envoy", "sidecar"}[i], grew>>20, bigBodies, bigBodySize>>20, earlyRefusalRSSBound>>20)
		}
	}
	if n := s.Primary.APIRequests() + s.Reserve.APIRequests(); n != apiRequests {
		t.Errorf("%d refused requests reached the vendor", n-apiRequests)
	}
	var got []*http.Response
	for resp := range answers {
		got = append(got, resp)
	}
	return got
}

// Eight 16 MiB bodies sent at once to an account whose balance is gone
// are refused at their headers by the key's standing, with no refusal
// before them: the answer the admission gives an account whose balance
// cannot cover a request (402, x-should-retry: false, no retry-after),
// and no buffer (sendBigBodies).
func TestSpentAccountRefusedBeforeItsBody(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	// One nano-USD covers no request: the admission refuses it after its
	// body, and the standing (a balance above 0) lets its headers pass.
	poor := s.NewAccount(1e-9, noLimits)
	atBody, b := s.Do("POST", alphaPath, messagesHeaders(poor.Key), messagesBody(false, ""))
	checkError(t, alphaPath, atBody.StatusCode, atBody.Header.Get("content-type"), b, 402, "", "")
	spent := s.NewAccount(0, noLimits)
	early0 := sidecarMetric(t, s, "gateway_header_refusals_total", `kind="balance"`)
	answers := sendBigBodies(t, s, spent.Key)
	if got := sidecarMetric(t, s, "gateway_header_refusals_total", `kind="balance"`) - early0; got != bigBodies {
		t.Errorf("%v of %d refused at their headers", got, bigBodies)
	}
	for _, resp := range answers {
		if resp.StatusCode != atBody.StatusCode || resp.Header.Get("x-should-retry") != "false" ||
			resp.Header.Get("retry-after") != "" || resp.Header.Get("content-type") != atBody.Header.Get("content-type") {
			t.Errorf("refused at the headers: %d %v; at the body: %d %v", resp.StatusCode, resp.Header, atBody.StatusCode, atBody.Header)
		}
	}
}
