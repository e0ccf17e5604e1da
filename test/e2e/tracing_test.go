package e2e

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// otlpReceiver is an OTLP/gRPC trace collector: it keeps every span it is
// sent, with its resource's service.name.
type otlpReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []receivedSpan
	raw   []string // every request as JSON, for the search for secrets
}

type receivedSpan struct {
	service string
	span    *tracepb.Span
}

func (r *otlpReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	b, _ := protojson.Marshal(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.raw = append(r.raw, string(b))
	for _, rs := range req.GetResourceSpans() {
		service := attrString(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{service, s})
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (r *otlpReceiver) snapshot() ([]receivedSpan, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...), append([]string(nil), r.raw...)
}

func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, r)
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return r, ln.Addr().String()
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetStringValue()
		}
	}
	return ""
}

func attrInt(kvs []*commonpb.KeyValue, key string) (int64, bool) {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue().GetIntValue(), true
		}
	}
	return 0, false
}

// With tracing on, every model request is one trace holding Envoy's spans
// and the sidecar's: the request span (a child of Envoy's) with the GenAI
// attributes equal to the request's ledger entry, and its admission and
// settlement spans. Nothing exported contains the prompt, the client's key,
// the read-only token or a vendor key.
func TestTracing(t *testing.T) {
	recv, addr := startOTLPReceiver(t)
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Tracing = config.Tracing{Endpoint: addr, Protocol: config.TracingGRPC}
	}})
	a := s.NewAccount(10, noLimits)
	const prompt = "Tell me about the secret lighthouse 7f3a9c"
	type sent struct {
		route  string
		stream bool
	}
	plan := []sent{{"alpha", false}, {"alpha", true}, {"beta", false}, {"beta", true}}
	for i, p := range plan {
		path, h, body := requestFor(p.route, a.Key, p.stream)
		body = []byte(strings.Replace(string(body), "Hello there, gateway", prompt, 1))
		if resp, b := s.Do("POST", path, h, body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	waitNoHolds(t, s, a.ID)
	entries := allLedgerEntries(t, s, a.ID)
	if len(entries) != len(plan) {
		t.Fatalf("%d ledger entries, want %d", len(entries), len(plan))
	}

	// The sidecar's request spans by request id, once each has its
	// settlement span and Envoy has exported its spans of the same trace.
	type traced struct {
		req, admission, settlement *tracepb.Span
		envoy                      []*tracepb.Span
	}
	var byRequest map[string]*traced
	eventually.That(t, 30*time.Second, "every request's spans exported", func() (bool, string) {
		spans, _ := recv.snapshot()
		byRequest = map[string]*traced{}
		byTrace := map[string][]receivedSpan{}
		for _, rs := range spans {
			byTrace[hex.EncodeToString(rs.span.GetTraceId())] = append(byTrace[hex.EncodeToString(rs.span.GetTraceId())], rs)
		}
		for _, group := range byTrace {
			tr := &traced{}
			id := ""
			for _, rs := range group {
				switch {
				case rs.service == "gateway-envoy":
					tr.envoy = append(tr.envoy, rs.span)
				case rs.service == "gateway-sidecar" && rs.span.GetName() == "admission":
					tr.admission = rs.span
				case rs.service == "gateway-sidecar" && rs.span.GetName() == "settlement":
					tr.settlement = rs.span
				case rs.service == "gateway-sidecar":
					if tr.req != nil {
						t.Fatalf("two request spans in trace %x", rs.span.GetTraceId())
					}
					tr.req = rs.span
					id = attrString(rs.span.GetAttributes(), "gateway.request_id")
				}
			}
			if id != "" {
				byRequest[id] = tr
			}
		}
		complete := 0
		for _, tr := range byRequest {
			if tr.admission != nil && tr.settlement != nil && len(tr.envoy) > 0 {
				complete++
			}
		}
		return complete == len(plan), fmt.Sprintf("%d of %d requests traced completely, %d spans", complete, len(plan), len(spans))
	})

	for _, e := range entries {
		tr := byRequest[e.RequestID]
		if tr == nil {
			t.Fatalf("request %s has no trace", e.RequestID)
		}
		at := tr.req.GetAttributes()
		// The request span is a child of one of Envoy's spans; admission and
		// settlement are its children.
		envoyIDs := map[string]bool{}
		for _, es := range tr.envoy {
			envoyIDs[hex.EncodeToString(es.GetSpanId())] = true
		}
		if !envoyIDs[hex.EncodeToString(tr.req.GetParentSpanId())] {
			t.Errorf("%s: the request span's parent %x is not one of Envoy's spans", e.RequestID, tr.req.GetParentSpanId())
		}
		for _, child := range []*tracepb.Span{tr.admission, tr.settlement} {
			if string(child.GetParentSpanId()) != string(tr.req.GetSpanId()) {
				t.Errorf("%s: span %s is not a child of the request span", e.RequestID, child.GetName())
			}
		}
		if tr.req.GetKind() != tracepb.Span_SPAN_KIND_CLIENT {
			t.Errorf("%s: request span kind %v", e.RequestID, tr.req.GetKind())
		}
		u := e.Usage
		wantInt := map[string]int64{
			"gen_ai.usage.input_tokens":                u.Prompt(),
			"gen_ai.usage.output_tokens":               u.Output + u.AudioOutput,
			"gen_ai.usage.cache_read.input_tokens":     u.CacheRead,
			"gen_ai.usage.cache_creation.input_tokens": u.CacheWrite5m + u.CacheWrite1h,
			"gateway.cost_nano_usd":                    e.Cost,
			"http.response.status_code":                int64(e.Status),
			"gateway.usage.input":                      u.Input,
			"gateway.usage.output":                     u.Output,
		}
		for k, want := range wantInt {
			if got, ok := attrInt(at, k); !ok || got != want {
				t.Errorf("%s: %s = %d (present %v), ledger says %d", e.RequestID, k, got, ok, want)
			}
		}
		provider := map[string]string{"claude-sonnet-4-5": "anthropic", "gpt-4o-mini": "openai"}[string(e.Requested)]
		wantStr := map[string]string{
			"gen_ai.operation.name": "chat",
			"gen_ai.provider.name":  provider,
			"gen_ai.request.model":  string(e.Requested),
			"gen_ai.response.model": string(e.Reported),
			"gateway.account_id":    a.ID,
			"gateway.key_id":        e.KeyID,
			"gateway.endpoint":      e.Endpoint,
			"gateway.model":         string(e.Priced),
		}
		for k, want := range wantStr {
			if got := attrString(at, k); got != want || want == "" {
				t.Errorf("%s: %s = %q, ledger says %q", e.RequestID, k, got, want)
			}
		}
		if want := "chat " + string(e.Requested); tr.req.GetName() != want {
			t.Errorf("%s: span name %q, want %q", e.RequestID, tr.req.GetName(), want)
		}
	}

	// Nothing exported holds the prompt or a credential: every attribute,
	// name and event of every request the receiver got, as JSON.
	_, raw := recv.snapshot()
	all := strings.Join(raw, "\n")
	for what, secret := range map[string]string{
		"the prompt": "lighthouse 7f3a9c", "the model key": a.Key, "the read-only token": a.ReadOnly,
		"alpha's vendor key": launch.AlphaVendorKey, "beta's vendor key": launch.BetaVendorKey,
		"a key's secret part": a.Key[len(a.Key)-12:],
	} {
		if strings.Contains(all, secret) {
			t.Errorf("the exported spans contain %s", what)
		}
	}
	if testing.Verbose() {
		spans, _ := recv.snapshot()
		for _, rs := range spans[:min(len(spans), 8)] {
			var keys []string
			for _, kv := range rs.span.GetAttributes() {
				keys = append(keys, kv.GetKey())
			}
			t.Logf("%s %q %v: %v", rs.service, rs.span.GetName(), rs.span.GetKind(), keys)
		}
	}
	t.Logf("%d requests, each one trace with Envoy's and the sidecar's spans; %d export calls searched", len(plan), len(raw))
}
