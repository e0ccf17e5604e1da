package extproc

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/modelgateway/gateway/extproc/wire"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/internal/ledger"
)

// Ended exchanges and the Messages their streams were received into are
// reused (envoy.go, exchanges; wire.Message): nothing may read one after
// its stream ended. Every ended exchange is overwritten here with another
// account's finished exchange instead of being reused, and every Message
// has that account's request headers, body and response headers decoded
// into it: a settlement, bind, renewal or trace still reading either would
// bill that account's request, model or usage. The ledgers of a JSON request, a
// stream checkpointed by the renewer and a Responses stream (leases on)
// must equal those of the same requests with exchanges released as
// shipped, and the stream's response and items be bound to its account.
func TestExchangeNotKeptPastItsStream(t *testing.T) {
	plain := exchangeRun(t)

	// The poison: a finished request of another account, another model.
	other := newRigWith(t, "beta", rigAccount{})
	poison := &exchange{s: other.srv}
	poisonMsgs := jsonMessages(headers(":method", "POST", ":path", "/beta/v1/chat/completions", "authorization", "Bearer "+other.key,
		"content-type", "application/json"), chatJSONBody, chatJSONReply)
	for _, m := range poisonMsgs {
		poison.step(context.Background(), m)
	}
	poison.finish()
	if !poison.settled {
		t.Fatal("the poison's request was not settled")
	}
	poison.steered, poison.vendorKey = "k-poison", "k-poison" // as if a pool's key had served it
	was, wasMessage := releaseExchange, releaseMessage
	t.Cleanup(func() { releaseExchange, releaseMessage = was, wasMessage })
	released, releasedMessages := 0, 0
	releaseExchange = func(x *exchange) {
		*x = *poison // never given back: whatever still holds x reads this
		released++
	}
	codec := wire.NewCodec()
	releaseMessage = func(m *wire.Message) {
		for _, p := range poisonMsgs[:3] { // request headers, body, response headers
			b, err := proto.Marshal(p)
			if err != nil {
				t.Error(err)
				return
			}
			m.Request.Reset() // as Recv does
			if err := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, m); err != nil {
				t.Error(err)
				return
			}
		}
		releasedMessages++
	}
	poisoned := exchangeRun(t)
	if released != 4 || releasedMessages != 4 {
		t.Fatalf("%d exchanges and %d messages released, want 4 of each", released, releasedMessages)
	}
	if by, _ := codec.Decoded(); by != 12 {
		t.Fatalf("%d poison messages decoded by hand, want 12", by)
	}
	if len(poisoned) != len(plain) {
		t.Fatalf("%d ledger entries with exchanges poisoned after their stream, %d without", len(poisoned), len(plain))
	}
	for i := range plain {
		if plain[i] != poisoned[i] {
			t.Errorf("entry %d read an ended exchange:\n got %+v\nwant %+v", i, poisoned[i], plain[i])
		}
	}
}

// exchangeRun serves three requests over gRPC, leases on, and returns
// their ledger entries, alpha's then beta's, without what differs from run
// to run (ids, times, the account's and key's ids).
func exchangeRun(t *testing.T) []account.Settlement {
	ctx := t.Context()
	alpha := newRigWith(t, "alpha", rigAccount{})
	ren := holds.NewRenewer(alpha.st, slog.New(slog.DiscardHandler))
	alpha.srv.holds = ren
	alpha.leased(t)
	beta := newRigWith(t, "beta", rigAccount{})
	beta.srv.owners = beta.st
	beta.leased(t)
	// A pooled upstream: the key that served comes with the reply's first
	// chunk, as Envoy sends it.
	pooled := newRigWith(t, "beta", rigAccount{})
	pooled.upstream.Pool = keypool.New(pooled.upstream.Name, []keypool.Key{{Name: "k1", Cluster: "beta_k1"}, {Name: "k2", Cluster: "beta_k2"}},
		keypool.Options{CoolDown: time.Minute, MaxCoolDown: time.Hour, ProbeInterval: time.Hour})
	pooled.leased(t)
	ac, bc, pc := serveGRPC(t, alpha.srv), serveGRPC(t, beta.srv), serveGRPC(t, pooled.srv)

	stored, err := os.ReadFile("format/responses/testdata/stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	responsesBody := []byte(`{"model":"gpt-4o-mini","max_output_tokens":256,"stream":true,"input":"Fix the failing test."}`)
	json := jsonMessages(headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", alpha.key,
		"content-type", "application/json", "anthropic-version", "2023-06-01"), messagesJSONBody, messagesJSONReply)
	if err := sendAll(ctx, ac, json); err != nil {
		t.Fatal(err)
	}
	if err := exchangeOver(ctx, ac, alpha.messages(reqBody), events, func() { ren.RenewOnce(ctx) }); err != nil {
		t.Fatal(err)
	}
	if err := exchangeOver(ctx, bc, beta.responses(responsesBody), bytes.SplitAfter(stored, []byte("\n\n")), nil); err != nil {
		t.Fatal(err)
	}
	served, err := structpb.NewStruct(map[string]any{"response.code": 200.0,
		"xds.upstream_host_metadata": `filter_metadata { key: "gateway" value { fields { key: "key" value { string_value: "k2" } } } } `})
	if err != nil {
		t.Fatal(err)
	}
	chat := jsonMessages(headers(":method", "POST", ":path", "/beta/v1/chat/completions", "authorization", "Bearer "+pooled.key,
		"content-type", "application/json"), chatJSONBody, chatJSONReply)
	chat = []*extprocv3.ProcessingRequest{chat[0], chat[1], chat[3]} // no response headers message: the first chunk says how the reply began
	chat[2] = &extprocv3.ProcessingRequest{Request: chat[2].Request, Attributes: map[string]*structpb.Struct{attributesKey: served}}
	if err := sendAll(ctx, pc, chat); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*rig{alpha, beta, pooled} {
		r.srv.Wait(ctx)
		r.srv.Flush(ctx)
	}
	// The Responses stream's response and items are bound to its account.
	ids := []string{"resp_s1", "rs_1", "ws_1", "fc_1", "msg_1"}
	owners, _, err := beta.st.ResponseOwners(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range owners {
		if o != beta.acct {
			t.Errorf("%s bound to %q, want the stream's account %s", ids[i], o, beta.acct)
		}
	}
	var out []account.Settlement
	for _, r := range []*rig{alpha, beta, pooled} {
		entries, _, err := r.st.Ledger(ctx, r.acct, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, comparable(e))
		}
	}
	if len(out) != 4 {
		t.Fatalf("%d ledger entries for 4 requests", len(out))
	}
	if k := out[3].VendorKey; k != "k2" {
		t.Fatalf("the pooled request's entry names vendor key %q, want k2", k)
	}
	return out
}

// comparable is e without what differs between two runs of the same
// request.
func comparable(e ledger.Entry) account.Settlement {
	st := e.Settlement
	st.RequestID, st.AccountID, st.KeyID, st.Lease.ID = "", "", "", ""
	st.StartedAt, st.EndedAt = time.Time{}, time.Time{}
	return st
}

// sendAll sends msgs over one stream, as Envoy would, and ends it.
func sendAll(ctx context.Context, c extprocv3.ExternalProcessorClient, msgs []*extprocv3.ProcessingRequest) error {
	s, err := c.Process(ctx)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if err := s.Send(m); err != nil {
			return err
		}
		resp, err := s.Recv()
		if err != nil {
			return err
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			return errors.New("refused: " + string(ir.GetBody()))
		}
	}
	return closeStream(s)
}

// The answers that change nothing are shared by every stream (envoy.go):
// after requests of every kind have been answered with them, and a chunk
// rewritten, each is still the message it was made as.
func TestSharedAnswersStayUnchanged(t *testing.T) {
	shared := []*extprocv3.ProcessingResponse{continueRequestTrailers, continueResponseTrailers, continueResponseHeaders, ignoreReply, continueResponseBody}
	was := make([]*extprocv3.ProcessingResponse, len(shared))
	for i, m := range shared {
		was[i] = proto.Clone(m).(*extprocv3.ProcessingResponse)
	}
	exchangeRun(t)
	r := newRig(t)
	r.request(t)
	r.jsonRequest(t, headers(":method", "POST", ":path", "/alpha/v1/messages", "x-api-key", r.key,
		"content-type", "application/json", "anthropic-version", "2023-06-01"), messagesJSONBody, messagesJSONReply)
	x := &exchange{s: r.srv}
	for _, m := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: headers(":status", "404")}},
		{Request: &extprocv3.ProcessingRequest_RequestTrailers{RequestTrailers: &extprocv3.HttpTrailers{}}},
		{Request: &extprocv3.ProcessingRequest_ResponseTrailers{ResponseTrailers: &extprocv3.HttpTrailers{}}},
	} {
		x.step(context.Background(), m)
	}
	for i, m := range shared {
		if !proto.Equal(m, was[i]) {
			t.Errorf("shared answer %d changed: %v, made as %v", i, m, was[i])
		}
	}
}

// A stream's answers are built in storage kept from one message and one
// stream to the next (envoywire.go, answer): each is the message it would
// be if built afresh, whatever the answer before it held.
func TestReusedAnswersHoldNothingOfTheLast(t *testing.T) {
	fresh := func(o *onward, headers bool) *extprocv3.ProcessingResponse {
		c := &extprocv3.CommonResponse{ClearRouteCache: o.reroute}
		if len(o.set) > 0 || len(o.remove) > 0 {
			c.HeaderMutation = &extprocv3.HeaderMutation{RemoveHeaders: o.remove}
			for _, kv := range o.set {
				c.HeaderMutation.SetHeaders = append(c.HeaderMutation.SetHeaders, setHeader(kv[0], kv[1]))
			}
		}
		if o.edited {
			c.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: o.body}}
		}
		if headers {
			return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: c}}, ModeOverride: modes[o.sees]}
		}
		return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: c}}}
	}
	onwards := []*onward{
		{set: [][2]string{{"a", "1"}, {"b", "22"}, {"c", "333"}}, remove: []string{"x-api-key", "authorization"}, reroute: true, sees: seesMetered},
		{remove: []string{"x-api-key"}, sees: seesBody},
		{set: [][2]string{{"x-envoy-upstream-rq-per-try-timeout-ms", "30000"}}, body: []byte(`{"model":"m"}`), edited: true},
		{},
		{set: [][2]string{{"content-length", "4"}, {"b", ""}}, body: []byte("abcd"), edited: true, sees: seesReply},
	}
	a := new(answer)
	for round := range 2 {
		for i, o := range onwards {
			for _, headers := range []bool{true, false} {
				var got *extprocv3.ProcessingResponse
				if headers {
					got = a.requestHeaders(o)
				} else {
					got = a.requestBody(o)
				}
				if want := fresh(o, headers); !proto.Equal(got, want) {
					t.Errorf("round %d, onward %d (headers %v):\n got %v\nwant %v", round, i, headers, got, want)
				}
			}
		}
	}
}
