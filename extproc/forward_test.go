package extproc

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelgateway/gateway/internal/account"
)

// Of the client's headers the vendor hears only those its upstream
// forwards; the framing and Envoy's own stay.
func TestUnforwardedHeadersRemoved(t *testing.T) {
	r := newRig(t)
	x := &exchange{s: r.srv}
	resp := x.step(context.Background(), &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "host", "gw", "x-api-key", r.key,
			"content-type", "application/json", "content-length", "10", "anthropic-version", "2023-06-01",
			"anthropic-beta", "b", "x-stainless-os", "Linux", "user-agent", "Anthropic/Python", "x-request-id", "r",
			"openai-organization", "org", "openai-project", "p", "api-key", "k", "proxy-authorization", "Basic x",
			"anthropic-workspace-id", "w", "cookie", "c", "traceparent", "t"),
	}})
	removed := resp.GetRequestHeaders().GetResponse().GetHeaderMutation().GetRemoveHeaders()
	for _, h := range []string{"x-api-key", "openai-organization", "openai-project", "api-key", "proxy-authorization", "anthropic-workspace-id", "cookie", "traceparent"} {
		if !slices.Contains(removed, h) {
			t.Errorf("%s reaches the vendor (removed: %v)", h, removed)
		}
	}
	for _, h := range []string{":path", "host", "content-type", "content-length", "anthropic-version", "anthropic-beta", "x-stainless-os", "user-agent", "x-request-id"} {
		if slices.Contains(removed, h) {
			t.Errorf("%s removed", h)
		}
	}
}

// A vendor's 401 naming the operator's key reaches the client as the
// gateway's own error, status kept; its later chunks are cleared.
func TestVendorRefusalReplaced(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key),
	}})
	if resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}}); resp.GetImmediateResponse() != nil {
		t.Fatalf("rejected: %v", resp)
	}
	attrs, err := structpb.NewStruct(map[string]any{"response.code": 401.0})
	if err != nil {
		t.Fatal(err)
	}
	chunks := []string{`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key sk-ant-p`, `********cccc"}}`}
	var got []string
	for i, c := range chunks {
		req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(c), EndOfStream: i == len(chunks)-1},
		}}
		if i == 0 {
			req.Attributes = map[string]*structpb.Struct{attributesKey: attrs}
		}
		m := x.step(ctx, req).GetResponseBody().GetResponse().GetBodyMutation()
		if m == nil {
			t.Fatalf("chunk %d passed as the vendor sent it", i)
		}
		got = append(got, string(m.GetBody()))
	}
	want := string(vendorRefusalBody(r.upstream.Format, 401))
	if got[0] != want || got[1] != "" {
		t.Fatalf("client got %q, want %q", got, want)
	}
	if !x.settled || testutil.ToFloat64(r.srv.metrics.vendorRefusals.WithLabelValues("alpha")) != 1 {
		t.Fatal("refusal not settled or not counted")
	}
}

// A key whose rate is spent is refused at the next request's headers with
// the answer its body phase gave, until the retry-after.
func TestSpentRateRefusedAtHeaders(t *testing.T) {
	r := newRigWith(t, "alpha", rigAccount{key: account.KeyOptions{Limits: account.Limits{RPM: 1, WindowMinutes: 1}}})
	ctx := context.Background()
	r.request(t)
	// One instant for both refusals: the retry-after is counted down from
	// the refusal remembered.
	at := time.Now()
	r.srv.now = func() time.Time { return at }
	send := func() (*extprocv3.ProcessingResponse, bool) {
		x := &exchange{s: r.srv}
		resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key, "content-length", strconv.Itoa(len(reqBody))),
		}})
		if resp.GetImmediateResponse() != nil {
			return resp, true
		}
		return x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
		}}), false
	}
	body, atHeaders := send()
	if atHeaders || body.GetImmediateResponse().GetStatus().GetCode() != 429 {
		t.Fatalf("second request: at headers %v, %v", atHeaders, body)
	}
	head, atHeaders := send()
	if !atHeaders {
		t.Fatalf("third request read its body: %v", head)
	}
	b, h := body.GetImmediateResponse(), head.GetImmediateResponse()
	if b.GetStatus().GetCode() != h.GetStatus().GetCode() || headerOf(b, "retry-after") != headerOf(h, "retry-after") ||
		headerOf(b, "x-should-retry") != headerOf(h, "x-should-retry") || string(b.GetBody()) != string(h.GetBody()) {
		t.Fatalf("at the body: %v\nat the headers: %v", b, h)
	}
	if got := testutil.ToFloat64(r.srv.metrics.earlyRefusals.WithLabelValues(account.RateLimited.String())); got != 1 {
		t.Fatalf("header refusals %v", got)
	}
	// Past the memory (and the retry-after here), the body is read again.
	r.srv.refusals.m = map[refusalKey]remembered{}
	if _, atHeaders := send(); atHeaders {
		t.Fatal("refused at the headers with nothing remembered")
	}
}

// Only refusals that hold whatever the next request are remembered: a
// spent rate, a spent token window.
func TestRememberFor(t *testing.T) {
	for _, c := range []struct {
		d    account.Decision
		want time.Duration
	}{
		{account.Decision{Outcome: account.RateLimited, RetryAfter: time.Second}, time.Second},
		{account.Decision{Outcome: account.RateLimited, RetryAfter: time.Hour}, 5 * time.Second},
		{account.Decision{Outcome: account.ConcurrencyLimited, RetryAfter: time.Second}, 0},
		{account.Decision{Outcome: account.DailyLimited, Used: 10, Limit: 10, RetryAfter: time.Hour}, 0},
		{account.Decision{Outcome: account.DailyLimited, Used: 5, Limit: 10, RetryAfter: time.Hour}, 0},
		{account.Decision{Outcome: account.TokenLimited, Used: 100, Limit: 100, RetryAfter: 3 * time.Second}, 3 * time.Second},
		{account.Decision{Outcome: account.TokenLimited, Used: 10, Limit: 100, RetryAfter: 3 * time.Second}, 0},
		{account.Decision{Outcome: account.InsufficientBalance, Limit: 0}, 0},
		{account.Decision{Outcome: account.InsufficientBalance, Limit: 7}, 0},
	} {
		if got := rememberFor(c.d); got != c.want {
			t.Errorf("%+v: %v, want %v", c.d, got, c.want)
		}
	}
}

func headerOf(ir *extprocv3.ImmediateResponse, k string) string {
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == k {
			return string(h.GetHeader().GetRawValue())
		}
	}
	return ""
}
