package extproc

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/store"
)

// chatCompletionsRig is a processor for the beta upstream on miniredis with one
// funded account.
func chatCompletionsRig(t *testing.T) *rig {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	ctx := context.Background()
	a, err := st.CreateAccount(ctx, "beta", 1_000*1_000_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := st.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load("../gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := cfg.Upstream("beta")
	up, err := NewUpstream(*u, testPrices(t, u), operations.All)
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Options{Upstreams: []*Upstream{up}, Keys: auth.NewCache(st, 0), Admitter: st, Settler: st, MaxRequestBytes: 32 << 20,
		Logger: slog.New(slog.DiscardHandler)})
	return &rig{srv: srv, st: st, acct: a.ID, key: key, upstream: up}
}

// betaChunks is a reasoning model's stream as the vendor sends it with
// include_usage: "usage":null in every chunk, then the usage chunk, whose
// completion tokens include 300 reasoning tokens the text does not show.
var betaChunks = []string{
	`data: {"id":"c","object":"chat.completion.chunk","model":"o4-mini","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}` + "\n\n",
	`data: {"id":"c","object":"chat.completion.chunk","model":"o4-mini","choices":[{"index":0,"delta":{"content":"Forty-two."},"finish_reason":null}],"usage":null}` + "\n\n",
	`data: {"id":"c","object":"chat.completion.chunk","model":"o4-mini","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}` + "\n\n",
	`data: {"id":"c","object":"chat.completion.chunk","model":"o4-mini","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":305,"total_tokens":325,"completion_tokens_details":{"reasoning_tokens":300}}}` + "\n\n",
	"data: [DONE]\n\n",
}

// betaStream runs one chat-completions stream through the exchange and
// returns the body Envoy sends upstream (nil: unchanged), the content-length
// set with it, what the client receives and how many response chunks were
// mutated.
func (r *rig) betaStream(t *testing.T, body string) (upstream []byte, length string, client string, mutated int) {
	t.Helper()
	ctx := context.Background()
	x := &exchange{s: r.srv}
	check := func(resp *extprocv3.ProcessingResponse) {
		if ir := resp.GetImmediateResponse(); ir != nil {
			t.Fatalf("rejected: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	check(x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/beta/v1/chat/completions", "authorization", "Bearer "+r.key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(body))),
	}}))
	resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true},
	}})
	check(resp)
	common := resp.GetRequestBody().GetResponse()
	if m := common.GetBodyMutation(); m != nil {
		upstream = m.GetBody()
		for _, h := range common.GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() == "content-length" {
				length = string(h.GetHeader().GetRawValue())
			}
		}
	} else {
		for _, h := range common.GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() != "x-envoy-upstream-rq-per-try-timeout-ms" {
				t.Fatalf("header %s changed without a body edit", h.GetHeader().GetKey())
			}
		}
	}
	check(x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream; charset=utf-8"),
	}}))
	// Each event cut in two, as a network may deliver it.
	var chunks []string
	for _, ev := range betaChunks {
		chunks = append(chunks, ev[:len(ev)/2], ev[len(ev)/2:])
	}
	var out strings.Builder
	for i, c := range chunks {
		resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: []byte(c), EndOfStream: i == len(chunks)-1},
		}})
		check(resp)
		m := resp.GetResponseBody().GetResponse().GetBodyMutation()
		switch {
		case m == nil:
			out.WriteString(c)
		case m.GetClearBody():
		default:
			out.Write(m.GetBody())
		}
		if m != nil {
			mutated++
		}
	}
	if !x.settled {
		t.Fatal("not settled")
	}
	return upstream, length, out.String(), mutated
}

func TestStreamWithoutUsageIsBilledExactly(t *testing.T) {
	r := chatCompletionsRig(t)
	const body = `{"model":"o4-mini","stream":true,"messages":[{"role":"user","content":"The answer?"}]}`
	up, length, client, _ := r.betaStream(t, body)
	want := `{"model":"o4-mini","stream":true,"messages":[{"role":"user","content":"The answer?"}],"stream_options":{"include_usage":true}}`
	if string(up) != want || length != strconv.Itoa(len(want)) {
		t.Fatalf("upstream body %s with content-length %q, want %s", up, length, want)
	}
	var wantClient strings.Builder
	for _, ev := range betaChunks {
		if !strings.Contains(ev, `"choices":[]`) {
			wantClient.WriteString(strings.Replace(ev, `,"usage":null`, "", 1))
		}
	}
	if client != wantClient.String() {
		t.Fatalf("client got\n%s\nwant\n%s", client, wantClient.String())
	}
	r.srv.Flush(context.Background())
	entries, _, err := r.st.Ledger(context.Background(), r.acct, "", 10)
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledger %+v, %v", entries, err)
	}
	if e := entries[0]; e.Estimated || e.Usage.Input != 20 || e.Usage.Output != 305 || e.Usage.Reasoning != 300 {
		t.Fatalf("ledger entry %+v; want the vendor's 20 in, 305 out (300 reasoning), not estimated", e)
	}
}

// A client that asked for usage gets the vendor's stream untouched, and
// neither body is mutated.
func TestStreamWithUsageIsUntouched(t *testing.T) {
	r := chatCompletionsRig(t)
	up, _, client, mutated := r.betaStream(t, `{"model":"o4-mini","stream":true,"stream_options":{"include_usage":true},"messages":[]}`)
	if up != nil || mutated != 0 || client != strings.Join(betaChunks, "") {
		t.Fatalf("upstream %q, %d chunks mutated, client %q", up, mutated, client)
	}
}
