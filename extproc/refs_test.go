package extproc

import (
	"context"
	"strconv"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/modelgateway/gateway/internal/account"
)

// A create and a token count naming a stored item go on only for the
// item's account; anyone else is told, in the vendor's words, that the
// item does not exist, before admission.
func TestItemReferencesBelongToTheirAccount(t *testing.T) {
	r := newRigWith(t, "beta", rigAccount{})
	r.srv.owners = r.st
	ctx := context.Background()
	if err := r.st.Bind(ctx, account.Binding{Account: r.acct, IDs: []string{"msg_mine"}}); err != nil {
		t.Fatal(err)
	}
	if err := r.st.Bind(ctx, account.Binding{Account: "acct_other", IDs: []string{"msg_theirs"}}); err != nil {
		t.Fatal(err)
	}
	send := func(path, body string) *extprocv3.ImmediateResponse {
		x := &exchange{s: r.srv}
		for _, req := range []*extprocv3.ProcessingRequest{
			{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: headers(":method", "POST", ":path", path,
				"authorization", "Bearer "+r.key, "content-type", "application/json", "content-length", strconv.Itoa(len(body)))}},
			{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(body), EndOfStream: true}}},
		} {
			if ir := x.step(ctx, req).GetImmediateResponse(); ir != nil {
				return ir
			}
		}
		return nil
	}
	for _, path := range []string{"/beta/v1/responses", "/beta/v1/responses/input_tokens"} {
		for _, tc := range []struct{ id, notFound string }{
			{"msg_mine", ""},
			{"msg_theirs", `Item with id \"msg_theirs\" not found.`},
			{"msg_nobody", `Item with id \"msg_nobody\" not found.`},
		} {
			ir := send(path, `{"model":"gpt-4o-mini","input":[{"type":"item_reference","id":"`+tc.id+`"}]}`)
			switch {
			case tc.notFound == "" && ir != nil:
				t.Errorf("%s %s: refused %d %s", path, tc.id, ir.GetStatus().GetCode(), ir.GetBody())
			case tc.notFound != "" && (ir == nil || ir.GetStatus().GetCode() != 404 || !strings.Contains(string(ir.GetBody()), tc.notFound)):
				t.Errorf("%s %s: %v, want 404 saying %s", path, tc.id, ir, tc.notFound)
			}
		}
	}
	// An object no account can own is refused whoever asks.
	ir := send("/beta/v1/responses", `{"model":"gpt-4o-mini","input":"x","tools":[{"type":"file_search","vector_store_ids":["vs_1"]}]}`)
	if ir == nil || ir.GetStatus().GetCode() != 404 || !strings.Contains(string(ir.GetBody()), `"param":"tools[0].vector_store_ids"`) {
		t.Errorf("vector store: %v", ir)
	}
}
