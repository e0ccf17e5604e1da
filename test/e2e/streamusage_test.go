package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

const (
	reasoningModel  = "o4-mini"
	reasoningTokens = 377
	usageOption     = `"stream_options":{"include_usage":true}`
)

// A chat-completions stream whose client did not ask for usage reaches the
// vendor with stream_options.include_usage set and every other byte as the
// client sent it, with a content-length to match; the client gets the
// stream the vendor sends without include_usage; the ledger has the vendor's
// exact figures, reasoning tokens included.
func TestStreamWithoutUsageIsBilledExactly(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	s.Primary.Control(map[string]any{"format": config.FormatChatCompletions, "reasoning_tokens": reasoningTokens})

	// Odd spacing, unicode and tools must survive untouched.
	tools := `"tools":[{"type":"function","function":{"name":"get_weather","description":"Wetter für eine Stadt ☀ \"quoted\"","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}]`
	messages := `"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Quelle heure est-il à Zürich ? 絵文字"}]`
	tests := []struct {
		name, body, upstream string
		chunked              bool
	}{
		{
			name:     "no stream_options",
			body:     "{\n  \"model\": \"" + reasoningModel + "\",\n  \"stream\": true,\n  " + messages + ",\n  " + tools + "\n}\n",
			upstream: "{\n  \"model\": \"" + reasoningModel + "\",\n  \"stream\": true,\n  " + messages + ",\n  " + tools + "," + usageOption + "\n}\n",
		},
		{
			name:     "include_usage false",
			body:     `{"model":"` + reasoningModel + `","stream":true,"stream_options" : { "include_usage" : false },` + messages + `,` + tools + `}`,
			upstream: `{"model":"` + reasoningModel + `","stream":true,"stream_options" : { "include_usage" : true },` + messages + `,` + tools + `}`,
		},
		{
			name:     "other stream options, chunked request",
			body:     `{"model":"` + reasoningModel + `","stream":true,"stream_options":{"include_obfuscation":false},` + messages + `}`,
			upstream: `{"model":"` + reasoningModel + `","stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false},` + messages + `}`,
			chunked:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acct := s.NewAccount(10, noLimits)
			status, client := post(t, s.URL+betaPath, "Bearer "+acct.Key, []byte(tt.body), tt.chunked)
			if status != 200 {
				t.Fatalf("%d %s", status, client)
			}
			rec := s.Primary.LastRequest(config.FormatChatCompletions, "/v1/chat/completions")
			if string(rec.Body) != tt.upstream {
				t.Fatalf("vendor received\n%s\nwant\n%s", rec.Body, tt.upstream)
			}
			// A request sent with a length goes on with the new length; one
			// sent chunked goes on chunked.
			want := strconv.Itoa(len(tt.upstream))
			if tt.chunked {
				want = ""
			}
			if length := header(rec.Headers, "content-length"); length != want {
				t.Fatalf("vendor received content-length %q for %d bytes, want %q", length, len(tt.upstream), want)
			}

			// What the vendor itself sends for the client's own body.
			status, direct := post(t, "http://"+s.Primary.Addrs.ChatCompletions+"/v1/chat/completions", "Bearer "+launch.BetaVendorKey, []byte(tt.body), false)
			if status != 200 {
				t.Fatalf("vendor directly: %d %s", status, direct)
			}
			if got, want := sameRequest(client), sameRequest(direct); !bytes.Equal(got, want) {
				t.Fatalf("client got\n%s\nthe vendor sends without include_usage\n%s", got, want)
			}
			if bytes.Contains(client, []byte(`"usage"`)) {
				t.Fatalf("usage reached the client:\n%s", client)
			}

			e := waitLedgerEntry(t, s, acct.ID)
			if e.Estimated || e.Usage.Input != int64(len(tt.upstream)+7)/8 || e.Usage.Output != 12+reasoningTokens || e.Usage.Reasoning != reasoningTokens || e.Cost == 0 {
				t.Fatalf("ledger entry %+v; want the vendor's %d in, %d out, not estimated", e, (len(tt.upstream)+7)/8, 12+reasoningTokens)
			}
		})
	}

	// A client that asked for usage: the body and the stream pass as they are.
	acct := s.NewAccount(10, noLimits)
	body := []byte(`{"model":"` + reasoningModel + `","stream":true,` + usageOption + `,` + messages + `}`)
	status, client := post(t, s.URL+betaPath, "Bearer "+acct.Key, body, false)
	if rec := s.Primary.LastRequest(config.FormatChatCompletions, "/v1/chat/completions"); status != 200 || !bytes.Equal(rec.Body, body) {
		t.Fatalf("%d; vendor received %s", status, rec.Body)
	}
	if n := bytes.Count(client, []byte(`"usage":null`)); n != 14 || !bytes.Contains(client, []byte(`"reasoning_tokens":377`)) {
		t.Fatalf("client asked for usage and got %d usage:null chunks:\n%s", n, client)
	}
	if e := waitLedgerEntry(t, s, acct.ID); e.Estimated || e.Usage.Output != 12+reasoningTokens || e.Usage.Reasoning != reasoningTokens {
		t.Fatalf("ledger entry %+v", e)
	}
}

// post sends body, with a content-length or chunked, and reads the reply.
func post(t *testing.T, url, auth string, body []byte, chunked bool) (int, []byte) {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if chunked {
		r = io.MultiReader(r) // no known length: sent chunked
	}
	req, err := http.NewRequestWithContext(context.Background(), "POST", url, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

var (
	sseComment   = regexp.MustCompile(`(?m)^:[^\n]*\n`)
	perRequestID = regexp.MustCompile(`"(id|created)":("[^"]*"|[0-9]+)`)
)

// sameRequest blanks what differs between two replies to the same request:
// ids, timestamps, and the fake's timing comments (which SSE clients skip).
func sameRequest(stream []byte) []byte {
	return perRequestID.ReplaceAll(sseComment.ReplaceAll(stream, nil), []byte(`"$1":"…"`))
}
