package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// delivery is one webhook request as a receiver got it.
type delivery struct {
	Secret  string            `json:"secret"` // as the receiver configures the official library
	Body    string            `json:"body"`
	Headers map[string]string `json:"headers"`
}

// The gateway's webhook signatures verify with the official Standard
// Webhooks library (Python standardwebhooks, pinned in requirements.txt),
// through the recipe in docs/limits.md: with a whsec_ secret as given to
// the gateway, and with a secret configured before the prefix was
// supported, as "whsec_" + its base64.
func TestWebhookSignaturesStandardWebhooks(t *testing.T) {
	root := launchtest.RepoRoot(t)
	python := filepath.Join(root, ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("%s not found: run make envoy (it installs requirements.txt into .venv)", python)
	}
	recipe := filepath.Join(t.TempDir(), "recipe.py")
	if err := os.WriteFile(recipe, []byte(docsBlock(t, filepath.Join(root, "docs", "limits.md"), "python")), 0o600); err != nil {
		t.Fatal(err)
	}

	key := make([]byte, 32)
	rand.Read(key)
	standard := "whsec_" + base64.StdEncoding.EncodeToString(key)
	const legacy = "raw-secret-before-whsec-7d1e" // no prefix: its own bytes
	receiver := func(secret string) (*httptest.Server, chan delivery) {
		got := make(chan delivery, 10)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			h := map[string]string{}
			for _, name := range []string{alerts.HeaderID, alerts.HeaderTimestamp, alerts.HeaderSignature, "content-type"} {
				h[name] = r.Header.Get(name)
			}
			got <- delivery{Secret: secret, Body: string(body), Headers: h}
		}))
		t.Cleanup(srv.Close)
		return srv, got
	}
	// The receivers configure the library as docs/limits.md says.
	newRecv, newGot := receiver(standard)
	oldRecv, oldGot := receiver("whsec_" + base64.StdEncoding.EncodeToString([]byte(legacy)))
	s := launchtest.Start(t, launch.Options{
		Configure: func(c *config.Config) {
			c.Alerts.Interval = config.Duration(200 * time.Millisecond)
			c.Alerts.Webhooks = []config.Webhook{
				{URL: newRecv.URL, SecretEnv: "GATEWAY_WEBHOOK_SECRET", Events: []string{alerts.BalanceLow}},
				{URL: oldRecv.URL, SecretEnv: "GATEWAY_WEBHOOK_SECRET_OLD", Events: []string{alerts.BalanceLow}},
			}
		},
		SidecarEnv: []string{"GATEWAY_WEBHOOK_SECRET=" + standard, "GATEWAY_WEBHOOK_SECRET_OLD=" + legacy},
	})
	acct := s.NewAccount(1, noLimits)
	if err := s.Store.SetBalanceAlert(context.Background(), acct.ID, 2_000_000_000); err != nil { // above the balance: fires now
		t.Fatal(err)
	}
	var ds []delivery
	for _, got := range []chan delivery{newGot, oldGot} {
		select {
		case d := <-got:
			ds = append(ds, d)
		case <-time.After(30 * time.Second):
			t.Fatal("no delivery within 30 s")
		}
	}
	in, _ := json.Marshal(ds)
	cmd := exec.Command(python, filepath.Join(root, "test", "e2e", "testdata", "verify_webhooks.py"), recipe)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "2 deliveries verified") {
		t.Fatalf("standardwebhooks: %v\n%s", err, out)
	}
}

// docsBlock returns the first fenced block of lang in a markdown file.
func docsBlock(t *testing.T, path, lang string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n```"+lang+"\n")
	block, _, closed := strings.Cut(rest, "\n```\n")
	if !ok || !closed {
		t.Fatalf("no %s block in %s", lang, path)
	}
	return block + "\n"
}
