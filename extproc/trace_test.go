package extproc

import (
	"context"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A traced request records its request span as a child of Envoy's span
// (the ext_proc stream's context), with the GenAI attributes equal to its
// ledger entry, and admission and settlement spans under it; no attribute
// holds the prompt or the key.
func TestRequestSpans(t *testing.T) {
	r := newRig(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	r.srv.tracer = tp.Tracer("test")

	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled, Remote: true,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	x := &exchange{s: r.srv}
	send := func(req *extprocv3.ProcessingRequest) {
		if ir := x.step(ctx, req).GetImmediateResponse(); ir != nil {
			t.Fatalf("rejected: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(reqBody)), "anthropic-version", "2023-06-01"),
	}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}})
	send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream"),
	}})
	for i, ev := range events {
		send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: ev, EndOfStream: i == len(events)-1},
		}})
	}
	x.finish()
	if err := r.srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	entries, _, err := r.st.Ledger(context.Background(), r.acct, "", 10)
	if err != nil || len(entries) != 1 {
		t.Fatalf("%d ledger entries, %v", len(entries), err)
	}
	e := entries[0]

	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.Name] = s
	}
	req, ok := spans["chat claude-sonnet-4-5"]
	if !ok || len(spans) != 3 {
		t.Fatalf("spans %v", exp.GetSpans())
	}
	if req.Parent.SpanID() != parent.SpanID() || req.SpanContext.TraceID() != parent.TraceID() || req.SpanKind != trace.SpanKindClient {
		t.Fatalf("request span: parent %v, trace %v, kind %v", req.Parent.SpanID(), req.SpanContext.TraceID(), req.SpanKind)
	}
	for _, name := range []string{"admission", "settlement"} {
		if s := spans[name]; s.Parent.SpanID() != req.SpanContext.SpanID() {
			t.Errorf("%s is not a child of the request span", name)
		}
	}
	got := map[string]string{}
	for _, kv := range req.Attributes {
		got[string(kv.Key)] = kv.Value.String()
	}
	want := map[string]string{
		"gen_ai.operation.name":                    "chat",
		"gen_ai.provider.name":                     "anthropic",
		"gen_ai.request.model":                     string(e.Requested),
		"gen_ai.response.model":                    string(e.Reported),
		"gen_ai.usage.input_tokens":                strconv.FormatInt(e.Usage.Prompt(), 10),
		"gen_ai.usage.output_tokens":               strconv.FormatInt(e.Usage.Output, 10),
		"gen_ai.usage.cache_read.input_tokens":     "0",
		"gen_ai.usage.cache_creation.input_tokens": "0",
		"gateway.cost_nano_usd":                    strconv.FormatInt(e.Cost, 10),
		"gateway.account_id":                       r.acct,
		"gateway.key_id":                           e.KeyID,
		"gateway.request_id":                       e.RequestID,
		"http.response.status_code":                "200",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, ledger says %q", k, got[k], v)
		}
	}
	if e.Cost == 0 || e.Usage.Output == 0 {
		t.Fatalf("nothing charged: %+v", e)
	}
	for _, s := range exp.GetSpans() {
		for _, kv := range s.Attributes {
			if v := kv.Value.String(); strings.Contains(v, "Hello there") || strings.Contains(v, r.key) {
				t.Errorf("span %s attribute %s holds the prompt or the key", s.Name, kv.Key)
			}
		}
	}
}

// A request whose trace Envoy did not sample builds no span at all (the
// sampler would drop it): the request is served and settled as any other.
func TestUnsampledRequestBuildsNoSpan(t *testing.T) {
	r := newRig(t)
	exp := tracetest.NewInMemoryExporter()
	r.srv.tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("test")
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, Remote: true,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(reqBody)), "anthropic-version", "2023-06-01"),
	}})
	if ir := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}}).GetImmediateResponse(); ir != nil || !x.admitted {
		t.Fatalf("not admitted: %v", ir)
	}
	if x.trace.span != nil {
		t.Fatal("a span was built for a request Envoy did not sample")
	}
	x.finish()
	if err := r.srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported", n)
	}
	if entries, _, err := r.st.Ledger(context.Background(), r.acct, "", 10); err != nil || len(entries) != 1 {
		t.Fatalf("%d ledger entries, %v", len(entries), err)
	}
}
