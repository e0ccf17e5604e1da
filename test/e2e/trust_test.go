package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// A client other than Envoy that reaches the processor with a valid key gets
// nothing of the vendor's: the sidecar never holds a vendor key (Envoy
// injects it), so no answer of the processor can carry one.
func TestForeignProcessorClientGetsNoVendorCredential(t *testing.T) {
	s := sharedStack(t, "trust")
	acct := s.NewAccount(10, noLimits)
	host, _, _ := net.SplitHostPort(s.Config.Listeners.ExtProc)
	if !config.IsLoopback(host) {
		t.Fatalf("the processor listens on %s, beyond loopback", s.Config.Listeners.ExtProc)
	}
	// From another host (here: this machine's own non-loopback addresses),
	// the processor and control ports cannot even be reached, so nothing
	// can be admitted from there.
	unreachable := 0
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		for _, l := range []string{s.Config.Listeners.ExtProc, s.Config.Listeners.Control} {
			_, port, _ := net.SplitHostPort(l)
			c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), port), 2*time.Second)
			if err == nil {
				c.Close()
				t.Fatalf("%s answers on %s", l, ipn.IP)
			}
			unreachable++
		}
	}
	t.Logf("sidecar ports refused on %d non-loopback address(es) of this machine", unreachable/2)
	conn, err := grpc.NewClient(s.Config.Listeners.ExtProc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, path := range []string{alphaPath, betaPath, "/alpha/v1/models", "/beta/v1/models"} {
		method := "POST"
		if strings.HasSuffix(path, "/models") {
			method = "GET"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hs := []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte(method)}, {Key: ":path", RawValue: []byte(path)},
			{Key: "x-api-key", RawValue: []byte(acct.Key)}, {Key: "authorization", RawValue: []byte("Bearer " + acct.Key)},
			{Key: "content-type", RawValue: []byte("application/json")},
		}
		err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: hs}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		// prototext shows bytes (raw_value) as text, not base64.
		text := prototext.Format(resp)
		for _, secret := range []string{launch.AlphaVendorKey, launch.BetaVendorKey} {
			if strings.Contains(text, secret) {
				t.Fatalf("%s: the processor's answer carries a vendor key:\n%s", path, text)
			}
		}
		if method == "GET" {
			// The model lists are the gateway's own answer.
			if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 200 {
				t.Fatalf("%s: want the gateway's own model list, got %s", path, text)
			}
			continue
		}
		if m := resp.GetRequestHeaders().GetResponse().GetHeaderMutation(); m == nil || len(m.SetHeaders) != 0 {
			t.Fatalf("%s: want a mutation that only removes headers, got %s", path, text)
		}
	}
	// Through Envoy the vendor still gets its key, and never the client's.
	resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("through Envoy: %d %s", resp.StatusCode, b)
	}
	rec := s.Primary.LastRequest(config.FormatMessages, "/v1/messages")
	if got := rec.Headers["X-Api-Key"]; len(got) != 1 || got[0] != launch.AlphaVendorKey {
		t.Fatalf("the vendor got x-api-key %q", got)
	}
}

// More than one credential header is refused with 401 naming the problem,
// on both routes and on /v1/usage, whether the copies agree or not.
func TestRepeatedCredentialHeaders(t *testing.T) {
	s := sharedStack(t, "trust")
	acct := s.NewAccount(10, noLimits)
	other := s.NewAccount(10, noLimits)
	cases := map[string][]string{
		"two x-api-key":                {"x-api-key: " + acct.Key, "x-api-key: " + acct.Key},
		"two different x-api-key":      {"x-api-key: " + acct.Key, "x-api-key: " + other.Key},
		"two Authorization":            {"Authorization: Bearer " + acct.Key, "Authorization: Bearer " + other.Key},
		"x-api-key and another bearer": {"x-api-key: " + acct.Key, "Authorization: Bearer " + other.Key},
	}
	start := time.Now()
	for name, hs := range cases {
		for _, path := range []string{alphaPath, betaPath} {
			body := messagesBody(false, "")
			if path == betaPath {
				body = chatCompletionsBody(false, false, "")
			}
			status, ctype, b := rawExchange(t, s, "POST "+path, append(hs, "content-type: application/json",
				"anthropic-version: 2023-06-01", fmt.Sprintf("content-length: %d", len(body))), body)
			checkError(t, path, status, ctype, b, 401, "authentication_error", "")
			if name != "x-api-key and another bearer" && !strings.Contains(string(b), "more than one") {
				t.Errorf("%s on %s: the message does not name the problem: %s", name, path, b)
			}
		}
		status, _, b := rawExchange(t, s, "GET /v1/usage", hs, nil)
		if status != 401 {
			t.Errorf("%s on /v1/usage: %d %s", name, status, b)
		}
	}
	for _, r := range append(s.Primary.Requests(), s.Reserve.Requests()...) {
		if r.Method == "POST" && !r.At.Before(start) { // the stack is shared: its earlier tests' requests aside
			t.Fatalf("a refused request reached a vendor: %s %s", r.Method, r.Path)
		}
	}
}

// /v1/usage takes exactly one period with a listed value.
func TestUsagePeriodThroughEnvoy(t *testing.T) {
	s := sharedStack(t, "trust")
	acct := s.NewAccount(10, noLimits)
	for query, want := range map[string]int{
		"period=month":             200,
		"period=month;":            400,
		"period=month;period=day":  400,
		"period=month&period=day":  400,
		"period=day&period=month":  400,
		"period=":                  400,
		"period=day&something=yes": 400,
	} {
		status, _, b := rawExchange(t, s, "GET /v1/usage?"+query, []string{"Authorization: Bearer " + acct.ReadOnly}, nil)
		if status != want {
			t.Errorf("?%s: %d %s, want %d", query, status, b, want)
		}
	}
}

// A model name longer than 256 bytes is refused in the vendor's format before
// admission, and leaves nothing in Redis.
func TestLongModelNameRefused(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	suffix := strings.Repeat("z", 300)
	keysBefore := s.RDB.DBSize(context.Background()).Val()
	for path, model := range map[string]string{alphaPath: alphaModel + suffix, betaPath: betaModel + suffix} {
		body := fmt.Sprintf(`{"model":%q,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, model)
		h := messagesHeaders(acct.Key)
		if path == betaPath {
			h = chatCompletionsHeaders(acct.Key)
		}
		resp, b := s.Do("POST", path, h, []byte(body))
		checkError(t, path, resp.StatusCode, resp.Header.Get("content-type"), b, 400, "invalid_request_error", "")
	}
	if n := s.RDB.DBSize(context.Background()).Val(); n != keysBefore {
		t.Fatalf("refused requests added %d Redis keys", n-keysBefore)
	}
	if keys := s.RDB.Keys(context.Background(), "*"+suffix[:50]+"*").Val(); len(keys) != 0 {
		t.Fatalf("the long model name reached Redis: %v", keys)
	}
}

// The client's address and the gateway's own headers stay at the gateway.
func TestClientAddressNotForwarded(t *testing.T) {
	s := sharedStack(t, "trust")
	acct := s.NewAccount(10, noLimits)
	h := messagesHeaders(acct.Key)
	h["x-forwarded-for"] = "203.0.113.7"
	h["x-real-ip"] = "203.0.113.7"
	h["forwarded"] = "for=203.0.113.7"
	h["x-gateway-endpoint"] = "forged"
	resp, b := s.Do("POST", alphaPath, h, messagesBody(false, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	rec := s.Primary.LastRequest(config.FormatMessages, "/v1/messages")
	if rec.Query != "" {
		t.Errorf("the vendor got query %q", rec.Query)
	}
	for name := range rec.Headers {
		switch strings.ToLower(name) {
		case "x-forwarded-for", "x-envoy-external-address", "x-real-ip", "forwarded", "x-gateway-endpoint", "x-api-key-client":
			t.Errorf("the vendor received %s: %q", name, rec.Headers[name])
		}
	}
}

// Query strings reach the vendor only as far as its API defines them.
func TestQueryStringsFiltered(t *testing.T) {
	s := sharedStack(t, "trust")
	acct := s.NewAccount(10, noLimits)
	for _, c := range []struct {
		method, path, format, vendorPath, want string
		body                                   []byte
		h                                      map[string]string
	}{
		{"POST", alphaPath + "?beta=true&key=" + acct.Key + "&x=1", config.FormatMessages, "/v1/messages", "beta=true", messagesBody(false, ""), messagesHeaders(acct.Key)},
		{"POST", betaPath + "?api-version=2024&user=me", config.FormatChatCompletions, "/v1/chat/completions", "", chatCompletionsBody(false, false, ""), chatCompletionsHeaders(acct.Key)},
		{"POST", "/alpha/v1/messages/count_tokens?beta=true&client=203.0.113.7", config.FormatMessages, "/v1/messages/count_tokens", "beta=true",
			[]byte(`{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}`), messagesHeaders(acct.Key)},
	} {
		resp, b := s.Do(c.method, c.path, c.h, c.body)
		if resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, resp.StatusCode, b)
		}
		// The first requests may reach the reserve while Envoy's first health
		// checks of the primary are still out.
		fake := s.Primary
		if resp.Header.Get("x-gateway-endpoint") == "reserve" {
			fake = s.Reserve
		}
		if rec := fake.LastRequest(c.format, c.vendorPath); rec.Query != c.want {
			t.Errorf("%s %s: the vendor got query %q, want %q", c.method, c.path, rec.Query, c.want)
		}
	}
}

// Envoy's admin interface is not on the probes listener: only readiness,
// Envoy's stats and the sidecar's metrics are, read-only.
func TestProbesListenerIsReadOnly(t *testing.T) {
	s := sharedStack(t, "trust")
	base := "http://" + s.Config.Listeners.Probes
	for _, c := range []struct {
		method, path string
		want         int
		contains     string
	}{
		{"GET", "/ready", 200, "LIVE"},
		{"GET", "/stats/prometheus", 200, "envoy_cluster_upstream_rq"},
		{"GET", "/metrics", 200, "gateway_admission_seconds"},
		{"POST", "/quitquitquit", 404, ""},
		{"POST", "/healthcheck/fail", 404, ""},
		{"POST", "/drain_listeners", 404, ""},
		{"POST", "/runtime_modify", 404, ""},
		{"GET", "/config_dump", 404, ""},
		{"POST", "/ready", 404, ""},
		{"GET", "/clusters", 404, ""},
	} {
		req, _ := http.NewRequest(c.method, base+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.want || !strings.Contains(string(b), c.contains) {
			t.Errorf("%s %s: %d (want %d), body %.200q", c.method, c.path, resp.StatusCode, c.want, b)
		}
	}
	// Envoy is still up and serving after the attempts.
	if resp, err := http.Get(s.AdminURL + "/ready"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("Envoy not ready after the probes: %v", err)
	}
}

// A client that trickles its headers is cut off after the configured request
// headers timeout instead of holding the connection open.
func TestSlowHeadersAreCutOff(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Envoy.RequestHeadersTimeout = config.Duration(time.Second)
	}})
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: gateway\r\nx-slow: 1\r\n", alphaPath)
	// Keep trickling one header line at a time; Envoy must close well before
	// the bound (the default idle timeouts are an hour).
	deadline := time.Now().Add(20 * time.Second)
	conn.SetReadDeadline(deadline)
	closed := make(chan error, 1)
	go func() {
		_, err := io.ReadAll(conn)
		closed <- err
	}()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case err := <-closed:
			// EOF or a reset: Envoy closed it. A read timeout: it did not.
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection was not closed by Envoy: %v", err)
			}
			return
		case <-tick.C:
			fmt.Fprintf(conn, "x-more-%d: 1\r\n", i)
		}
	}
}

// Malformed HTTP/1 requests get an answer in the gateway's JSON shape, not
// a silent close.
func TestMalformedHTTP1GetsAnAnswer(t *testing.T) {
	s := sharedStack(t, "trust")
	acct := s.NewAccount(10, noLimits)
	body := `{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[]}`
	for name, raw := range map[string]string{
		"content-length and chunked":  "POST " + alphaPath + " HTTP/1.1\r\nHost: g\r\nx-api-key: " + acct.Key + "\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"two content-lengths":         "POST " + alphaPath + " HTTP/1.1\r\nHost: g\r\nx-api-key: " + acct.Key + fmt.Sprintf("\r\nContent-Length: %d\r\nContent-Length: 3\r\n\r\n", len(body)) + body,
		"NUL in a header":             "GET /health HTTP/1.1\r\nHost: g\r\nx-a: b\x00c\r\n\r\n",
		"underscore in a header":      "GET /alpha/v1/models HTTP/1.1\r\nHost: g\r\nx_api_key: " + acct.Key + "\r\n\r\n",
		"unknown method":              "BREW /health HTTP/1.1\r\nHost: g\r\n\r\n",
		"HTTP/1.0":                    "GET /health HTTP/1.0\r\n\r\n",
		"headers over the size limit": "GET /alpha/v1/models HTTP/1.1\r\nHost: g\r\nx-big: " + strings.Repeat("a", 61<<10) + "\r\n\r\n",
		"more headers than allowed":   "GET /alpha/v1/models HTTP/1.1\r\nHost: g\r\n" + strings.Repeat("x-h: 1\r\n", 150) + "\r\n",
	} {
		status, ctype, b, err := tryRawBytes(s, raw)
		if err != nil {
			t.Errorf("%s: no HTTP answer: %v", name, err)
			continue
		}
		if status < 400 || status > 499 || !strings.HasPrefix(ctype, "application/json") || !strings.Contains(string(b), `"error"`) {
			t.Errorf("%s: %d %q %q; want a 4xx JSON error", name, status, ctype, b)
		}
	}
	if s.Sidecar.Exited() {
		t.Fatal("the sidecar died")
	}
}

// rawExchange sends a request with headers exactly as given (repeats kept)
// and returns status, content type and body.
func rawExchange(t *testing.T, s *launch.Stack, requestLine string, headers []string, body []byte) (int, string, []byte) {
	t.Helper()
	method, path, _ := strings.Cut(requestLine, " ")
	raw := method + " " + path + " HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n" + joinHeaders(headers) + "\r\n" + string(body)
	return rawBytes(t, s, raw)
}

func rawBytes(t *testing.T, s *launch.Stack, raw string) (int, string, []byte) {
	t.Helper()
	status, ctype, b, err := tryRawBytes(s, raw)
	if err != nil {
		t.Fatalf("%.60q: %v", raw, err)
	}
	return status, ctype, b
}

func tryRawBytes(s *launch.Stack, raw string) (int, string, []byte, error) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		return 0, "", nil, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		return 0, "", nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("content-type"), b, nil
}

// A suspended account's keys get 403 in the vendor's format within the key
// cache's TTL; its usage stays readable; resuming restores service.
func TestSuspendedAccount(t *testing.T) {
	s := sharedStack(t, "trust")
	acct := s.NewAccount(10, noLimits)
	ctx := context.Background()
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, "")); resp.StatusCode != 200 {
		t.Fatalf("before: %d %s", resp.StatusCode, b)
	}
	if err := s.Store.SetSuspended(ctx, acct.ID, true); err != nil {
		t.Fatal(err)
	}
	// The key cache holds 2 s: served until then, refused after.
	eventually.That(t, 15*time.Second, "refused after suspension", func() (bool, string) {
		resp, b := s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))
		if resp.StatusCode == 403 {
			checkError(t, betaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 403, "", "")
			return true, ""
		}
		if resp.StatusCode != 200 {
			t.Fatalf("after suspension: %d %s", resp.StatusCode, b)
		}
		return false, "200"
	})
	resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
	checkError(t, alphaPath, resp.StatusCode, resp.Header.Get("content-type"), b, 403, "permission_error", "")
	if !strings.Contains(string(b), "suspended") {
		t.Fatalf("the message does not say why: %s", b)
	}
	for _, cred := range []string{acct.ReadOnly, acct.Key} {
		if resp, b := s.Do("GET", "/v1/usage", map[string]string{"Authorization": "Bearer " + cred}, nil); resp.StatusCode != 200 {
			t.Fatalf("usage while suspended: %d %s", resp.StatusCode, b)
		}
	}
	if err := s.Store.SetSuspended(ctx, acct.ID, false); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 15*time.Second, "served after resuming", func() (bool, string) {
		resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, ""))
		return resp.StatusCode == 200, fmt.Sprintf("%d %s", resp.StatusCode, b)
	})
}

// The sidecar refuses to start with ext_proc or control beyond loopback and
// no mutual TLS, and with the admin API beyond loopback at all.
func TestSidecarRefusesOpenBinds(t *testing.T) {
	cfg := filepath.Join(launchtest.RepoRoot(t), "gateway.yaml")
	for _, args := range [][]string{
		{"--listen-extproc", "0.0.0.0:0"},
		{"--listen-control", "0.0.0.0:0"},
		{"--listen-extproc", "[::]:0"},
		{"--listen-admin", "0.0.0.0:0"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, launchtest.Binary(t, "gateway"), append([]string{"serve", "--config", cfg,
			"--listen-extproc", "127.0.0.1:0", "--listen-control", "127.0.0.1:0", "--listen-admin", "127.0.0.1:0"}, args...)...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(os.Environ(), "GATEWAY_ADMIN_TOKEN=test-admin-token-0123456789", "REDIS_URL=")
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(string(out), "beyond loopback") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
}

// With mutual TLS the sidecar may listen beyond loopback: Envoy, holding the
// client certificate, is served; a foreign client without it is refused at
// the handshake, so it can neither read a credential nor admit a request.
func TestSidecarBeyondLoopbackWithMutualTLS(t *testing.T) {
	pki := mtlstest.Write(t, t.TempDir(), "gw")
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		for _, a := range []*string{&c.Listeners.ExtProc, &c.Listeners.Control} {
			_, port, _ := net.SplitHostPort(*a)
			*a = "0.0.0.0:" + port
		}
		c.Listeners.TLS = config.SidecarTLS{CA: pki.CA, ServerCert: pki.ServerCert, ServerKey: pki.ServerKey,
			ClientCert: pki.ClientCert, ClientKey: pki.ClientKey}
	}})
	acct := s.NewAccount(10, noLimits)
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, "")); resp.StatusCode != 200 {
		t.Fatalf("through Envoy: %d %s", resp.StatusCode, b)
	}
	if resp, b := s.Do("GET", "/v1/usage", map[string]string{"Authorization": "Bearer " + acct.ReadOnly}, nil); resp.StatusCode != 200 {
		t.Fatalf("usage through Envoy: %d %s", resp.StatusCode, b)
	}
	_, port, _ := net.SplitHostPort(s.Config.Listeners.ExtProc)
	for name, creds := range map[string]credentials.TransportCredentials{
		"plaintext":          insecure.NewCredentials(),
		"TLS without a cert": credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}),
	} {
		conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
		if err == nil {
			err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
				RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
					{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte(alphaPath)},
					{Key: "x-api-key", RawValue: []byte(acct.Key)},
				}}},
			}})
		}
		if err == nil {
			_, err = stream.Recv()
		}
		cancel()
		conn.Close()
		if err == nil {
			t.Errorf("%s: a foreign client was served", name)
		}
	}
	// The control server likewise refuses a client without the certificate.
	_, cport, _ := net.SplitHostPort(s.Config.Listeners.Control)
	insecureTLS := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err := insecureTLS.Get("https://127.0.0.1:" + cport + "/v1/usage"); err == nil {
		resp.Body.Close()
		t.Fatalf("the control server answered a client without a certificate: %d", resp.StatusCode)
	}
}
