package extproc

import (
	"context"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
)

// sendMetered runs a metered request's headers, and its body unless the
// headers were answered; atHeaders tells which answered.
func (r *rig) sendMetered(t *testing.T, srv *Server) (resp *extprocv3.ProcessingResponse, atHeaders bool) {
	t.Helper()
	ctx := context.Background()
	x := &exchange{s: srv}
	resp = x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(reqBody))),
	}})
	if resp.GetImmediateResponse() != nil {
		return resp, true
	}
	return x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}}), false
}

// freshKeys gives the rig's server a key cache that reads the key (and so
// its standing) again.
func (r *rig) freshKeys() { r.srv.keys = auth.NewCache(r.st, time.Hour) }

// A daily budget settled to its limit is refused at the next request's
// headers, as the admission refused it after the body: status, format,
// x-should-retry, the budget's reset and the amounts settled.
func TestSpentBudgetRefusedAtHeaders(t *testing.T) {
	r := newRigWith(t, "alpha", rigAccount{limits: account.Limits{DailyNanoUSD: 1_000_000_000}})
	ctx := context.Background()
	r.request(t)
	if err := r.srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	balance, err := r.st.Balance(ctx, r.acct)
	if err != nil {
		t.Fatal(err)
	}
	spent := 1_000_000*1_000_000_000 - balance
	if spent <= 0 {
		t.Fatalf("nothing spent: balance %d", balance)
	}
	if err := r.st.SetLimits(ctx, r.acct, account.Limits{DailyNanoUSD: spent}); err != nil {
		t.Fatal(err)
	}
	// The rig's key cache still holds the standing of before: the
	// admission after the body refuses.
	body, atHeaders := r.sendMetered(t, r.srv)
	if atHeaders || body.GetImmediateResponse().GetStatus().GetCode() != 429 {
		t.Fatalf("stale standing: at headers %v, %v", atHeaders, body)
	}
	r.freshKeys()
	head, atHeaders := r.sendMetered(t, r.srv)
	if !atHeaders {
		t.Fatalf("spent budget read its body: %v", head)
	}
	b, h := body.GetImmediateResponse(), head.GetImmediateResponse()
	for _, k := range []string{"content-type", "retry-after", "x-should-retry", "x-gateway-limit-reset"} {
		if headerOf(b, k) != headerOf(h, k) {
			t.Errorf("%s: %q at the body, %q at the headers", k, headerOf(b, k), headerOf(h, k))
		}
	}
	if b.GetStatus().GetCode() != h.GetStatus().GetCode() || headerOf(h, "x-should-retry") != "false" {
		t.Errorf("at the body: %v\nat the headers: %v", b, h)
	}
	if got := testutil.ToFloat64(r.srv.metrics.earlyRefusals.WithLabelValues(account.DailyLimited.String())); got != 1 {
		t.Errorf("header refusals %v", got)
	}
	// Raised again, the budget admits once the key is read again: the
	// standing never outlives its key cache entry.
	if err := r.st.SetLimits(ctx, r.acct, account.Limits{}); err != nil {
		t.Fatal(err)
	}
	r.freshKeys()
	if resp, atHeaders := r.sendMetered(t, r.srv); atHeaders || resp.GetImmediateResponse() != nil {
		t.Fatalf("raised budget refused: %v", resp)
	}
}

// A key whose concurrency limit its standing saw full is refused at the
// headers only while the store still counts it full.
func TestFullConcurrencyRefusedAtHeaders(t *testing.T) {
	r := newRigWith(t, "alpha", rigAccount{key: account.KeyOptions{Limits: account.Limits{Concurrency: 1}}})
	r.srv.inFlight = r.st
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key),
	}})
	if resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}}); resp.GetImmediateResponse() != nil {
		t.Fatalf("first request refused: %v", resp)
	}
	r.freshKeys() // its standing: one of one in flight
	head, atHeaders := r.sendMetered(t, r.srv)
	if !atHeaders || head.GetImmediateResponse().GetStatus().GetCode() != 429 || headerOf(head.GetImmediateResponse(), "retry-after") != "1" {
		t.Fatalf("full: at headers %v, %v", atHeaders, head)
	}
	if got := testutil.ToFloat64(r.srv.metrics.earlyRefusals.WithLabelValues(account.ConcurrencyLimited.String())); got != 1 {
		t.Errorf("header refusals %v", got)
	}
	// The request ends: the standing still says full, the store does not.
	x.finish()
	if !x.settled {
		t.Fatal("not settled")
	}
	if err := r.srv.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if resp, atHeaders := r.sendMetered(t, r.srv); atHeaders || resp.GetImmediateResponse() != nil {
		t.Fatalf("a free slot refused: at headers %v, %v", atHeaders, resp)
	}
}
