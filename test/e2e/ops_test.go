package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// healthRecord is GET /health's body.
type healthRecord struct {
	Status    string            `json:"status"`
	Endpoints map[string]string `json:"endpoints"`
	Problems  []string          `json:"problems"`
}

func getHealthRecord(t *testing.T, url string) (int, healthRecord, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	took := time.Since(start)
	var h healthRecord
	mustJSON(t, b, &h)
	return resp.StatusCode, h, took
}

// Both endpoints of both upstreams down: /health says so, naming each
// upstream, and model requests get 503 with retry-after in the vendor's
// format. When the reserve comes back, /health is ok again.
func TestOpsBothEndpointsDown(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(10, noLimits)
	if code, h, _ := getHealthRecord(t, s.URL+"/health"); code != 200 || h.Status != "ok" {
		t.Fatalf("before the outage: %d %+v", code, h)
	}
	fault := time.Now()
	s.Primary.Control(map[string]any{"status": 503})
	s.Reserve.Control(map[string]any{"status": 503})
	var h healthRecord
	eventually.True(t, 30*time.Second, "/health to report both upstreams without endpoint", func() bool {
		var code int
		code, h, _ = getHealthRecord(t, s.URL+"/health")
		return code == 503 && h.Endpoints["alpha"] == "none" && h.Endpoints["beta"] == "none"
	})
	noticed := time.Since(fault)
	joined := strings.Join(h.Problems, "; ")
	if h.Status == "ok" || !strings.Contains(joined, "upstream alpha") || !strings.Contains(joined, "upstream beta") {
		t.Fatalf("/health during the outage: %+v", h)
	}
	// Envoy's workers see the last health check results a moment after its
	// admin does: poll until the local 503 arrives.
	for _, route := range []string{"alpha", "beta"} {
		path, hdr, body := requestFor(route, acct.Key, false)
		var resp *http.Response
		var b []byte
		tries := 0
		eventually.True(t, 10*time.Second, route+" 503 with retry-after", func() bool {
			tries++
			resp, b = s.Do("POST", path, hdr, body)
			return resp.StatusCode == 503 && resp.Header.Get("retry-after") != ""
		})
		var e struct {
			Error struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		mustJSON(t, b, &e)
		if e.Error.Message == "" {
			t.Fatalf("%s: error body %s", route, b)
		}
		t.Logf("%s: 503 with retry-after %s after %d tries", route, resp.Header.Get("retry-after"), tries)
	}
	// No panic routing: while neither endpoint is healthy, requests do not
	// reach the vendors at all.
	vendorPOSTs := func() int { return s.Primary.APIRequests() + s.Reserve.APIRequests() }
	before := vendorPOSTs()
	for i := range 10 {
		path, hdr, body := requestFor([]string{"alpha", "beta"}[i%2], acct.Key, false)
		resp, b := s.Do("POST", path, hdr, body)
		if resp.StatusCode != 503 || resp.Header.Get("retry-after") == "" || resp.Header.Get("x-gateway-endpoint") != "none" {
			t.Fatalf("request %d with both endpoints down: %d retry-after %q endpoint %q %s", i, resp.StatusCode,
				resp.Header.Get("retry-after"), resp.Header.Get("x-gateway-endpoint"), b)
		}
	}
	if n := vendorPOSTs() - before; n != 0 {
		t.Errorf("10 client requests with both endpoints down cost %d vendor requests", n)
	}
	// Counted as each request's settlement is applied, a batch (20 ms)
	// after its reply.
	eventually.That(t, 5*time.Second, "gateway_requests_total{endpoint=none} to count them", func() (bool, string) {
		got := sidecarMetric(t, s, "gateway_requests_total", `endpoint="none"`)
		return got >= 1, fmt.Sprint(got)
	})
	s.Reserve.Control(map[string]any{"status": 0})
	recovered := time.Now()
	eventually.True(t, 30*time.Second, "/health ok on the reserve", func() bool {
		code, h, _ := getHealthRecord(t, s.URL+"/health")
		return code == 200 && h.Status == "ok" && h.Endpoints["alpha"] == "reserve"
	})
	t.Logf("both endpoints down: /health 503 naming both upstreams %.2fs after the fault; model requests 503 with retry-after; ok on the reserve %.2fs after it recovered",
		noticed.Seconds(), time.Since(recovered).Seconds())
}

// A primary that accepts and never answers, with the operator's opt-in to
// retry requests the vendor received (failover.retry_sent_requests) and a
// 3 s time-to-first-byte limit: requests already waiting on it and new ones
// are served by the reserve within 5 s, and each request is generated once
// (the hung primary generates nothing, the reserve once per request). A
// stream longer than the first-byte limit is not cut by it.
//
// Without the opt-in, the same requests are retried on the reserve at the
// first-byte limit too (TestOpsDefaultRetryPolicy); the opt-in adds any 5xx.
func TestOpsHungPrimary(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			c.Upstreams[i].Failover.RetrySentRequests = true
			c.Upstreams[i].Failover.FirstByteTimeout = config.Duration(3 * time.Second)
			// The wait of a non-streaming request also scales with what
			// it asked for; vendors this fast keep it at the first-byte
			// limit, the subject here.
			c.Upstreams[i].Failover.PrefillTokensPerSecond = 1_000_000
			c.Upstreams[i].Failover.GenerationTokensPerSecond = 1_000_000
		}
	}})
	acct := s.NewAccount(100, noLimits)
	waitHealthRoute(t, s, "primary")
	before := map[string]map[string]int{"primary": s.Primary.Stats(), "reserve": s.Reserve.Stats()}

	fault := time.Now()
	s.Primary.Control(map[string]any{"hang": true})
	type result struct {
		route    string
		status   int
		endpoint string
		took     time.Duration
		err      error
	}
	const inflight = 6
	results := make(chan result, 64)
	var wg sync.WaitGroup
	send := func(route string) {
		defer wg.Done()
		path, hdr, body := requestFor(route, acct.Key, false)
		start := time.Now()
		r := postAndRead(&http.Client{Timeout: 30 * time.Second}, s.URL+path, hdr, body, 0, nil)
		results <- result{route, r.status, r.header.Get("x-gateway-endpoint"), time.Since(start), r.err}
	}
	// In flight: sent right after the hang began, so they reach the hung
	// primary.
	for i := range inflight {
		wg.Add(1)
		go send([]string{"alpha", "beta"}[i%2])
	}
	// New requests keep coming, one every 250 ms, for 6 s.
	sent := inflight
	for time.Since(fault) < 6*time.Second {
		wg.Add(1)
		go send([]string{"alpha", "beta"}[sent%2])
		sent++
		time.Sleep(250 * time.Millisecond) // request pacing, not synchronisation
	}
	wg.Wait()
	close(results)
	var worst time.Duration
	served := map[string]int{}
	for r := range results {
		if r.err != nil || r.status != 200 {
			t.Errorf("%s: %d %v after %v", r.route, r.status, r.err, r.took)
			continue
		}
		worst = max(worst, r.took)
		served[r.route]++
		if r.took > 5*time.Second {
			t.Errorf("%s took %v with a hung primary", r.route, r.took)
		}
	}
	after := map[string]map[string]int{"primary": s.Primary.Stats(), "reserve": s.Reserve.Stats()}
	for route, v := range map[string]string{"alpha": "messages", "beta": "chat_completions"} {
		primaryGenerated := (after["primary"][v] - before["primary"][v]) - (after["primary"][v+"_hung"] - before["primary"][v+"_hung"])
		reserveGenerated := after["reserve"][v] - before["reserve"][v]
		if primaryGenerated != 0 || reserveGenerated != served[route] {
			t.Errorf("%s: %d requests served, generated %d times by the primary and %d by the reserve; want each once",
				route, served[route], primaryGenerated, reserveGenerated)
		}
		t.Logf("%s: %d requests, %d held by the hung primary, %d generated by the reserve",
			route, served[route], after["primary"][v+"_hung"]-before["primary"][v+"_hung"], reserveGenerated)
	}
	t.Logf("hung primary: %d requests (%d in flight at the fault), all served by the reserve, slowest %.2fs",
		sent, inflight, worst.Seconds())
	if got := sidecarMetric(t, s, "gateway_endpoint_switches_total", `upstream="alpha"`, `to="reserve"`); got < 1 {
		t.Errorf("gateway_endpoint_switches_total{to=reserve} = %v", got)
	}
	// The first-byte limit ends at the reply's headers: a 5 s stream passes.
	s.Reserve.Control(map[string]any{"event_delay_ms": 300, "reply_words": 16})
	path, hdr, body := requestFor("alpha", acct.Key, true)
	start := time.Now()
	if r := postAndRead(http.DefaultClient, s.URL+path, hdr, body, 0, nil); r.status != 200 || !r.complete {
		t.Fatalf("a stream longer than the first-byte limit: %d complete=%v %v", r.status, r.complete, r.err)
	}
	t.Logf("a %.1fs stream passed a 3s first-byte limit", time.Since(start).Seconds())
}

// hangProxy forwards TCP to a backend until it is told to hang; then it
// accepts connections and forwards nothing in either direction: a store
// that accepts and never answers.
type hangProxy struct {
	l       net.Listener
	backend string
	hung    atomic.Bool
	// delay holds each reply from the backend this long (nanoseconds): a
	// slow store.
	delay atomic.Int64
}

func startHangProxy(t *testing.T, backend string) *hangProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &hangProxy{l: l, backend: backend}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *hangProxy) serve(c net.Conn) {
	defer c.Close()
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		return
	}
	defer b.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for p.hung.Load() {
				time.Sleep(10 * time.Millisecond) // hung: hold the bytes
			}
			if d := p.delay.Load(); d > 0 && src == b {
				time.Sleep(time.Duration(d)) // a slow store
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(b, c)
	go pipe(c, b)
	<-done
}

// Redis accepts and never answers: model requests get 503 with retry-after
// within a second, /health answers 503 within a second, and both recover
// when Redis does.
func TestOpsHungRedis(t *testing.T) {
	r := redistest.NewServer(t)
	proxy := startHangProxy(t, r.Addr)
	// Admission through the store, what this test is about: a sidecar
	// admitting from leases keeps admitting until its first failed call
	// (TestFaultRedisStopsDuringLoad).
	s := launchtest.Start(t, launch.Options{RedisAddr: proxy.l.Addr().String(), Configure: func(c *config.Config) { c.Limits.Leases = "off" }})
	acct := s.NewAccount(10, noLimits)
	for _, route := range []string{"alpha", "beta"} {
		path, hdr, body := requestFor(route, acct.Key, false)
		if resp, b := s.Do("POST", path, hdr, body); resp.StatusCode != 200 {
			t.Fatalf("%s before the hang: %d %s", route, resp.StatusCode, b)
		}
	}
	conn, err := grpc.NewClient(s.Config.Listeners.ExtProc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	grpcStatus := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			t.Fatalf("gRPC health %q: %v", service, err)
		}
		return r.Status
	}
	eventually.True(t, 10*time.Second, "gRPC health of the store to be SERVING", func() bool {
		return grpcStatus("gateway.store") == healthpb.HealthCheckResponse_SERVING &&
			grpcStatus("gateway.ready") == healthpb.HealthCheckResponse_SERVING
	})

	proxy.hung.Store(true)
	var worstModel, worstHealth time.Duration
	for i := range 4 {
		route := []string{"alpha", "beta"}[i%2]
		path, hdr, body := requestFor(route, acct.Key, false)
		start := time.Now()
		resp, b := s.Do("POST", path, hdr, body)
		took := time.Since(start)
		worstModel = max(worstModel, took)
		if resp.StatusCode != 503 || resp.Header.Get("retry-after") == "" || took > time.Second {
			t.Fatalf("%s with Redis hung: %d retry-after %q after %v: %s", route, resp.StatusCode, resp.Header.Get("retry-after"), took, b)
		}
		for _, url := range []string{s.URL + "/health", s.ControlURL + "/health"} {
			code, h, took := getHealthRecord(t, url)
			worstHealth = max(worstHealth, took)
			if code != 503 || took > time.Second || !strings.Contains(strings.Join(h.Problems, ";"), "store") {
				t.Fatalf("%s with Redis hung: %d %+v after %v", url, code, h, took)
			}
		}
	}
	if resp, err := http.Get(s.ControlURL + "/livez"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/livez with Redis hung: %v %v", resp, err)
	}
	eventually.True(t, 5*time.Second, "gateway_store_up 0 with Redis hung", func() bool {
		return sidecarMetric(t, s, "gateway_store_up") == 0
	})
	// Liveness stays SERVING; the store and readiness services do not.
	eventually.True(t, 5*time.Second, "gRPC health of the store to be NOT_SERVING", func() bool {
		return grpcStatus("gateway.store") == healthpb.HealthCheckResponse_NOT_SERVING &&
			grpcStatus("gateway.ready") == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if st := grpcStatus(""); st != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC liveness with Redis hung: %v", st)
	}
	proxy.hung.Store(false)
	eventually.True(t, 20*time.Second, "model requests to work after the hang", func() bool {
		path, hdr, body := requestFor("alpha", acct.Key, false)
		resp, _ := s.Do("POST", path, hdr, body)
		return resp.StatusCode == 200
	})
	eventually.True(t, 20*time.Second, "/health ok after the hang", func() bool {
		code, _, _ := getHealthRecord(t, s.URL+"/health")
		return code == 200
	})
	t.Logf("hung Redis: model requests 503 with retry-after in at most %.3fs, /health 503 in at most %.3fs",
		worstModel.Seconds(), worstHealth.Seconds())
}

// The sidecar reaches Redis over TLS (rediss://, the CA given in the URL).
func TestOpsRedisOverTLS(t *testing.T) {
	r := redistest.NewTLSServer(t)
	s := launchtest.Start(t, launch.Options{
		RedisAddr:  r.Addr, // plaintext, for the test's own account setup
		SidecarEnv: []string{"REDIS_URL=rediss://" + r.TLSAddr + "?ca_file=" + r.CAFile},
	})
	acct := s.NewAccount(10, noLimits)
	path, hdr, body := requestFor("alpha", acct.Key, false)
	if resp, b := s.Do("POST", path, hdr, body); resp.StatusCode != 200 {
		t.Fatalf("over TLS: %d %s", resp.StatusCode, b)
	}
	if n := len(allLedgerEntries(t, s, acct.ID)); n != 1 {
		t.Fatalf("%d ledger entries after one request over TLS", n)
	}
	t.Logf("sidecar on rediss://%s: request settled in the ledger", r.TLSAddr)
}

// Every series an alert or the dashboard uses exists from the first scrape,
// before any request or failure.
func TestOpsMetricsFromFirstScrape(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	resp, err := http.Get(s.ControlURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`gateway_endpoint_switches_total{to="reserve",upstream="alpha"} 0`,
		`gateway_endpoint_switches_total{to="none",upstream="beta"} 0`,
		`gateway_endpoint_reserve_seconds_total{upstream="alpha"}`,
		`gateway_endpoint_in_use{endpoint="none",upstream="alpha"}`,
		`gateway_store_up`,
		`gateway_inflight_requests 0`,
		`gateway_inflight_streams 0`,
		`gateway_build_info{`,
		`gateway_rejections_total{reason="balance",upstream="alpha"} 0`,
		`gateway_rejections_total{reason="unavailable",upstream="beta"} 0`,
		`gateway_store_errors_total{op="settle"} 0`,
		`gateway_spool_depth 0`,
		`gateway_estimated_settlements_total{upstream="beta"} 0`,
		`gateway_requests_total{endpoint="reserve",model="` + alphaModel + `",status="5xx",upstream="alpha"} 0`,
		`gateway_tokens_total{kind="output",model="` + betaModel + `",upstream="beta"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("first scrape lacks %s", want)
		}
	}
}

// SIGTERM while a stream runs, with a drain deadline shorter than the
// stream: the stream is cut at the deadline and still settled, its usage in
// the ledger, before the sidecar exits, even when the store takes a while
// to answer the settlement.
func TestOpsSigtermSettlesCutStream(t *testing.T) {
	rs := redistest.NewServer(t)
	proxy := startHangProxy(t, rs.Addr)
	s := launchtest.Start(t, launch.Options{
		RedisAddr:   proxy.l.Addr().String(),
		SidecarArgs: []string{"--drain", "1s"},
	})
	acct := s.NewAccount(10, noLimits)
	s.Primary.Control(map[string]any{"event_delay_ms": 200, "reply_words": 60})
	inflight := make(chan clientReply, 1)
	admitted := make(chan struct{})
	go func() {
		path, h, body := requestFor("alpha", acct.Key, true)
		inflight <- postAndRead(http.DefaultClient, s.URL+path, h, body, 0, func() { close(admitted) })
	}()
	select {
	case <-admitted:
	case r := <-inflight:
		t.Fatalf("stream ended before SIGTERM: %d %v", r.status, r.err)
	}
	// Each store reply now takes 250 ms: the cut stream's settlement is
	// still running when the drain deadline has passed.
	proxy.delay.Store(int64(250 * time.Millisecond))
	start := time.Now()
	s.Sidecar.Signal(syscall.SIGTERM)
	if !s.Sidecar.Wait(30 * time.Second) {
		t.Fatal("sidecar did not exit after SIGTERM")
	}
	exited := time.Since(start)
	r := <-inflight
	if r.complete {
		t.Fatal("the stream completed; it should have been cut at the drain deadline")
	}
	proxy.delay.Store(0)
	entries := allLedgerEntries(t, s, acct.ID)
	if len(entries) != 1 {
		t.Fatalf("%d ledger entries after the cut stream; want 1\n%s", len(entries), s.Sidecar.Tail(3000))
	}
	if log := s.Sidecar.Log(); strings.Contains(log, "spool: closed") || strings.Contains(log, "settlement failed") {
		t.Fatalf("settlement lost at shutdown:\n%s", s.Sidecar.Tail(3000))
	}
	e := entries[0]
	if e.Status != 200 || e.Cost <= 0 {
		t.Fatalf("cut stream settled as %+v", e)
	}
	out, _ := json.Marshal(e)
	t.Logf("SIGTERM with --drain 1s mid-stream: sidecar exited after %.2fs; cut stream settled: %s", exited.Seconds(), out)
}

// By default a request whose reply's headers do not come within its bound
// is retried once on the reserve (no byte of a reply had reached the
// client): the abandoned attempt is one vendor request, the reply another.
func TestOpsDefaultRetryPolicy(t *testing.T) {
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			c.Upstreams[i].Failover.FirstByteTimeout = config.Duration(2 * time.Second)
			c.Upstreams[i].Failover.PrefillTokensPerSecond = 1_000_000 // the bound is then the first-byte limit alone
			c.Upstreams[i].Failover.GenerationTokensPerSecond = 1_000_000
		}
	}})
	acct := s.NewAccount(10, noLimits)
	waitHealthRoute(t, s, "primary")
	before := s.Primary.APIRequests() + s.Reserve.APIRequests()
	s.Primary.Control(map[string]any{"format": config.FormatMessages, "latency_ms": 2500})
	path, hdr, body := requestFor("alpha", acct.Key, false)
	start := time.Now()
	resp, _ := s.Do("POST", path, hdr, body)
	took := time.Since(start)
	if resp.StatusCode != 200 || resp.Header.Get("x-gateway-endpoint") != "reserve" || took > 3*time.Second {
		t.Fatalf("a reply slower than the first-byte limit: %d after %v from %s, vendor requests %d", resp.StatusCode, took, resp.Header.Get("x-gateway-endpoint"), s.Primary.APIRequests()+s.Reserve.APIRequests()-before)
	}
	if n := s.Primary.APIRequests() + s.Reserve.APIRequests() - before; n != 2 {
		t.Fatalf("the vendors received %d requests for one slow reply; want 2 (the abandoned attempt and the reserve's)", n)
	}
	t.Logf("slow reply: 200 from the reserve after %.2fs, two vendor requests", took.Seconds())
}
