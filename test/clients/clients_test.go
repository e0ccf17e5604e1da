// Package clients runs the vendors' own JavaScript clients, pinned in
// package.json and installed by `make clients` (npm ci into this
// directory), against the whole gateway: the OpenAI JavaScript SDK
// (responses.mjs) and the Codex CLI, whose launcher needs Node 22 (the npm
// package node@22 provides it). The OpenAI Python SDK's Responses API cases
// live with the other Python cases in test/conformance.
package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// codexModel is served on the responses operation only.
const codexModel = "gpt-5.1-codex"

// nodeBin is the directory of the pinned clients' executables.
func nodeBin(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(launchtest.RepoRoot(t), "test", "clients", "node_modules", ".bin")
	for _, exe := range []string{"node", "codex"} {
		if _, err := os.Stat(filepath.Join(dir, exe)); err != nil {
			t.Fatalf("%s not installed: run make clients", exe)
		}
	}
	return dir
}

// run runs a client with PATH led by the pinned Node and returns its
// output; the test fails if it fails.
func run(t *testing.T, ctx context.Context, dir string, env []string, name string, args ...string) string {
	t.Helper()
	bin := nodeBin(t)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, name), args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(os.Environ()), append(env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// cleanEnv drops variables that would make the clients talk to anything
// but the stack or pick up credentials or settings of their own.
func cleanEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if strings.HasPrefix(kv, "OPENAI_") || strings.HasPrefix(kv, "CODEX_") || strings.HasPrefix(strings.ToUpper(kv), "HTTP_PROXY=") ||
			strings.HasPrefix(strings.ToUpper(kv), "HTTPS_PROXY=") || strings.HasPrefix(strings.ToUpper(kv), "ALL_PROXY=") || strings.HasPrefix(kv, "PATH=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// checkLedger fails t unless every ledger entry of the account is a 2xx
// reply billed exactly at the gateway's rates for its usage, not
// estimated, and there are want of them.
func checkLedger(t *testing.T, s *launch.Stack, accountID string, want int) []ledger.Entry {
	t.Helper()
	entries, _, err := s.Store.Ledger(context.Background(), accountID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != want {
		t.Errorf("%d ledger entries, want %d", len(entries), want)
	}
	for _, e := range entries {
		if e.Status != 200 || e.Estimated || e.Cost == 0 || e.Cost != pricing.Cost(e.Usage, pricing.Rates(e.Rates)) {
			t.Errorf("ledger entry %+v: want a 200 reply billed exactly from the vendor's usage", e.Settlement)
		}
	}
	return entries
}

// cataloguePrices returns the cost in nano-USD, rounded up, of input,
// cache-read and output tokens at a model's standard catalogue prices, read
// from the catalogue file itself.
func cataloguePrices(t *testing.T, path, model string) func(input, cacheRead, output int64) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var all map[string]map[string]any
	if err := dec.Decode(&all); err != nil {
		t.Fatal(err)
	}
	e := all[model]
	rat := func(field string) *big.Rat {
		n, ok := e[field].(json.Number)
		if !ok {
			t.Fatalf("%s: no %s in the catalogue", model, field)
		}
		r, _ := new(big.Rat).SetString(n.String())
		return r
	}
	in, cached, out := rat("input_cost_per_token"), rat("cache_read_input_token_cost"), rat("output_cost_per_token")
	return func(input, cacheRead, output int64) int64 {
		sum := new(big.Rat).Mul(big.NewRat(input, 1), in)
		sum.Add(sum, new(big.Rat).Mul(big.NewRat(cacheRead, 1), cached))
		sum.Add(sum, new(big.Rat).Mul(big.NewRat(output, 1), out))
		sum.Mul(sum, big.NewRat(1_000_000_000, 1))
		n := new(big.Int).Quo(sum.Num(), sum.Denom())
		if new(big.Rat).SetInt(n).Cmp(sum) != 0 {
			n.Add(n, big.NewInt(1))
		}
		return n.Int64()
	}
}

// codex exec, with a model provider whose base_url is the gateway's /beta/v1,
// completes a prompt against the fake vendor; each of its requests is in
// the ledger, billed from the fake's usage at the catalogue's prices.
func TestCodexExec(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, account.Limits{})
	home := t.TempDir()
	codexConfig := `model = "` + codexModel + `"
model_provider = "gateway"
[model_providers.gateway]
name = "Model gateway"
base_url = "` + s.URL + `/beta/v1"
env_key = "GATEWAY_API_KEY"
wire_api = "responses"
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(codexConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := run(t, ctx, work, []string{"CODEX_HOME=" + home, "GATEWAY_API_KEY=" + acct.Key, "HOME=" + home},
		"codex", "exec", "--skip-git-repo-check", "--sandbox", "read-only", "Say hello to the gateway")
	if !strings.Contains(out, "Echo:") {
		t.Fatalf("codex did not print the model's reply:\n%s", out)
	}
	entries := checkLedger(t, s, acct.ID, len(s.Primary.RequestsTo(config.FormatChatCompletions, "/v1/responses")))
	price := cataloguePrices(t, s.Config.Catalogue, codexModel)
	for _, e := range entries {
		if e.Requested != codexModel || !e.Stream {
			t.Errorf("ledger entry %+v: want a %s stream", e.Settlement, codexModel)
		}
		// The catalogue's own figures, read here, not the gateway's.
		if want := price(e.Usage.Input, e.Usage.CacheRead, e.Usage.Output); e.Cost != want {
			t.Errorf("ledger entry cost %d nano-USD, the catalogue says %d (%+v)", e.Cost, want, e.Usage)
		}
	}
	if len(entries) == 0 {
		t.Fatalf("no request reached the ledger; codex said:\n%s", out)
	}
	t.Logf("codex exec: %d requests billed\n%s", len(entries), out)
}

// The OpenAI JavaScript SDK (responses.mjs): responses.create JSON and
// streamed, retrieve, input_items.list, input_tokens.count, a continued
// turn, compact, a background response polled to its end and one
// cancelled, delete and embeddings.create; another account gets 404 on
// every path naming the first one's responses, and the vendor sees none of
// those requests. Every metered call is in the ledger, billed exactly at
// the gateway's rates from the vendor's usage; nothing else is.
func TestOpenAIJavaScriptSDK(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, account.Limits{})
	other := s.NewAccount(100, account.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(launchtest.RepoRoot(t), "test", "clients")
	out := run(t, ctx, dir, []string{"GATEWAY_URL=" + s.URL, "GATEWAY_KEY=" + acct.Key, "GATEWAY_OTHER_KEY=" + other.Key,
		"GATEWAY_RESPONSES_MODEL=" + codexModel, "GATEWAY_EMBEDDING_MODEL=text-embedding-3-small"}, "node", "responses.mjs")
	t.Logf("responses.mjs: %s", out)
	// create, stream, continued turn, compact, two background responses,
	// embeddings.
	entries := checkLedger(t, s, acct.ID, 7)
	kinds := map[string]int{}
	for _, e := range entries {
		kinds[string(e.Requested)]++
	}
	if kinds[codexModel] != 6 || kinds["text-embedding-3-small"] != 1 {
		t.Errorf("ledger by model %v", kinds)
	}
	if o, _, _ := s.Store.Ledger(ctx, other.ID, "", 10); len(o) != 0 {
		t.Errorf("the other account was billed: %+v", o)
	}
	for _, r := range s.Primary.Requests() {
		if strings.Contains(strings.Join(r.Headers["Authorization"], ""), other.Key) || strings.Contains(string(r.Body), "steal") {
			t.Errorf("the vendor received the other account's %s %s", r.Method, r.Path)
		}
	}
}
