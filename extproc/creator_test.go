package extproc

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/keypool"
)

// keyClusterSet returns the aggregate a header mutation names, "" for none.
func keyClusterSet(m *extprocv3.HeaderMutation) string {
	v := ""
	for _, h := range m.GetSetHeaders() {
		if h.GetHeader().GetKey() == config.KeyClusterHeader {
			v = string(h.GetHeader().GetRawValue())
		}
	}
	return v
}

// A stored response is bound with the vendor key that created it, and the
// requests naming it later (its retrieval, a continuation with
// previous_response_id) go to that key, not to the one the account or
// session would choose: the vendor keeps it for that key's vendor account
// only.
func TestStoredObjectsGoToTheirCreatingKey(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{})
	r.srv.owners = r.st
	r.upstream.Pool = keypool.New(r.upstream.Name, []keypool.Key{{Name: "k1", Cluster: "beta_k1"}, {Name: "k2", Cluster: "beta_k2"}},
		keypool.Options{CoolDown: time.Minute, MaxCoolDown: time.Hour, ProbeInterval: time.Hour})
	chosen := r.upstream.Pool.Choose(r.acct, "")
	creator := keypool.Key{Name: "k1", Cluster: "beta_k1"}
	if chosen.Name == "k1" {
		creator = keypool.Key{Name: "k2", Cluster: "beta_k2"}
	}
	ctx := context.Background()

	// Created by a stream another key served (a session chose it, or Envoy
	// retried there).
	stream, err := os.ReadFile("format/responses/testdata/stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"gpt-4o-mini","max_output_tokens":256,"stream":true,"input":"Fix the failing test."}`)
	x := &exchange{s: r.srv}
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(":method", "POST", ":path", "/beta/v1/responses",
			"authorization", "Bearer "+r.key, "content-type", "application/json", "content-length", strconv.Itoa(len(body)))}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
	} {
		if ir := x.step(ctx, req).GetImmediateResponse(); ir != nil {
			t.Fatalf("rejected: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	attrs, err := structpb.NewStruct(map[string]any{"response.code": 200.0,
		"xds.upstream_host_metadata": `filter_metadata { key: "gateway" value { fields { key: "key" value { string_value: "` + creator.Name + `" } } } } `})
	if err != nil {
		t.Fatal(err)
	}
	events := bytes.SplitAfter(stream, []byte("\n\n"))
	for i, ev := range events {
		req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: ev, EndOfStream: i == len(events)-1}}}
		if i == 0 {
			req.Attributes = map[string]*structpb.Struct{attributesKey: attrs}
		}
		x.step(ctx, req)
	}
	id, _ := x.stored.Response()
	owners, keys, err := r.st.ResponseOwners(ctx, []string{id})
	if err != nil || owners[0] != r.acct || keys[0] != creator.Name {
		t.Fatalf("%s bound to %q through %q (%v); want %q through %q", id, owners, keys, err, r.acct, creator.Name)
	}

	// Its retrieval, without the session: to the creating key.
	get := &exchange{s: r.srv}
	resp := get.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "GET", ":path", "/beta/v1/responses/"+id, "authorization", "Bearer "+r.key)}})
	hr := resp.GetRequestHeaders().GetResponse()
	if got := keyClusterSet(hr.GetHeaderMutation()); got != creator.Cluster || !hr.GetClearRouteCache() {
		t.Fatalf("retrieval steered to %q (route cache cleared: %v), want %q", got, hr.GetClearRouteCache(), creator.Cluster)
	}

	// A continuation: its headers go to the account's key, its body names
	// the response, which moves it to the creating key.
	cont := []byte(`{"model":"gpt-4o-mini","max_output_tokens":64,"previous_response_id":"` + id + `","input":"And now?"}`)
	next := &exchange{s: r.srv}
	next.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(":method", "POST",
		":path", "/beta/v1/responses", "authorization", "Bearer "+r.key, "content-type", "application/json", "content-length", strconv.Itoa(len(cont)))}})
	resp = next.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: cont, EndOfStream: true}}})
	if ir := resp.GetImmediateResponse(); ir != nil {
		t.Fatalf("continuation refused: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
	}
	br := resp.GetRequestBody().GetResponse()
	if got := keyClusterSet(br.GetHeaderMutation()); got != creator.Cluster || !br.GetClearRouteCache() {
		t.Fatalf("continuation steered to %q (route cache cleared: %v), want %q", got, br.GetClearRouteCache(), creator.Cluster)
	}
	next.finish()
}

// A response stored through a key of the pool that the account may no
// longer use (it was pinned to its own key since, or the key was pinned to
// another tenant) is not reached through that key: the continuation and
// the retrieval are answered 404, in the vendor's words with the reason,
// and never steered.
func TestStoredObjectsBehindACrossedPin(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{})
	r.srv.owners = r.st
	ctx := context.Background()
	opts := keypool.Options{CoolDown: time.Minute, MaxCoolDown: time.Hour, ProbeInterval: time.Hour}
	const id = "resp_before_the_pin"
	if err := r.st.Bind(ctx, account.Binding{Account: r.acct, Key: "shared", IDs: []string{id}}); err != nil {
		t.Fatal(err)
	}
	for name, pool := range map[string][]keypool.Key{
		"the account pinned to its own key": {{Name: "shared", Cluster: "beta_shared"}, {Name: "own", Cluster: "beta_own", Accounts: []string{r.acct}}},
		"the key pinned to another tenant":  {{Name: "shared", Cluster: "beta_shared", Accounts: []string{"acct_other"}}, {Name: "rest", Cluster: "beta_rest"}},
	} {
		r.upstream.Pool = keypool.New(r.upstream.Name, pool, opts)

		get := &exchange{s: r.srv}
		resp := get.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: headers(":method", "GET", ":path", "/beta/v1/responses/"+id, "authorization", "Bearer "+r.key)}})
		ir := resp.GetImmediateResponse()
		if ir == nil || ir.GetStatus().GetCode() != 404 || !strings.Contains(string(ir.GetBody()), "no longer use") || !noRetry(ir) {
			t.Fatalf("%s: retrieval: %v; want a 404 naming the crossed pin, x-should-retry: false", name, resp)
		}
		get.finish()

		cont := []byte(`{"model":"gpt-4o-mini","max_output_tokens":64,"previous_response_id":"` + id + `","input":"And now?"}`)
		next := &exchange{s: r.srv}
		next.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(":method", "POST",
			":path", "/beta/v1/responses", "authorization", "Bearer "+r.key, "content-type", "application/json", "content-length", strconv.Itoa(len(cont)))}})
		resp = next.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: cont, EndOfStream: true}}})
		if ir := resp.GetImmediateResponse(); ir == nil || ir.GetStatus().GetCode() != 404 || !strings.Contains(string(ir.GetBody()), "no longer use") || !noRetry(ir) {
			t.Fatalf("%s: continuation: %v; want a 404 naming the response, x-should-retry: false", name, resp)
		}
		next.finish()
	}

	// A response made through the single key before the pool (bound to
	// "default", a key the pool does not have) is not refused: it goes to
	// the account's own key, unsteered, as before the pool.
	const old = "resp_before_the_pool"
	if err := r.st.Bind(ctx, account.Binding{Account: r.acct, Key: "default", IDs: []string{old}}); err != nil {
		t.Fatal(err)
	}
	get := &exchange{s: r.srv}
	resp := get.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "GET", ":path", "/beta/v1/responses/"+old, "authorization", "Bearer "+r.key)}})
	if ir := resp.GetImmediateResponse(); ir != nil {
		t.Fatalf("a response made before the pool: %d %s; want it forwarded", ir.GetStatus().GetCode(), ir.GetBody())
	}
	get.finish()
}

// noRetry reports whether an immediate response tells the SDKs not to
// retry (x-should-retry: false).
func noRetry(ir *extprocv3.ImmediateResponse) bool {
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-should-retry" {
			return string(h.GetHeader().GetRawValue()) == "false" || h.GetHeader().GetValue() == "false"
		}
	}
	return false
}
