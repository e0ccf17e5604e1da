package extproc

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/modelgateway/gateway/internal/account"
)

// slowOwners is a store of response owners whose binds wait for release.
type slowOwners struct {
	entered chan struct{} // closed when the first bind starts
	release chan struct{}
	owner   string // written unsynchronised: read only once the exchange says the bind is done
	items   map[string]string
}

// Bind holds the first bind (the response's, beside the first event)
// until release; the binds after it wait behind it.
func (o *slowOwners) Bind(ctx context.Context, bs ...account.Binding) error {
	if o.items == nil {
		close(o.entered)
		<-o.release
		o.owner = bs[0].Account
		o.items = map[string]string{}
	}
	for _, b := range bs {
		for _, id := range b.IDs {
			o.items[id] = b.Account
		}
	}
	return nil
}

func (o *slowOwners) ResponseOwners(ctx context.Context, ids []string) ([]string, []string, error) {
	return make([]string, len(ids)), make([]string, len(ids)), nil
}

// A streamed response names its stored response in its first event. The
// bind runs beside the stream: the first event is released while the bind
// is still in flight (time to first event pays no Redis round trip), and
// the stream's last chunk is answered only once the bind has landed, so a
// client that has read the whole stream always finds its response bound.
func TestStreamBindsBesideTheFirstEvent(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{})
	owners := &slowOwners{entered: make(chan struct{}), release: make(chan struct{})}
	r.srv.owners = owners
	ctx := context.Background()
	x, events := r.startResponsesStream(t, ctx)

	chunk := func(i int) <-chan *extprocv3.ProcessingResponse {
		out := make(chan *extprocv3.ProcessingResponse, 1)
		go func() {
			out <- x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: events[i], EndOfStream: i == len(events)-1},
			}})
		}()
		return out
	}
	// A failure deadline, not a measurement: a bind on the first event's
	// path never returns while the store holds it.
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	select {
	case resp := <-chunk(0):
		if resp.GetResponseBody() == nil {
			t.Fatalf("first event: %v", resp)
		}
	case <-deadline.C:
		t.Fatal("the first event was held for the bind")
	}
	<-owners.entered // the bind started while the stream runs
	for i := 1; i < len(events)-1; i++ {
		<-chunk(i)
	}
	last := chunk(len(events) - 1)
	close(owners.release)
	<-last
	// Read without synchronising with the bind: an exchange that answered
	// without waiting sees no owner yet, or, run with -race, a race.
	if owners.owner != r.acct {
		t.Fatalf("last chunk answered before the bind landed (owner %q)", owners.owner)
	}
	// The response's items, known only at its end, are bound before its
	// last chunk goes, to the same account.
	for _, id := range []string{"msg_1", "fc_1", "rs_1"} {
		if owners.items[id] != r.acct {
			t.Errorf("item %s bound to %q, want %q (items %v)", id, owners.items[id], r.acct, owners.items)
		}
	}
	if !x.settled {
		t.Fatal("not settled")
	}
}

// A stream's items are bound beside it as they show (output_item.added):
// its last chunk waits for binds that have landed and pays no Redis round
// trip of its own; every item and the response are bound to the account.
func TestStreamItemsBoundBesideTheStream(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{})
	r.srv.owners = r.st
	ctx := context.WithValue(context.Background(), criticalKey{}, true)
	x, events := r.startResponsesStream(t, ctx)
	chunk := func(i int) {
		x.step(ctx, &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
			ResponseBody: &extprocv3.HttpBody{Body: events[i], EndOfStream: i == len(events)-1},
		}})
	}
	for i := range len(events) - 1 {
		chunk(i)
	}
	<-x.binding // every bind started beside the stream has landed
	before := r.trips.critical.Load()
	chunk(len(events) - 1)
	if n := r.trips.critical.Load() - before; n != 0 {
		t.Errorf("the last chunk made %d Redis round trips; want 0 (its items bound beside the stream)", n)
	}
	id, _ := x.stored.Response()
	ids := []string{id, "msg_1", "fc_1", "rs_1"}
	owners, _, err := r.st.ResponseOwners(context.Background(), ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range owners {
		if o != r.acct {
			t.Errorf("%s bound to %q, want %q", ids[i], o, r.acct)
		}
	}
}

// startResponsesStream starts a streamed Responses request through the
// exchange, up to its reply's headers, and returns the exchange and the
// reply's events (format/responses/testdata/stream.sse).
func (r *rig) startResponsesStream(t *testing.T, ctx context.Context) (*exchange, [][]byte) {
	t.Helper()
	stream, err := os.ReadFile("format/responses/testdata/stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	events := bytes.SplitAfter(stream, []byte("\n\n"))
	if len(events) > 0 && len(events[len(events)-1]) == 0 {
		events = events[:len(events)-1]
	}
	body := []byte(`{"model":"gpt-4o-mini","max_output_tokens":256,"stream":true,"input":"Fix the failing test."}`)
	x := &exchange{s: r.srv}
	for _, req := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(":method", "POST", ":path", "/beta/v1/responses",
			"authorization", "Bearer "+r.key, "content-type", "application/json", "content-length", strconv.Itoa(len(body)))}},
		{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: body, EndOfStream: true}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: headers(":status", "200", "content-type", "text/event-stream")}},
	} {
		if ir := x.step(ctx, req).GetImmediateResponse(); ir != nil {
			t.Fatalf("rejected: %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
	}
	return x, events
}
