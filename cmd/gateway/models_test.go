package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testConfig writes a gateway.yaml that prices from the pricing package's
// made-up catalogue and returns its path.
func testConfig(t *testing.T, models string) string {
	t.Helper()
	cat, err := filepath.Abs("../../internal/pricing/testdata/catalogue.json")
	if err != nil {
		t.Fatal(err)
	}
	y := `catalogue: ` + cat + `
upstreams:
  - name: alpha
    format: messages
    credential_env: ALPHA_API_KEY
    primary: {url: "http://127.0.0.1:9001"}
    reserve: {url: "http://127.0.0.1:9002"}
    models:
      providers: [anthropic]
      aliases: {claude: fake-claude-1}
      unknown_model: fallback
      fallback: {input: 10, output: 20, max_output: 4096}
  - name: beta
    format: chat_completions
    credential_env: BETA_API_KEY
    primary: {url: "http://127.0.0.1:9003"}
    reserve: {url: "http://127.0.0.1:9004"}
    models:
` + models
	p := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const betaModels = `      providers: [openai]
      overrides:
        fake-gpt-1: {output: 7}
`

func runModels(t *testing.T, args ...string) string {
	t.Helper()
	cmd := modelsCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestModelsJSON(t *testing.T) {
	var rows []modelRow
	if err := json.Unmarshal([]byte(runModels(t, "--config", testConfig(t, betaModels), "--json")), &rows); err != nil {
		t.Fatal(err)
	}
	got := map[string]modelRow{}
	for _, r := range rows {
		got[r.Upstream+"/"+r.Model] = r
	}
	if len(rows) != 6 {
		t.Errorf("%d rows: %+v", len(rows), rows)
	}
	c := got["alpha/fake-claude-1"]
	if c.MaxOutput != 64000 || strings.Join(c.Aliases, ",") != "claude,fake-claude-1-20250101" || c.Source != "catalogue" {
		t.Errorf("fake-claude-1: %+v", c)
	}
	// Standard prices, then the long-context ones.
	if len(c.Prices) != 2 || c.Prices[0].Rates["input"] != 1_000_000_000 || c.Prices[0].Rates["cache_write_1h"] != 3_000_000_000 ||
		c.Prices[0].Rates["web_searches"] != 2_000_000_000_000 || c.Prices[1].Above != 200_000 || c.Prices[1].Rates["input"] != 2_000_000_000 {
		t.Errorf("fake-claude-1 prices: %+v", c.Prices)
	}
	g := got["beta/fake-gpt-1"]
	tiers := map[string]int64{}
	for _, p := range g.Prices {
		if p.Above == 0 {
			tiers[p.Tier] = p.Rates["input"]
		}
		if p.Rates["output"] != 7_000_000_000 {
			t.Errorf("override not applied at %q above %d: %+v", p.Tier, p.Above, p.Rates)
		}
	}
	if g.Source != "override" || tiers[""] != 2_000_000_000 || tiers["priority"] != 4_000_000_000 || tiers["flex"] != 1_000_000_000 {
		t.Errorf("fake-gpt-1: %+v", g)
	}
	if fb := got["alpha/*"]; fb.Source != "fallback" || fb.MaxOutput != 4096 {
		t.Errorf("fallback: %+v", fb)
	}
	if _, ok := got["beta/*"]; ok {
		t.Error("beta rejects unknown models; no fallback row expected")
	}
	if nl := got["beta/fake-gpt-nolimit"]; nl.MaxOutput != 0 || nl.Prices[0].Rates["input"] != 2_500_000 {
		t.Errorf("fake-gpt-nolimit: %+v", nl)
	}
}

func TestModelsTable(t *testing.T) {
	out := runModels(t, "--config", testConfig(t, betaModels))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "UPSTREAM") {
		t.Fatalf("table:\n%s", out)
	}
	var gpt string
	for _, l := range lines {
		if strings.Contains(l, " fake-gpt-1 ") {
			gpt = strings.Join(strings.Fields(l), " ")
		}
	}
	// USD per million tokens: input 2, output 7 (override), cache read 0.5,
	// cache writes at the input price (the catalogue lists none), audio 40 and
	// 80; tiers and the long-context threshold are named, and the operation
	// that serves it (the test configuration has chat completions alone).
	if gpt != "beta fake-gpt-1 chat_completions 100000 2 7 0.5 2 2 40 80 - flex,priority,ultrafast >272k override -" {
		t.Errorf("fake-gpt-1 line: %q", gpt)
	}
}

// A malformed catalogue or configuration is an error, not an empty list.
func TestModelsRefusesBadFiles(t *testing.T) {
	cmd := modelsCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"--config", testConfig(t, "      providers: [openai]\n      aliases: {x: no-such-model}\n")})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "aliases[x]") {
		t.Fatalf("err = %v", err)
	}
}
