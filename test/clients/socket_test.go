package clients

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// codexBuiltin writes a Codex home whose built-in OpenAI provider is
// repointed at the gateway with openai_base_url.
func codexBuiltin(t *testing.T, s *launch.Stack) string {
	t.Helper()
	home := t.TempDir()
	conf := `model = "` + codexModel + `"
openai_base_url = "` + s.URL + `/beta/v1"
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// codex exec with its built-in OpenAI provider repointed at the gateway
// (openai_base_url) speaks the Responses API's WebSocket transport: a
// two-turn session (the fake vendor calls a tool Codex offers, Codex runs
// it and sends its output back) on one socket, with no fallback to HTTP.
// Each response is in the ledger as a websocket response, billed from the
// fake's usage at the catalogue's prices.
func TestCodexExecWebSocket(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, account.Limits{})
	s.Primary.Control(map[string]any{"tool_call": true})
	home := codexBuiltin(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := run(t, ctx, t.TempDir(), []string{"CODEX_HOME=" + home, "CODEX_API_KEY=" + acct.Key, "HOME=" + home},
		"codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only", "List the files here")
	posts := s.Primary.RequestsTo(config.FormatChatCompletions, "/v1/responses")
	var creates, httpPosts, handshakes int
	for _, r := range posts {
		switch r.Method {
		case "WS":
			creates++
		case "POST":
			httpPosts++
		case "GET":
			handshakes++
		}
	}
	if httpPosts != 0 {
		t.Errorf("codex fell back to HTTP: %d POST /v1/responses", httpPosts)
	}
	if creates < 2 {
		t.Fatalf("%d responses on the socket, want the two turns of a tool call; codex said:\n%s", creates, out)
	}
	entries := checkLedger(t, s, acct.ID, creates)
	price := cataloguePrices(t, s.Config.Catalogue, codexModel)
	for _, e := range entries {
		if e.Transport != "websocket" || e.Requested != codexModel {
			t.Errorf("ledger entry %+v: want a %s response over the socket", e.Settlement, codexModel)
		}
		if want := price(e.Usage.Input, e.Usage.CacheRead, e.Usage.Output); e.Cost != want {
			t.Errorf("ledger entry cost %d nano-USD, the catalogue says %d (%+v)", e.Cost, want, e.Usage)
		}
	}
	t.Logf("codex exec over the socket: %d handshakes, %d responses billed\n%s", handshakes, creates, out)
	if !strings.Contains(out, "Echo") {
		t.Logf("codex's output has no Echo: %s", out)
	}
}

// An upstream whose vendor does not speak WebSocket has the upgrade
// answered 426 Upgrade Required: codex exec falls back to HTTP at once,
// without the reconnection attempts it makes on other statuses, and its
// responses are billed as HTTP streams.
func TestCodexFallsBackOn426(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, account.Limits{})
	for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
		f.Control(map[string]any{"no_websocket": true})
	}
	home := codexBuiltin(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := run(t, ctx, t.TempDir(), []string{"CODEX_HOME=" + home, "CODEX_API_KEY=" + acct.Key, "HOME=" + home},
		"codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only", "Say hello to the gateway")
	if !strings.Contains(out, "Echo:") {
		t.Fatalf("codex did not print the model's reply:\n%s", out)
	}
	if strings.Contains(out, "Reconnecting") {
		t.Errorf("codex retried the socket before falling back:\n%s", out)
	}
	posts := 0
	for _, r := range s.Primary.RequestsTo(config.FormatChatCompletions, "/v1/responses") {
		if r.Method == "POST" {
			posts++
		}
	}
	for _, e := range checkLedger(t, s, acct.ID, posts) {
		if e.Transport != "" {
			t.Errorf("ledger entry %+v: want an HTTP stream", e.Settlement)
		}
	}
	t.Logf("codex after 426:\n%s", out)
}

// The OpenAI Agents SDK's WebSocket model (agents_socket.mjs): two runs of
// an agent on one socket, the second continuing the first; both responses
// billed exactly as websocket responses, none over HTTP.
func TestAgentsSDKWebSocketModel(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, account.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(launchtest.RepoRoot(t), "test", "clients")
	out := run(t, ctx, dir, []string{"GATEWAY_URL=" + s.URL, "GATEWAY_API_KEY=" + acct.Key, "GATEWAY_RESPONSES_MODEL=" + codexModel},
		"node", "agents_socket.mjs")
	if !strings.Contains(out, `"first":"Echo:`) || !strings.Contains(out, `"second":"Echo:`) {
		t.Fatalf("agents did not print both replies:\n%s", out)
	}
	var creates, posts int
	for _, r := range s.Primary.RequestsTo(config.FormatChatCompletions, "/v1/responses") {
		switch r.Method {
		case "WS":
			creates++
		case "POST":
			posts++
		}
	}
	if creates != 2 || posts != 0 {
		t.Fatalf("%d responses on the socket and %d over HTTP, want 2 and 0:\n%s", creates, posts, out)
	}
	price := cataloguePrices(t, s.Config.Catalogue, codexModel)
	for _, e := range checkLedger(t, s, acct.ID, 2) {
		if e.Transport != "websocket" {
			t.Errorf("ledger entry %+v: want a websocket response", e.Settlement)
		}
		if want := price(e.Usage.Input, e.Usage.CacheRead, e.Usage.Output); e.Cost != want {
			t.Errorf("ledger entry cost %d nano-USD, the catalogue says %d (%+v)", e.Cost, want, e.Usage)
		}
	}
	t.Logf("agents over the socket:\n%s", out)
}
