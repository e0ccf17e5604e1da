// Package conformance runs the vendors' official Python SDKs (anthropic and
// openai, pinned in requirements.txt) as real clients against the whole
// gateway: real Envoy, the sidecar, redis-server and the fake vendors, all
// started once by the test/launch harness. The cases themselves are pytest
// files in this directory; this Go test starts the stack, creates the
// accounts the cases need, hands everything over in environment variables
// and fails when pytest fails.
package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Models the cases call: served by the fake vendors, priced in gateway.yaml,
// and not deprecated in the pinned SDKs (anthropic warns on
// claude-sonnet-4-5, and warnings fail the suite).
const (
	alphaModel = "claude-haiku-4-5"
	betaModel  = "gpt-4o-mini"
	// A reasoning model, and the reasoning tokens the fake reports for it
	// (hidden from the text) in the cases that call it.
	reasoningModel  = "o4-mini"
	reasoningTokens = 377
	// Served on the Responses API only, and an embedding model.
	responsesModel = "gpt-5.1-codex"
	embeddingModel = "text-embedding-3-small"
)

func TestOfficialSDKs(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Python, Envoy and redis-server: skipped by -short (make unit)")
	}
	root := launchtest.RepoRoot(t)
	python := filepath.Join(root, ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s not found: run make envoy (it installs the SDKs and pytest into .venv)", python)
	}

	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, account.Limits{})
	// One nano-USD covers no request, and its refusal comes after the
	// body (a balance of 0 is refused at the headers, before a body's
	// other faults are looked at): the cases naming another account's
	// response see its 404.
	poor := s.NewAccount(1e-9, account.Limits{})
	// One rate-limited account per SDK, so that the cases do not depend on
	// each other's order: each spends the one request of its window, then
	// sees 429.
	limitedA := s.NewAccount(10, account.Limits{RPM: 1, WindowMinutes: 1})
	limitedB := s.NewAccount(10, account.Limits{RPM: 1, WindowMinutes: 1})
	// The reasoning cases' own account, whose ledger is checked below.
	reasoning := s.NewAccount(10, account.Limits{})
	refusals := refusalKeys(t, s)

	prices := map[string]map[string]int64{}
	book, err := pricing.NewBook(s.Config, operations.All.Modes())
	if err != nil {
		t.Fatal(err)
	}
	for model, upstream := range map[string]string{alphaModel: "alpha", betaModel: "beta", reasoningModel: "beta", responsesModel: "beta", embeddingModel: "beta"} {
		if book[upstream] == nil {
			t.Fatalf("no upstream %s in gateway.yaml", upstream)
		}
		p, ok := book[upstream].Lookup(model)
		if !ok {
			t.Fatalf("no price for %s", model)
		}
		// nano-USD per million tokens, as the gateway computes with, at the
		// standard tier and prompt length.
		r, _ := p.RatesFor(0, "")
		prices[model] = map[string]int64{
			"input": r.Input, "output": r.Output, "cache_write": r.CacheWrite5m, "cache_read": r.CacheRead,
		}
	}
	pricesJSON, err := json.Marshal(prices)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "-m", "pytest", "test/conformance", "-q",
		"-p", "no:cacheprovider", "-W", "error", "--color=no")
	cmd.Dir = root
	cmd.Env = append(cleanEnv(os.Environ()),
		"GATEWAY_URL="+s.URL,
		"GATEWAY_KEY="+acct.Key,
		"GATEWAY_READONLY="+acct.ReadOnly,
		"GATEWAY_POOR_KEY="+poor.Key,
		"GATEWAY_LIMITED_ALPHA_KEY="+limitedA.Key,
		"GATEWAY_LIMITED_ALPHA_READONLY="+limitedA.ReadOnly,
		"GATEWAY_LIMITED_BETA_KEY="+limitedB.Key,
		"GATEWAY_LIMITED_BETA_READONLY="+limitedB.ReadOnly,
		"GATEWAY_PRICES="+string(pricesJSON),
		"GATEWAY_ALPHA_MODEL="+alphaModel,
		"GATEWAY_BETA_MODEL="+betaModel,
		"GATEWAY_REASONING_MODEL="+reasoningModel,
		"GATEWAY_RESPONSES_MODEL="+responsesModel,
		"GATEWAY_REASONING_TOKENS="+strconv.Itoa(reasoningTokens),
		"GATEWAY_REASONING_KEY="+reasoning.Key,
		"GATEWAY_REASONING_READONLY="+reasoning.ReadOnly,
		"GATEWAY_REFUSAL_KEYS="+refusals,
		"FAKE_PRIMARY_CONTROL=http://"+s.Primary.Addrs.Control,
		// The vendor itself, for what it sends without the gateway.
		"FAKE_PRIMARY_CHAT_COMPLETIONS=http://"+s.Primary.Addrs.ChatCompletions,
		"FAKE_CHAT_COMPLETIONS_KEY="+launch.BetaVendorKey,
		"FAKE_RESERVE_CONTROL=http://"+s.Reserve.Addrs.Control,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("pytest failed (%v):\n%s", err, out.String())
	}
	t.Logf("pytest:\n%s", out.String())

	// The reasoning streams were sent without include_usage; the ledger has
	// the vendor's own figures for them, reasoning tokens included, not an
	// estimate from the visible text (12 words).
	entries, _, err := s.Store.Ledger(ctx, reasoning.ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) == 0 && os.Getenv("PYTEST_ADDOPTS") == "" {
		t.Fatal("no ledger entry for the reasoning cases")
	}
	for _, e := range entries {
		if e.Estimated || !e.Stream || e.Requested != reasoningModel || e.Usage.Output != 12+reasoningTokens || e.Usage.Reasoning != reasoningTokens {
			t.Errorf("ledger entry %+v; want the vendor's %d output tokens, not estimated", e, 12+reasoningTokens)
		}
	}
}

// refusalKeys creates the keys of the refusal cases (test_refusals.py), one
// account each so that no case depends on another's spend, and returns them
// as JSON by refusal kind: each key is refused on its first request by the
// one limit its kind names (a budget of 1 nano-USD is below any hold; a
// tokens-per-minute limit of 100 is below any request's token bound), and
// the rpm keys, one per SDK, admit two requests in two minutes.
func refusalKeys(t *testing.T, s *launch.Stack) string {
	t.Helper()
	ctx := context.Background()
	keys := map[string]string{
		"daily": s.NewAccount(10, account.Limits{DailyNanoUSD: 1}).Key,
		// Not 0: the refusal after the body names what the request
		// could cost (a balance of 0 is refused at the headers).
		"balance": s.NewAccount(1e-9, account.Limits{}).Key,
	}
	for kind, l := range map[string]account.Limits{
		"monthly":  {MonthlyNanoUSD: 1},
		"lifetime": {TotalNanoUSD: 1},
		"tpm":      {TPM: 100},
	} {
		a := s.NewAccount(10, account.Limits{})
		k, _, err := s.Store.CreateKey(ctx, a.ID, account.ModelKey, account.KeyOptions{Label: kind, Limits: l})
		if err != nil {
			t.Fatal(err)
		}
		keys[kind] = k
	}
	for _, sdk := range []string{"rpm_alpha", "rpm_beta"} {
		keys[sdk] = s.NewAccount(10, account.Limits{RPM: 1, WindowMinutes: 1}).Key
	}
	b, err := json.Marshal(keys)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// cleanEnv drops variables that would make the SDKs talk to anything but
// the stack or pick up credentials or settings of their own.
// PYTEST_ADDOPTS is kept: PYTEST_ADDOPTS="-v -k retry" narrows a local run.
func cleanEnv(env []string) []string {
	drop := []string{
		"ANTHROPIC_", "OPENAI_", "HTTP_PROXY=", "HTTPS_PROXY=", "ALL_PROXY=",
		"http_proxy=", "https_proxy=", "all_proxy=",
	}
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, p := range drop {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
