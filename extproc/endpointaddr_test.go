package extproc

import (
	"context"
	"errors"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelgateway/gateway/internal/config"
)

// An address matches an endpoint as configured or through the name's
// resolved addresses (same port); the primary wins a tie; an upstream
// without a reserve is served by its primary whatever the address.
func TestEndpointOfAddress(t *testing.T) {
	u := config.Upstream{
		Primary: config.Endpoint{URL: "https://api.vendor.example"},
		Reserve: config.Endpoint{URL: "http://10.0.0.7:8443"},
	}
	a := newEndpointAddrs(u)
	lookups := 0
	answer := []string{"192.0.2.1", "2001:db8::1"}
	a.lookup = func(_ context.Context, host string) ([]string, error) {
		lookups++
		if host != "api.vendor.example" {
			return nil, errors.New("no such host")
		}
		return answer, nil
	}
	for addr, want := range map[string]string{
		"10.0.0.7:8443":          "reserve",
		"api.vendor.example:443": "primary",
		"192.0.2.1:443":          "primary",
		"[2001:db8::1]:443":      "primary",
		"192.0.2.1:80":           "", // not the configured port
		"10.0.0.7:443":           "",
		"":                       "",
	} {
		if got := a.endpointOf(addr); got != want {
			t.Errorf("%q: %q, want %q", addr, got, want)
		}
	}
	if lookups != 1 {
		t.Errorf("%d lookups; an address matching nothing must not resolve again at once", lookups)
	}
	// The name moved: a later miss resolves again.
	answer = []string{"192.0.2.99"}
	a.at = a.at.Add(-2 * reresolveAfter)
	if got := a.endpointOf("192.0.2.99:443"); got != "primary" || lookups != 2 {
		t.Errorf("after the name moved: %q (%d lookups)", got, lookups)
	}

	single := newEndpointAddrs(config.Upstream{Primary: config.Endpoint{URL: "http://127.0.0.1:9001"}})
	if got := single.endpointOf("203.0.113.5:1"); got != "primary" {
		t.Errorf("no reserve: %q, want primary", got)
	}
	same := newEndpointAddrs(config.Upstream{Primary: config.Endpoint{URL: "http://127.0.0.1:9001"}, Reserve: config.Endpoint{URL: "http://127.0.0.1:9001"}})
	if got := same.endpointOf("127.0.0.1:9001"); got != "primary" {
		t.Errorf("same address for both: %q, want primary", got)
	}
}

// Without host metadata (the reduced contract's attributes), the ledger
// names the endpoint from upstream.address.
func TestEndpointFromUpstreamAddress(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.upstream.addrs = newEndpointAddrs(config.Upstream{
		Primary: config.Endpoint{URL: "http://127.0.0.1:9001"},
		Reserve: config.Endpoint{URL: "http://127.0.0.1:9002"},
	})
	for _, addr := range []string{"127.0.0.1:9002", "127.0.0.1:9001"} {
		x := &exchange{s: r.srv}
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key),
		}})
		if resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
		}}); resp.GetImmediateResponse() != nil {
			t.Fatalf("rejected: %v", resp)
		}
		attrs, err := structpb.NewStruct(map[string]any{"response.code": 200.0, "upstream.address": addr})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range events {
			req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: c, EndOfStream: i == len(events)-1},
			}}
			if i == 0 {
				req.Attributes = map[string]*structpb.Struct{attributesKey: attrs}
			}
			x.step(ctx, req)
		}
	}
	r.srv.Flush(ctx)
	entries, _, err := r.st.Ledger(ctx, r.acct, "", 10)
	if err != nil || len(entries) != 2 {
		t.Fatalf("ledger %+v, %v", entries, err)
	}
	got := map[string]bool{entries[0].Endpoint: true, entries[1].Endpoint: true}
	if !got["primary"] || !got["reserve"] {
		t.Fatalf("ledger endpoints %q and %q, want primary and reserve", entries[0].Endpoint, entries[1].Endpoint)
	}
}
