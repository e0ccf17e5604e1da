package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/extproc/format/formattest"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// foldMarker is in every body the test sends, so that the vendors' request
// logs show whether any reached them.
const foldMarker = "folded-key-probe"

// foldedVariants returns the first spellings of key that a case-folding
// parser reads as key (upper case, a capital, the Kelvin sign and long s
// raw and escaped, one letter in its other case): enough to show each
// form refused end to end; the format packages' tests try them all.
func foldedVariants(key string) []string {
	v := formattest.FoldedKeys(key)
	return v[:min(len(v), 6)]
}

// withMember adds member to a JSON object body, first.
func withMember(body, member string) string {
	return "{" + member + "," + strings.TrimPrefix(body, "{")
}

// vendorsHeard returns the API requests the vendors counted, and whether
// any recorded request holds the marker.
func vendorsHeard(s *launch.Stack) (int, bool) {
	n, marked := 0, false
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		n += f.APIRequests()
		for _, r := range f.Requests() {
			marked = marked || bytes.Contains(r.Body, []byte(foldMarker))
		}
	}
	return n, marked
}

// A key that folds to a field the gateway reads (MODEL, Max_Tokens,
// max_to\u212aens with the Kelvin sign, \u017ftream with the long s), top
// level or nested, is refused with 400 in the vendor's format in every
// format and on the socket, and nothing reaches the vendor.
func TestFoldedKeysRefused(t *testing.T) {
	// The socket probes below are refused messages sent back to back,
	// which the chatter bound (10 a second by default) would cut; this
	// test is about folding, so the bound is raised out of its way.
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.SocketPingsPerSecond = 1000
	}})
	acct := s.NewAccount(10, noLimits)
	chat := chatCompletionsHeaders(acct.Key)
	routes := []struct {
		path   string
		header map[string]string
		base   string   // a body the gateway accepts
		keys   []string // its read top-level keys, each added in folded forms
		nested []string // bodies with a folded key deeper down
	}{
		{alphaPath, messagesHeaders(acct.Key),
			`{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"` + foldMarker + `"}]}`,
			[]string{"model", "max_tokens", "stream", "tools", "metadata"},
			[]string{`{"model":"claude-sonnet-4-5","max_tokens":5,"metadata":{"USER_ID":"u"},"messages":[{"role":"user","content":"` + foldMarker + `"}]}`}},
		{betaPath, chat,
			`{"model":"` + betaModel + `","messages":[{"role":"user","content":"` + foldMarker + `"}]}`,
			[]string{"model", "max_tokens", "max_completion_tokens", "stream", "stream_options", "n", "tools", "functions", "messages"},
			[]string{
				`{"model":"` + betaModel + `","stream":true,"stream_options":{"INCLUDE_USAGE":false},"messages":[{"role":"user","content":"` + foldMarker + `"}]}`,
				`{"model":"` + betaModel + `","stream":true,"stream_options":{"include_u\u017fage":false},"messages":[{"role":"user","content":"` + foldMarker + `"}]}`,
				`{"model":"` + betaModel + `","messages":[{"role":"user","content":[{"type":"file","file":{"File_Id":"file-1"}}]},{"role":"user","content":"` + foldMarker + `"}]}`,
				`{"model":"` + betaModel + `","messages":[{"role":"assistant","AUDIO":{"id":"a"}},{"role":"user","content":"` + foldMarker + `"}]}`,
			}},
		{responsesPath, chat,
			`{"model":"gpt-4o-mini","input":"` + foldMarker + `"}`,
			[]string{"model", "max_output_tokens", "stream", "background", "store", "tools", "previous_response_id"},
			[]string{`{"model":"gpt-4o-mini","tools":[{"TYPE":"web_search"}],"input":"` + foldMarker + `"}`,
				`{"model":"gpt-4o-mini","tools":[{"type":"function","name":"f","parameters":{}},{"\u0074\u0059pe":"web_search"}],"input":"` + foldMarker + `"}`}},
		{"/beta/v1/embeddings", chat,
			`{"model":"text-embedding-3-small","input":"` + foldMarker + `"}`,
			[]string{"model", "input", "user"}, nil},
		{"/beta/v1/images/generations", chat,
			`{"model":"gpt-image-1","prompt":"` + foldMarker + `"}`,
			[]string{"model", "prompt", "n", "size", "stream", "partial_images", "user"}, nil},
	}
	heard, _ := vendorsHeard(s)
	sent := 0
	for _, r := range routes {
		// The base body is accepted: the refusals below are the keys'.
		var bodies []string
		for _, k := range r.keys {
			for _, v := range foldedVariants(k) {
				bodies = append(bodies, withMember(r.base, `"`+v+`":1`))
			}
		}
		bodies = append(bodies, r.nested...)
		for _, b := range bodies {
			resp, out := s.Do("POST", r.path, r.header, []byte(b))
			checkError(t, r.path, resp.StatusCode, resp.Header.Get("content-type"), out, 400, "invalid_request_error", "")
			if !strings.Contains(string(out), "only in case") {
				t.Errorf("%s %s: %s", r.path, b, out)
			}
			sent++
		}
	}

	// The transcription form's part names.
	for _, name := range []string{"Model", "MODEL", "\u017ftream", "Stream", "Response_Format", "PROMPT", "File"} {
		body, h := transcriptionForm(t, acct.Key, 4096, "model", "gpt-4o-transcribe", "language", foldMarker, name, "x")
		resp, out := s.Do("POST", transcriptionsPath, h, body)
		checkError(t, transcriptionsPath, resp.StatusCode, resp.Header.Get("content-type"), out, 400, "", "")
		sent++
	}

	if n, marked := vendorsHeard(s); n != heard || marked {
		t.Fatalf("the vendors heard %d of %d refused requests (a body with the marker recorded: %v)", n-heard, sent, marked)
	}
	if sent < 100 {
		t.Fatalf("only %d requests tried", sent)
	}

	// The socket's response.create: an error event with status 400, and
	// the socket serves on. (Opening it is a request to the vendor.)
	w := mustDialSocket(t, s, acct.Key, nil)
	socketHeard, _ := vendorsHeard(s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	socketBase := `{"type":"response.create","model":"gpt-4o-mini","input":"` + foldMarker + `"}`
	var msgs []string
	for _, k := range []string{"model", "max_output_tokens", "stream", "tools"} {
		for _, v := range foldedVariants(k) {
			msgs = append(msgs, withMember(socketBase, `"`+v+`":1`))
		}
	}
	msgs = append(msgs, `{"type":"response.create","model":"gpt-4o-mini","tools":[{"Type":"web_search"}],"input":"`+foldMarker+`"}`)
	for _, m := range msgs {
		if err := w.c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
		_, data, err := w.c.Read(ctx)
		var e wsEvent
		if err != nil || json.Unmarshal(data, &e) != nil || e.Type != "error" || e.Status != 400 || !strings.Contains(e.Error.Message, "only in case") {
			t.Errorf("socket %s: %s %v", m, data, err)
		}
	}
	if n, marked := vendorsHeard(s); n != socketHeard || marked {
		t.Errorf("the vendor heard %d of %d refused socket messages (a message with the marker recorded: %v)", n-socketHeard, len(msgs), marked)
	}
	// A folded "type" (which the socket reads to tell a response.create):
	// refused, with an error event or by closing the socket, on a socket of
	// its own; the vendor hears nothing of it.
	typed := mustDialSocket(t, s, acct.Key, nil)
	typeHeard, _ := vendorsHeard(s)
	if err := typed.c.Write(ctx, websocket.MessageText, []byte(`{"TYPE":"response.create","type":"response.create","model":"gpt-4o-mini","input":"`+foldMarker+`"}`)); err != nil {
		t.Fatal(err)
	}
	if _, data, err := typed.c.Read(ctx); err == nil {
		var e wsEvent
		if json.Unmarshal(data, &e) != nil || e.Type != "error" || e.Status != 400 {
			t.Errorf("a folded type: %s", data)
		}
	} else if websocket.CloseStatus(err) == -1 {
		t.Errorf("a folded type: %v", err)
	}
	if n, marked := vendorsHeard(s); n != typeHeard || marked {
		t.Errorf("the vendor heard a message with a folded type")
	}

	// The first socket still serves a response spelled exactly.
	if _, id := socketBilled(t, w.create(`{"model":"gpt-4o-mini","input":"hello"}`)); id == "" {
		t.Fatal("no response id")
	}
}
