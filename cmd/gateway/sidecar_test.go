package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	accesslogdatav3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/modelgateway/gateway/extproc"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
)

// testSidecar starts the composition root as `gateway serve` does, on the
// in-memory store (miniredis) and free loopback ports, and stops it when the test ends.
func testSidecar(t *testing.T, adminToken string) *sidecar {
	t.Helper()
	return testSidecarOn(t, miniredis.RunT(t), adminToken, config.Listeners{})
}

// testSidecarOn is testSidecar on the given store, with extra listeners.
func testSidecarOn(t *testing.T, mr *miniredis.Miniredis, adminToken string, extra config.Listeners) *sidecar {
	t.Helper()
	t.Setenv("REDIS_URL", "redis://"+mr.Addr())
	t.Setenv(admin.TokenEnv, adminToken)
	t.Setenv(admin.TokenFileEnv, "")
	cfg, err := config.Load("../../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	overrideListeners(&cfg.Listeners, config.Listeners{ExtProc: "127.0.0.1:0", Control: "127.0.0.1:0", Admin: "127.0.0.1:0", Console: "127.0.0.1:0"})
	overrideListeners(&cfg.Listeners, extra)
	// The pricing package's made-up catalogue: no download needed.
	cfg.Catalogue = "../../internal/pricing/testdata/catalogue.json"
	cfg.Store.SpoolDir = filepath.Join(t.TempDir(), "spool")
	log := slog.New(slog.DiscardHandler)
	rdb, closeStore, err := openStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeStore)
	sc, err := startSidecar(sidecarOptions{Config: cfg, Redis: rdb, Logger: log,
		EnvoyAdminURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		sc.Shutdown(ctx)
	})
	return sc
}

// The wiring of `gateway serve`: the processor answers on the ext_proc port
// with the configured upstreams, gRPC health says SERVING, the control port
// serves the health record, and the admin API is served only with a token.
func TestSidecarServes(t *testing.T) {
	sc := testSidecar(t, "adm_test_token_0123456789")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn, err := grpc.NewClient(sc.ExtProcAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hr, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: extprocv3.ExternalProcessor_ServiceDesc.ServiceName})
	if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("ext_proc health: %v, %v", hr, err)
	}

	// A request without a key is refused by the processor in the messages
	// format: the alpha upstream is wired to its format.
	stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/alpha/v1/messages")},
		}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	ir := resp.GetImmediateResponse()
	var body struct {
		Type  string                `json:"type"`
		Error struct{ Type string } `json:"error"`
	}
	if ir == nil || ir.GetStatus().GetCode() != 401 || json.Unmarshal(ir.GetBody(), &body) != nil || body.Error.Type != "authentication_error" {
		t.Fatalf("want a 401 in the messages format, got %v", resp)
	}

	hresp, err := http.Get("http://" + sc.ControlAddr.String() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	var h struct {
		Region    string   `json:"region"`
		Upstreams []string `json:"upstreams"`
		TS        string   `json:"ts"`
	}
	if err := json.Unmarshal(b, &h); err != nil || h.Region != "eu-central" || len(h.Upstreams) != 2 || h.TS == "" {
		t.Fatalf("health record %s: %v", b, err)
	}

	if sc.AdminAddr == nil {
		t.Fatal("admin API not served although a token is set")
	}

	// The control port serves /v1/usage itself (not a redirect to the
	// console's subtree), the console's data API and its customer page; the
	// operator console has its own port.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct {
		url  string
		code int
	}{
		{"http://" + sc.ControlAddr.String() + "/v1/usage", http.StatusUnauthorized},
		{"http://" + sc.ControlAddr.String() + "/v1/usage?period=month", http.StatusUnauthorized},
		{"http://" + sc.ControlAddr.String() + "/v1/usage/daily", http.StatusUnauthorized},
		{"http://" + sc.ControlAddr.String() + "/console/", http.StatusOK},
		{"http://" + sc.ConsoleAddr.String() + "/signin", http.StatusOK},
	} {
		resp, err := noRedirect.Get(c.url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code {
			t.Errorf("GET %s: %d, want %d", c.url, resp.StatusCode, c.code)
		}
	}
}

func TestSidecarWithoutAdminToken(t *testing.T) {
	sc := testSidecar(t, "")
	if sc.AdminAddr != nil || sc.ConsoleAddr != nil {
		t.Fatalf("admin API (%v) or operator console (%v) served without a token", sc.AdminAddr, sc.ConsoleAddr)
	}
}

func TestOverrideListeners(t *testing.T) {
	l := config.Listeners{ExtProc: "a:1", Control: "b:2", Admin: "c:3"}
	overrideListeners(&l, config.Listeners{Control: "0.0.0.0:9"})
	if l.ExtProc != "a:1" || l.Control != "0.0.0.0:9" || l.Admin != "c:3" {
		t.Fatalf("%+v", l)
	}
}

// /v1/usage is the control handler's own, not a redirect to the console's
// /v1/usage/ subtree sharing the server.
func TestUsagePathNotRedirected(t *testing.T) {
	sc := testSidecar(t, "")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get("http://" + sc.ControlAddr.String() + "/v1/usage?period=day")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/usage without a credential: %d, want 401", resp.StatusCode)
	}
}

// Envoy keeps its upstream log streams open for good; a sidecar stopping
// with one open (and no request in flight) still drains: the stream is
// closed once the requests have ended, and the graceful stop does not wait
// for its deadline and cut streams. Before, every SIGTERM after an
// abandoned attempt waited the whole drain (60 s by default).
func TestShutdownClosesEnvoysLogStreams(t *testing.T) {
	sc := testSidecar(t, "adm_test_token_0123456789")
	conn, err := grpc.NewClient(sc.ExtProcAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	logs, err := accesslogv3.NewAccessLogServiceClient(conn).StreamAccessLogs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// An abandoned attempt, under the log's name as Envoy sends it: once
	// its metric shows, the stream is open and read at the sidecar.
	err = logs.Send(&accesslogv3.StreamAccessLogsMessage{
		Identifier: &accesslogv3.StreamAccessLogsMessage_Identifier{LogName: extproc.AbandonedLogName},
		LogEntries: &accesslogv3.StreamAccessLogsMessage_HttpLogs{HttpLogs: &accesslogv3.StreamAccessLogsMessage_HTTPAccessLogEntries{
			LogEntry: []*accesslogdatav3.HTTPAccessLogEntry{{
				CommonProperties: &accesslogdatav3.AccessLogCommon{RouteName: "alpha"},
				Response:         &accesslogdatav3.HTTPResponseProperties{ResponseCode: wrapperspb.UInt32(503)},
			}},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 10*time.Second, "the attempt to be counted", func() bool {
		resp, err := http.Get("http://" + sc.ControlAddr.String() + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `gateway_abandoned_attempts_total{`)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !sc.Shutdown(ctx) {
		t.Fatal("the shutdown waited for Envoy's log stream until its deadline, and cut the streams")
	}
}
