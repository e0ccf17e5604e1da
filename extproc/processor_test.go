package extproc

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/store"
)

// roundTrips counts what the client sends to Redis: one command or one
// pipeline is one round trip, whatever a script does inside. Those made
// with a context marked critical (the request's own, as Envoy's stream
// context is) are on the request's critical path.
type roundTrips struct{ n, critical atomic.Int64 }

type criticalKey struct{}

func (c *roundTrips) count(ctx context.Context) {
	c.n.Add(1)
	if ctx.Value(criticalKey{}) != nil {
		c.critical.Add(1)
	}
}

func (c *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		// A new connection's handshake (HELLO, CLIENT SETINFO) is the
		// pool's, not the request's: under load the settler may hold the
		// idle connection and the request dials another.
		if !handshake(cmd) {
			c.count(ctx)
		}
		return next(ctx, cmd)
	}
}

func (c *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return !handshake(c) }) {
			return next(ctx, cmds) // a new connection's handshake only
		}
		c.count(ctx)
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is part of a new connection's handshake
// (HELLO, CLIENT SETINFO).
func handshake(cmd redis.Cmder) bool {
	name := cmd.Name()
	return name == "hello" || name == "client"
}

// rig is a processor on miniredis with one funded account.
type rig struct {
	srv      *Server
	trips    *roundTrips
	mr       *miniredis.Miniredis
	st       *store.Store
	acct     string
	key      string
	upstream *Upstream
}

// rigAccount is the account and key a rig creates; the zero value is a
// well-funded account without limits and an unrestricted key.
type rigAccount struct {
	balance int64 // nano-USD; 0 means one million USD
	limits  account.Limits
	key     account.KeyOptions
}

func newRig(tb testing.TB) *rig { return newRigWith(tb, "alpha", rigAccount{}) }

// newRigWith builds a processor serving the named upstream of gateway.yaml.
func newRigWith(tb testing.TB, upstream string, ra rigAccount) *rig {
	tb.Helper()
	mr := miniredis.RunT(tb)
	r := newRigOn(tb, mr.Addr(), upstream, ra)
	r.mr = mr
	return r
}

// newRigOn builds a processor serving the named upstream over the Redis at
// addr.
func newRigOn(tb testing.TB, addr, upstream string, ra rigAccount) *rig {
	tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	tb.Cleanup(func() { rdb.Close() })
	trips := &roundTrips{}
	rdb.AddHook(trips)
	st := store.New(rdb, store.Options{})
	ctx := context.Background()
	if ra.balance == 0 {
		ra.balance = 1_000_000 * 1_000_000_000
	}
	a, err := st.CreateAccount(ctx, "test", ra.balance, ra.limits)
	if err != nil {
		tb.Fatal(err)
	}
	key, _, err := st.CreateKey(ctx, a.ID, account.ModelKey, ra.key)
	if err != nil {
		tb.Fatal(err)
	}
	cfg, err := config.Load("../gateway.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	u, _ := cfg.Upstream(upstream)
	r, err := NewUpstream(*u, testPrices(tb, u), operations.All)
	if err != nil {
		tb.Fatal(err)
	}
	// The key cache holds for the whole test: a loaded machine must not
	// turn a cached key into a lookup (round trips are counted).
	srv := NewServer(Options{Upstreams: []*Upstream{r}, Keys: auth.NewCache(st, time.Hour), Admitter: st, Settler: st, MaxRequestBytes: 32 << 20,
		Logger: slog.New(slog.DiscardHandler)})
	return &rig{srv: srv, trips: trips, st: st, acct: a.ID, key: key, upstream: r}
}

// testPrices prices an upstream from the pricing package's made-up
// catalogue, so that these tests need no download; the models they send are
// aliases of its entries.
func testPrices(tb testing.TB, u *config.Upstream) *pricing.Table {
	tb.Helper()
	aliases := map[string]map[string]string{
		"alpha": {"claude-sonnet-4-5": "fake-claude-1", "claude-haiku-4-5": "fake-claude-1-mini"},
		"beta":  {"gpt-4o-mini": "fake-gpt-1", "o4-mini": "fake-gpt-nolimit"},
	}
	u.Models.Aliases = aliases[u.Name]
	cat, err := pricing.LoadCatalogue("../internal/pricing/testdata/catalogue.json", u.Models.Providers, operations.All.Modes())
	if err != nil {
		tb.Fatal(err)
	}
	prices, err := pricing.NewTable(cat, u.Models)
	if err != nil {
		tb.Fatal(err)
	}
	return prices
}

func headers(kv ...string) *extprocv3.HttpHeaders {
	m := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.HttpHeaders{Headers: m}
}

var (
	reqBody = []byte(`{"model":"claude-sonnet-4-5","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"Hello there"}]}`)
	events  = [][]byte{
		[]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n"),
		[]byte("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"),
		[]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n"),
		[]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n"),
		[]byte("event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"),
		[]byte("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n"),
		[]byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"),
	}
)

// request runs one streaming request through the exchange, phase by phase,
// as Envoy would send it, and fails on any immediate response.
func (r *rig) request(tb testing.TB) { r.requestWith(tb, reqBody, events) }

// requestWith runs a streaming request of body answered with evs, as
// request does.
func (r *rig) requestWith(tb testing.TB, reqBody []byte, events [][]byte) {
	ctx := context.WithValue(context.Background(), criticalKey{}, true)
	x := &exchange{s: r.srv}
	check := func(resp *extprocv3.ProcessingResponse) {
		if ir := resp.GetImmediateResponse(); ir != nil {
			tb.Fatalf("rejected: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	check(x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
			"content-type", "application/json", "content-length", strconv.Itoa(len(reqBody)), "anthropic-version", "2023-06-01"),
	}}))
	check(x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}}))
	check(x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream", "x-gateway-endpoint", "primary"),
	}}))
	for i, ev := range events {
		check(x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: ev, EndOfStream: i == len(events)-1},
		}}))
	}
	if !x.settled {
		tb.Fatal("request not settled")
	}
}

// One request costs one Redis round trip on its critical path with the key
// cached: the admission script. Its settlement is queued when the last
// chunk is released and applied afterwards, in batches: at most one round
// trip per request, fewer when settlements accumulate.
func TestRoundTripsPerRequest(t *testing.T) {
	r := newRig(t)
	r.request(t) // warm the key cache and load the scripts
	if err := r.srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	before, criticalBefore := r.trips.n.Load(), r.trips.critical.Load()
	const n = 10
	for i := 0; i < n; i++ {
		r.request(t)
	}
	if got := r.trips.critical.Load() - criticalBefore; got != n {
		t.Fatalf("%d Redis round trips on the critical path of %d requests, want %d", got, n, n)
	}
	if err := r.srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.trips.n.Load() - before; got > 2*n || got < n+1 {
		t.Fatalf("%d Redis round trips in all for %d requests, want %d admissions and between 1 and %d settlement batches", got, n, n, n)
	}
	rep, err := r.st.Usage(context.Background(), r.acct, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Requests != n+1 || rep.Totals.Usage.Input != 12*(n+1) || rep.Totals.Usage.Output != 2*(n+1) {
		t.Fatalf("usage %+v", rep.Totals)
	}
}

// Settlements queued while the store is slow to drain go out as one
// pipelined batch, and each is applied once.
func TestSettlementsBatch(t *testing.T) {
	r := newRig(t)
	r.request(t)
	r.srv.Flush(context.Background())
	// Hold the settler on a batch of its own: everything queued meanwhile
	// is sent together afterwards.
	// The requests are made once the blocker's batch has been sent (its
	// callback runs), so none of them joins it.
	release, blocked := make(chan struct{}), make(chan struct{})
	r.srv.settler.enqueue(account.Settlement{RequestID: "blocker", AccountID: r.acct}, 0, false, func(*account.Settlement, ledger.SettleResult, time.Duration) {
		close(blocked)
		<-release
	})
	<-blocked
	const n = 20
	for i := 0; i < n; i++ {
		r.request(t)
	}
	before := r.trips.n.Load()
	close(release)
	if err := r.srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.trips.n.Load() - before; got != 1 {
		t.Fatalf("%d round trips for %d queued settlements, want one pipelined batch", got, n)
	}
	rep, err := r.st.Usage(context.Background(), r.acct, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Requests != n+1 {
		t.Fatalf("usage counts %d requests, want %d", rep.Totals.Requests, n+1)
	}
}

// A usage read waits for the account's queued settlements, and only for
// its own account's.
func TestWaitSettled(t *testing.T) {
	r := newRig(t)
	release := make(chan struct{})
	r.srv.settler.enqueue(account.Settlement{RequestID: "r1", AccountID: r.acct}, 0, false, func(*account.Settlement, ledger.SettleResult, time.Duration) { <-release })
	if err := r.srv.WaitSettled(context.Background(), "acct_other"); err != nil {
		t.Fatalf("another account's read waited: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := r.srv.WaitSettled(ctx, r.acct); err == nil {
		t.Fatal("a read returned while its account's settlement was queued")
	}
	close(release)
	if err := r.srv.WaitSettled(context.Background(), r.acct); err != nil {
		t.Fatal(err)
	}
	if n := r.srv.PendingSettlements(); n != 0 {
		t.Fatalf("%d settlements still pending", n)
	}
}

// A reply's settlement is pending from the answer to its last chunk, not
// from the settlement queued after that answer is sent: a client that reads
// its usage as soon as the chunk reaches it waits for the charge. A reply
// whose stream ends before that answer is sent leaves no count behind.
func TestSettlementPendingBeforeTheLastChunkIsReleased(t *testing.T) {
	r := newRig(t)
	ctx := context.WithValue(context.Background(), criticalKey{}, true)
	for _, sent := range []bool{true, false} {
		x := &exchange{s: r.srv}
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
				"content-type", "application/json", "content-length", strconv.Itoa(len(reqBody)), "anthropic-version", "2023-06-01"),
		}})
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
		}})
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
			ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream", "x-gateway-endpoint", "primary"),
		}})
		for _, ev := range events[:len(events)-1] {
			x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: ev},
			}})
		}
		if err := r.srv.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		// The last chunk's answer, not yet sent (Process sends it, then
		// runs afterSend).
		x.handle(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: events[len(events)-1], EndOfStream: true},
		}})
		if x.settled {
			t.Fatal("settled before the last chunk's answer was sent")
		}
		if n := r.srv.PendingSettlements(); n != 1 {
			t.Fatalf("%d settlements pending once the last chunk's answer is ready, want 1", n)
		}
		short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		err := r.srv.WaitSettled(short, r.acct)
		cancel()
		if err == nil {
			t.Fatal("a usage read returned before the released reply was settled")
		}
		if sent {
			x.afterSend(ctx)
		}
		x.finish() // a stream that ended before the answer was sent settles here
		if err := r.srv.WaitSettled(ctx, r.acct); err != nil {
			t.Fatal(err)
		}
		if n := r.srv.PendingSettlements(); n != 0 {
			t.Fatalf("%d settlements pending after the reply settled (answer sent: %v)", n, sent)
		}
	}
	rep, err := r.st.Usage(ctx, r.acct, ledger.Total)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Totals.Requests != 2 || rep.Totals.Usage.Output != 4 {
		t.Fatalf("usage %+v, want 2 requests of 2 output tokens", rep.Totals)
	}
}

// BenchmarkRequest is one full streaming request through the processor:
// headers, body and admission, response headers, seven SSE chunks metered,
// settlement, on miniredis.
func BenchmarkRequest(b *testing.B) {
	r := newRig(b)
	r.request(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.request(b)
	}
}

// Messages out of the expected order are answered, never a panic.
func TestOutOfOrderMessages(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	x := &exchange{s: r.srv}
	resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}})
	if resp.GetImmediateResponse().GetStatus().GetCode() != 500 {
		t.Fatalf("body before headers: %v", resp)
	}
	x = &exchange{s: r.srv}
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: headers(":status", "200")}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: events[0], EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}},
	} {
		if x.step(ctx, req) == nil {
			t.Fatalf("no answer to %T", req.Request)
		}
	}
	x.finish()
	if x.settled {
		t.Fatal("a request that was never admitted was settled")
	}
}

// openStream runs a streaming request up to the given events without the
// body's end, then ends the stream as a client disconnect does.
func (r *rig) openStream(tb testing.TB, evs [][]byte) {
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key),
	}})
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}})
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream"),
	}})
	for _, ev := range evs {
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: ev},
		}})
	}
	x.finish()
	if !x.settled {
		tb.Fatal("not settled")
	}
}

// The meter, not the way the stream ended, decides whether figures are
// estimated: once the vendor's final usage has arrived a disconnect changes
// nothing; before it, the settlement is an estimate.
func TestDisconnectEstimatesOnlyWhatWasNotReported(t *testing.T) {
	r := newRig(t)
	r.openStream(t, events)     // every event, then the client is gone
	r.openStream(t, events[:3]) // cut before message_delta and message_stop
	r.srv.Flush(context.Background())
	entries, _, err := r.st.Ledger(context.Background(), r.acct, "", 10)
	if err != nil || len(entries) != 2 {
		t.Fatalf("ledger %+v, %v", entries, err)
	}
	if e := entries[0]; e.Estimated || e.Usage.Input != 12 || e.Usage.Output != 2 || e.Requested != "claude-sonnet-4-5" || e.Priced != "fake-claude-1" || e.Reported != "claude-sonnet-4-5" || e.Rates.Input != 1_000_000_000 {
		t.Fatalf("full reply then disconnect: %+v; want the vendor's figures, not estimated", e)
	}
	if e := entries[1]; !e.Estimated || e.Usage.Input != 12 {
		t.Fatalf("cut reply: %+v; want an estimate", e)
	}
}

// readHeaders converts only the values it reads: a request carries many
// more headers than the processor looks at.
func TestReadHeadersAllocatesOnlyWhatItReads(t *testing.T) {
	h := headers(":method", "POST", ":path", "/alpha/v1/messages", ":authority", "gateway", ":scheme", "http",
		"x-api-key", "cr_abcdefghijklmnop", "content-type", "application/json", "content-length", "120",
		"user-agent", "Anthropic/Python 2.12.0", "accept", "application/json", "anthropic-version", "2023-06-01",
		"x-stainless-lang", "python", "x-stainless-os", "Linux", "x-stainless-retry-count", "0",
		"x-request-id", "0f4c", "x-forwarded-proto", "http").GetHeaders()
	read := 7 // method, path, key (and its list), content type, content length, request id
	if n := testing.AllocsPerRun(100, func() { readHeaders(h) }); n > float64(read) {
		t.Fatalf("readHeaders allocates %v times for %d values read", n, read)
	}
	hv := readHeaders(h)
	if hv.method != "POST" || hv.path != "/alpha/v1/messages" || len(hv.credentials.XAPIKey) != 1 || hv.credentials.XAPIKey[0] != "cr_abcdefghijklmnop" || hv.contentLength != "120" {
		t.Fatalf("%+v", hv)
	}
}

// A vendor reset before the first byte of the reply is recorded as the 502
// the client saw, at no charge.
func TestResetBeforeFirstByte(t *testing.T) {
	r := newRig(t)
	r.openStream(t, nil)
	r.srv.Flush(context.Background())
	entries, _, err := r.st.Ledger(context.Background(), r.acct, "", 10)
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledger %+v, %v", entries, err)
	}
	if e := entries[0]; e.Status != 502 || e.Cost != 0 || e.Usage.Input != 0 {
		t.Fatalf("reset before the first byte: %+v; want 502, no charge", e)
	}

	// With the response headers message skipped, a stream that ends before
	// any body chunk never learnt its status: the same rule applies.
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key),
	}})
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}})
	x.finish()
	r.srv.Flush(ctx)
	entries, _, err = r.st.Ledger(ctx, r.acct, "", 10)
	if err != nil || len(entries) != 2 {
		t.Fatalf("ledger %+v, %v", entries, err)
	}
	if e := entries[1]; e.Status != 502 || e.Cost != 0 || e.Estimated {
		t.Fatalf("no body chunk before the end: %+v; want 502, no charge", e)
	}
}

// A running request is registered with the renewer, checkpointed once per
// renewal (not per chunk), and dropped once the store took its settlement.
// newRenewedRig is a rig whose running requests' holds are renewed by the
// returned renewer, run by hand.
func newRenewedRig(t *testing.T) (*rig, *holds.Renewer) {
	r := newRig(t)
	ren := holds.NewRenewer(r.st, slog.New(slog.DiscardHandler))
	r.srv.holds = ren
	return r, ren
}

func TestRenewalOfARunningRequest(t *testing.T) {
	r, ren := newRenewedRig(t)
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key),
	}})
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
	}})
	if ren.Len() != 1 {
		t.Fatalf("%d requests renewed after admission", ren.Len())
	}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream"),
	}})
	body := func(ev []byte) {
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: ev},
		}})
	}
	body(events[0]) // finds the renewer's first request for a checkpoint
	body(events[1]) // takes it, once this chunk's answer is sent
	body(events[2]) // no request pending: no new checkpoint
	ren.RenewOnce(ctx)
	cs, err := r.st.Checkpoints(ctx, r.acct)
	if err != nil || len(cs) != 1 {
		t.Fatalf("checkpoints %v, %v", cs, err)
	}
	for _, c := range cs {
		if c.Status != 200 || c.Usage.Input != 12 || c.Usage.Output != 1 || c.Cost == 0 {
			t.Fatalf("checkpoint %+v; want the usage after message_start", c)
		}
	}
	// The renewal asked again: the chunk after the one that finds it
	// asked checkpoints, once its answer is sent (the pricing never delays
	// a chunk, and a reply that ends next is settled instead).
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: events[3]},
	}})
	if x.checkpointDue || !x.checkpointAsked {
		t.Fatal("the first chunk after the renewal did not find the request, or took it at once")
	}
	x.handle(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: events[4]},
	}})
	if !x.checkpointDue {
		t.Fatal("the next chunk asked for no checkpoint")
	}
	x.afterSend(ctx)
	if x.checkpointDue {
		t.Fatal("the checkpoint was not taken after the chunk's answer was sent")
	}
	ren.RenewOnce(ctx)
	cs, _ = r.st.Checkpoints(ctx, r.acct)
	for _, c := range cs {
		if c.Usage.Output < 2 {
			t.Fatalf("checkpoint %+v after the second renewal", c)
		}
	}
	x.finish()
	r.srv.Flush(ctx)
	// The store took the settlement: nothing is left to renew, without
	// waiting for a renewal to find the hold gone.
	if ren.Len() != 0 {
		t.Fatalf("%d requests still renewed after their settlement was applied", ren.Len())
	}
}

// A JSON reply comes as its body and then an empty end: a renewal's request
// for a checkpoint found by the body is not taken, the reply is priced
// once, at its settlement.
func TestAJSONReplyIsPricedOnce(t *testing.T) {
	r, ren := newRenewedRig(t)
	ctx := context.Background()
	x := &exchange{s: r.srv}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
			"content-type", "application/json"),
	}})
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: messagesJSONBody, EndOfStream: true},
	}})
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: headers(":status", "200", "content-type", "application/json", "x-gateway-endpoint", "primary"),
	}})
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: messagesJSONReply},
	}})
	if x.checkpointDue || !x.checkpointAsked {
		t.Fatalf("after the body: due %v, asked %v; want the request found and not taken", x.checkpointDue, x.checkpointAsked)
	}
	// What a renewal now would write: how the reply began, not a price.
	ren.RenewOnce(ctx)
	cs, err := r.st.Checkpoints(ctx, r.acct)
	if err != nil || len(cs) != 1 {
		t.Fatalf("checkpoints %v, %v", cs, err)
	}
	for _, c := range cs {
		if c.Status != 200 || c.Cost != 0 || c.Usage.Output != 0 {
			t.Fatalf("checkpoint %+v before the end; want the head only", c)
		}
	}
	x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{EndOfStream: true},
	}})
	if !x.settled || x.checkpointDue {
		t.Fatalf("after the end: settled %v, checkpoint due %v", x.settled, x.checkpointDue)
	}
	r.srv.Flush(ctx)
	entries, _, err := r.st.Ledger(ctx, r.acct, "", 10)
	if err != nil || len(entries) != 1 || entries[0].Cost == 0 || entries[0].Usage.Output != 11 {
		t.Fatalf("ledger %+v, %v; want the reply charged", entries, err)
	}
}

// With the response headers message skipped, the status and the serving
// endpoint come as attributes on the first body chunk: a 2xx reply is
// metered as an event stream (the request asked for one), a non-2xx one is
// settled at no charge.
func TestResponseFromAttributes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	run := func(code float64, chunks [][]byte) {
		x := &exchange{s: r.srv}
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
			RequestHeaders: headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key),
		}})
		if resp := x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: reqBody, EndOfStream: true},
		}}); resp.GetImmediateResponse() != nil {
			t.Fatalf("rejected: %v", resp)
		}
		attrs, err := structpb.NewStruct(map[string]any{
			"response.code":              code,
			"xds.upstream_host_metadata": `filter_metadata { key: "gateway" value { fields { key: "endpoint" value { string_value: "reserve" } } } } `,
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range chunks {
			req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: c, EndOfStream: i == len(chunks)-1},
			}}
			if i == 0 {
				req.Attributes = map[string]*structpb.Struct{attributesKey: attrs}
			}
			if resp := x.step(ctx, req); resp.GetResponseBody() == nil {
				t.Fatalf("chunk %d: %v", i, resp)
			}
		}
		if !x.settled {
			t.Fatal("not settled")
		}
	}
	run(200, events)
	run(529, [][]byte{[]byte(`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`)})
	r.srv.Flush(ctx)
	entries, _, err := r.st.Ledger(ctx, r.acct, "", 10)
	if err != nil || len(entries) != 2 {
		t.Fatalf("ledger %+v, %v", entries, err)
	}
	if e := entries[0]; e.Status != 200 || e.Endpoint != "reserve" || e.Usage.Input != 12 || e.Usage.Output != 2 || e.Estimated || e.Cost == 0 {
		t.Fatalf("2xx entry %+v", e)
	}
	if e := entries[1]; e.Status != 529 || e.Cost != 0 {
		t.Fatalf("529 entry %+v", e)
	}
}

// step answers one message as Process does: the answer, then what follows
// its sending (a complete reply is settled after its last chunk is released).
func (x *exchange) step(ctx context.Context, req *extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
	resp := x.handle(ctx, req)
	if resp != nil {
		x.afterSend(ctx)
	}
	return resp
}

// More settlements than one batch holds, queued while the settler is busy,
// all go out, each once, in batches of at most maxBatch.
func TestSettlementsBeyondOneBatch(t *testing.T) {
	r := newRig(t)
	release, blocked := make(chan struct{}), make(chan struct{})
	r.srv.settler.enqueue(account.Settlement{RequestID: "blocker", AccountID: r.acct}, 0, false, func(*account.Settlement, ledger.SettleResult, time.Duration) {
		close(blocked)
		<-release
	})
	<-blocked
	const n = 3*maxBatch + 7
	var done [n]atomic.Int32
	for i := range n {
		r.srv.settler.enqueue(account.Settlement{RequestID: "r" + strconv.Itoa(i), AccountID: r.acct}, 0, false, func(*account.Settlement, ledger.SettleResult, time.Duration) {
			done[i].Add(1)
		})
	}
	close(release)
	if err := r.srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range done {
		if c := done[i].Load(); c != 1 {
			t.Fatalf("settlement %d completed %d times", i, c)
		}
	}
}

// Bursts of settlements from many goroutines, some larger than a batch,
// some arriving while the settler drains: each completes exactly once.
func TestSettlementsUnderBursts(t *testing.T) {
	r := newRig(t)
	const workers, each = 8, 700
	var done [workers * each]atomic.Int32
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				k := w*each + i
				r.srv.settler.enqueue(account.Settlement{RequestID: "b" + strconv.Itoa(k), AccountID: r.acct}, 0, false, func(*account.Settlement, ledger.SettleResult, time.Duration) {
					done[k].Add(1)
				})
				if i%(50+w*37) == 0 {
					r.srv.Flush(context.Background()) // let the queue empty now and then
				}
			}
		}()
	}
	wg.Wait()
	if err := r.srv.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range done {
		if c := done[i].Load(); c != 1 {
			t.Fatalf("settlement %d completed %d times", i, c)
		}
	}
}

// A background request's reply that names a response not yet ended parks
// it instead of settling: the settlement counted as pending at its last
// chunk is given back, and nothing is left pending for a usage read to
// wait on.
func TestParkedBackgroundLeavesNothingPending(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{})
	r.srv.parking, r.srv.owners = r.st, r.st
	reply, err := os.ReadFile("format/responses/testdata/queued.json")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"gpt-4o-mini","background":true,"input":"hi"}`)
	r.jsonRequest(t, headers(":method", "POST", ":path", "/beta/v1/responses", "authorization", "Bearer "+r.key,
		"content-type", "application/json"), body, reply)
	ctx := context.Background()
	if _, parked, err := r.st.Parked(ctx, r.acct, "resp_bg1"); err != nil || !parked {
		t.Fatalf("the response was not parked: %v", err)
	}
	if n := r.srv.PendingSettlements(); n != 0 {
		t.Fatalf("%d settlements pending after the response was parked, want 0", n)
	}
	if err := r.srv.WaitSettled(ctx, r.acct); err != nil {
		t.Fatal(err)
	}
}
