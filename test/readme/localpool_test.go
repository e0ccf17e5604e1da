package readme

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/eventually"
)

// `make run CONFIG=pool.yaml` with a pool of vendor keys on an upstream
// (docs/local.md) serves: each key gets a fake secret the fake vendors
// accept, a request goes through, and its ledger entry names a key of the
// pool.
func TestRunWithKeyPool(t *testing.T) {
	c := newCheckout(t, nil)
	yaml, err := os.ReadFile(filepath.Join(c.dir, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pool := strings.Replace(string(yaml), "    credential_env: ALPHA_API_KEY\n",
		"    keys:\n      - {name: org_a, env: ALPHA_ORG_A_KEY}\n      - {name: org_b, env: ALPHA_ORG_B_KEY}\n", 1)
	pool = strings.Replace(pool, "\nenvoy:\n", "\nenvoy:\n  contract: full\n", 1)
	if pool == string(yaml) || !strings.Contains(pool, "contract: full") {
		t.Fatal("gateway.yaml no longer has the lines the pool replaces")
	}
	if err := os.WriteFile(filepath.Join(c.dir, "pool.yaml"), []byte(pool), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, stdout, stderr := c.runWith(ctx, t, "--config", "pool.yaml")
	defer func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("gateway-local stderr:\n%s", stderr)
		}
	}()
	banner := waitBanner(stdout)
	if !strings.Contains(banner, "Press Ctrl-C to stop.") {
		t.Fatalf("gateway-local ended before serving:\n%s", banner)
	}
	go io.Copy(io.Discard, stdout)
	model := regexp.MustCompile(`"model":"([^"]+)"`).FindStringSubmatch(banner)
	acct := regexp.MustCompile(`Demo account (\S+);`).FindStringSubmatch(banner)
	if model == nil || acct == nil {
		t.Fatalf("no model or account in the banner:\n%s", banner)
	}
	env := demoEnv(t, filepath.Join(c.dir, ".run", "demo.env"))

	req, _ := http.NewRequest("POST", env["GATEWAY_URL"]+"/alpha/v1/messages",
		strings.NewReader(`{"model":"`+model[1]+`","max_tokens":16,"messages":[{"role":"user","content":"Hello"}]}`))
	req.Header.Set("x-api-key", env["DEMO_API_KEY"])
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a request over the pool: %d %s", resp.StatusCode, body)
	}

	// The settlement is applied after the reply: read until it is.
	var key string
	eventually.That(t, 10*time.Second, "the request's ledger entry", func() (bool, string) {
		ctl := exec.CommandContext(ctx, "bin/gatewayctl", "ledger", acct[1], "--json")
		ctl.Dir = c.dir
		ctl.Env = append(os.Environ(), "GATEWAY_ADMIN_ADDR="+env["GATEWAY_ADMIN_ADDR"], "GATEWAY_ADMIN_TOKEN="+env["GATEWAY_ADMIN_TOKEN"])
		out, err := ctl.Output()
		var ledger struct {
			Entries []struct {
				VendorKey string `json:"vendor_key"`
			} `json:"entries"`
		}
		if err != nil || json.Unmarshal(out, &ledger) != nil || len(ledger.Entries) != 1 {
			return false, fmt.Sprintf("%v %s", err, out)
		}
		key = ledger.Entries[0].VendorKey
		return true, ""
	})
	if key != "org_a" && key != "org_b" {
		t.Fatalf("served by vendor key %q, not one of the pool's", key)
	}
}

// demoEnv reads the variables demo.env exports.
func demoEnv(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "="); ok {
			env[k] = v
		}
	}
	return env
}
