package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Hostile bodies each get a clear error with the right status in the
// vendor's format, nothing reaches the vendor, and the gateway stays up.
func TestHostileBodies(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	deep := strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200)
	cases := []struct {
		name, body string
	}{
		{"invalid JSON", `{"model": "x",`},
		{"array", `[{"model":"claude-sonnet-4-5"}]`},
		{"scalar", `42`},
		{"string", `"hello"`},
		{"empty", ``},
		{"deep nesting", `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[],"x":` + deep + `}`},
		{"non-UTF-8", "{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}"},
		{"negative max_tokens", `{"model":"claude-sonnet-4-5","max_tokens":-1,"messages":[]}`},
		{"fractional max_tokens", `{"model":"claude-sonnet-4-5","max_tokens":1.5,"messages":[]}`},
		{"huge max_tokens", `{"model":"claude-sonnet-4-5","max_tokens":100000000000000000000,"messages":[]}`},
		{"max_tokens over the model's limit", `{"model":"claude-sonnet-4-5","max_tokens":10000000,"messages":[]}`},
		{"max_tokens as string", `{"model":"claude-sonnet-4-5","max_tokens":"5","messages":[]}`},
		{"model as number", `{"model":5,"max_tokens":5,"messages":[]}`},
		{"unknown model", `{"model":"gpt-99","max_tokens":5,"messages":[]}`},
		{"duplicate model key", `{"model":"claude-haiku-4-5","model":"claude-opus-4-1","max_tokens":5,"messages":[]}`},
		{"duplicate max_tokens", `{"model":"claude-sonnet-4-5","max_tokens":1,"max_tokens":64000,"messages":[]}`},
		{"trailing garbage", `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[]} {}`},
	}
	for _, c := range cases {
		for _, route := range []string{alphaPath, betaPath} {
			body := c.body
			h := messagesHeaders(acct.Key)
			if route == betaPath {
				body = strings.ReplaceAll(body, "claude-sonnet-4-5", betaModel)
				h = chatCompletionsHeaders(acct.Key)
			}
			resp, b := s.Do("POST", route, h, []byte(body))
			checkError(t, route, resp.StatusCode, resp.Header.Get("content-type"), b, 400, "invalid_request_error", "")
		}
	}
	for _, r := range s.Primary.Requests() {
		if r.Method == "POST" {
			t.Fatalf("a hostile body reached the vendor: %s", r.Body)
		}
	}
	if s.Sidecar.Exited() {
		t.Fatal("sidecar died")
	}
}

// Over-limit bodies and headers are refused by Envoy itself, in the route's
// vendor format.
func TestOversizeRequests(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	// A large body under the limit works.
	ok := append([]byte(`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"`), bytes.Repeat([]byte("a"), 1<<20)...)
	ok = append(ok, []byte(`"}]}`)...)
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), ok); resp.StatusCode != 200 {
		t.Fatalf("1 MiB body: %d %s", resp.StatusCode, b)
	}

	over := 32<<20 + 1
	resp, b := postExpectingRefusal(t, s, alphaPath, messagesHeaders(acct.Key), over)
	checkError(t, alphaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 413, "request_too_large", "")
	resp, b = postExpectingRefusal(t, s, betaPath, chatCompletionsHeaders(acct.Key), over)
	checkError(t, betaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 413, "", "request_too_large")

	// Headers over the 60 KiB limit: 431 with a JSON body, then the
	// connection closes. The request must go nowhere and the gateway must
	// keep serving.
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gateway\r\nx-api-key: %s\r\nx-padding: %s\r\nContent-Length: 2\r\n\r\n{}",
		alphaPath, acct.Key, strings.Repeat("p", 61<<10))
	reply, _ := io.ReadAll(conn)
	conn.Close()
	if !bytes.HasPrefix(reply, []byte("HTTP/1.1 431")) || !bytes.Contains(reply, []byte(`"error"`)) {
		t.Fatalf("oversize headers answered %q", reply[:min(len(reply), 100)])
	}
	for _, r := range s.Primary.Requests() {
		if r.Method == "POST" && len(r.Body) < 1<<20 {
			t.Fatalf("oversize headers reached the vendor")
		}
	}
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, "")); resp.StatusCode != 200 {
		t.Fatalf("gateway not serving after oversize headers: %d %s", resp.StatusCode, b)
	}
}

// Path tricks cannot reach anything a credential does not allow, nor skip
// metering.
func TestPathTricks(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	a := s.NewAccount(10, noLimits)
	other := s.NewAccount(10, noLimits)
	s.Do("POST", alphaPath, messagesHeaders(other.Key), messagesBody(false, ""))

	// Raw paths, sent as they are.
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/alpha/../v1/usage", 200},         // normalised to /v1/usage: own account only
		{"/alpha/%2e%2e/v1/usage", 200},     // same, encoded dots
		{"/alpha%2Fv1%2Fmessages", 400},     // encoded slashes are rejected
		{"/alpha/v1%2Fmessages", 400},       // same
		{"/ALPHA/v1/messages", 404},         // routes are case-sensitive
		{"/alpha/V1/MESSAGES", 404},         // unknown vendor path: vendor-format 404
		{"/alpha", 404},                     // no route
		{"/beta/v1/usage", 404},             // usage is not a vendor path
		{"/alpha/v1/models/../messages", 0}, // normalised to the metered path (checked below)
	} {
		resp := rawRequest(t, s, "GET", c.path, "x-api-key: "+a.Key)
		if c.status != 0 && resp != c.status {
			t.Errorf("GET %s: %d, want %d", c.path, resp, c.status)
		}
	}
	// Usage read through a trick path is still the credential's own.
	if u := s.Usage(a.ReadOnly, "total"); num(t, u, "usage.requests") != 0 {
		t.Fatalf("account a sees usage: %v", u)
	}
	// Double slashes are merged: still metered.
	resp, b := s.Do("POST", "//alpha//v1/messages", messagesHeaders(a.Key), messagesBody(false, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("//alpha//v1/messages: %d %s", resp.StatusCode, b)
	}
	if u := s.Usage(a.ReadOnly, "total"); num(t, u, "usage.requests") != 1 {
		t.Fatalf("a request through // was not metered: %v", u)
	}
	// A key in the query string is ignored.
	resp, _ = s.Do("POST", alphaPath+"?x-api-key="+a.Key+"&key="+a.Key, map[string]string{"content-type": "application/json"}, messagesBody(false, ""))
	if resp.StatusCode != 401 {
		t.Fatalf("key in the query string accepted: %d", resp.StatusCode)
	}
	// ro_ tokens on every route.
	for _, p := range []string{alphaPath, betaPath, "/alpha/v1/models", "/beta/v1/models", "/alpha/v1/messages/count_tokens"} {
		resp, _ := s.Do("POST", p, map[string]string{"Authorization": "Bearer " + a.ReadOnly}, messagesBody(false, ""))
		if resp.StatusCode != 403 {
			t.Errorf("ro_ token on %s: %d, want 403", p, resp.StatusCode)
		}
	}
	// Free paths work with a model key and cost nothing.
	resp, b = s.Do("GET", "/alpha/v1/models", messagesHeaders(a.Key), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("free path: %d %s", resp.StatusCode, b)
	}
	if u := s.Usage(a.ReadOnly, "total"); num(t, u, "usage.requests") != 1 {
		t.Fatalf("free path was billed: %v", u)
	}
}

// postExpectingRefusal sends only the request headers of a body of n bytes,
// with Expect: 100-continue, and returns the reply that comes before any of
// the body is sent. The gateway refuses an oversize declared length (and
// oversize headers) at once; a client that streams the body regardless may
// see the connection reset instead, as with any HTTP/1.1 server that refuses
// early.
func postExpectingRefusal(t *testing.T, s *launch.Stack, path string, header map[string]string, n int) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// One write, so that Envoy has read all of it before it answers: bytes
	// left unread when it closes would make the kernel reset the connection.
	var req strings.Builder
	fmt.Fprintf(&req, "POST %s HTTP/1.1\r\nHost: gateway\r\nContent-Length: %d\r\nExpect: 100-continue\r\n", path, n)
	for k, v := range header {
		fmt.Fprintf(&req, "%s: %s\r\n", k, v)
	}
	req.WriteString("\r\n")
	io.WriteString(conn, req.String())
	r := bufioReader(conn)
	for {
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("POST %s: no reply: %v", path, err)
		}
		if resp.StatusCode == http.StatusContinue {
			continue // Envoy's own 100; the verdict follows
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
}

// rawRequest sends a request line exactly as given, with no client-side
// path cleaning, and returns the status code.
func rawRequest(t *testing.T, s *launch.Stack, method, path string, headers ...string) int {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n%s\r\n", method, path, joinHeaders(headers))
	resp, err := http.ReadResponse(bufioReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func joinHeaders(hs []string) string {
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(h + "\r\n")
	}
	return b.String()
}

// When the processor is gone, Envoy fails closed with a retryable 503 in the
// vendor's format; with no healthy upstream, likewise.
func TestEnvoyLocalRepliesInVendorFormat(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)

	s.Primary.Process.Signal(syscall.SIGKILL)
	s.Reserve.Process.Signal(syscall.SIGKILL)
	s.Primary.Process.Wait(10e9)
	s.Reserve.Process.Wait(10e9)
	resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	checkError(t, alphaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 503, "overloaded_error", "")
	resp, b = s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))
	checkError(t, betaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 503, "", "service_unavailable")

	s.Sidecar.Signal(syscall.SIGKILL)
	s.Sidecar.Wait(10e9)
	resp, b = s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	checkError(t, alphaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 503, "overloaded_error", "")
	resp, b = s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))
	checkError(t, betaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 503, "", "service_unavailable")
}
