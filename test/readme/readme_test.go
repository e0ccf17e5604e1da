// Package readme checks a newcomer's first hour: the README's shell and
// Python snippets run as pasted against a gateway started the way `make run`
// starts it (`bin/gateway-local --config gateway.yaml` in a checkout), and a
// taken port is reported in one line.
package readme

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/test/launch"
)

// checkout is a directory laid out like a checkout after `make build`:
// gateway.yaml (the repository's, listeners moved to free ports), bin/,
// .venv and .cache. addrs are the listeners it was given.
type checkout struct {
	dir   string
	addrs map[string]string
	env   []string
}

var listenerKeys = []string{"public", "probes", "envoy_admin", "extproc", "control", "admin", "console"}

func newCheckout(t *testing.T, set map[string]string) *checkout {
	t.Helper()
	if testing.Short() {
		t.Skip("starts Envoy, the sidecar and Python: the end-to-end tier")
	}
	root, err := launch.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var binDir string
	for _, name := range []string{"gateway", "gateway-local", "gatewayctl", "fakevendor"} {
		p, err := launch.BuildBinary(name)
		if err != nil {
			t.Fatal(err)
		}
		binDir = filepath.Dir(p)
	}
	envoyBin, err := launch.FindEnvoy()
	if err != nil {
		t.Fatal(err)
	}
	c := &checkout{dir: t.TempDir(), addrs: map[string]string{}}
	for link, target := range map[string]string{"bin": binDir, ".venv": filepath.Join(root, ".venv"), ".cache": filepath.Join(root, ".cache")} {
		if err := os.Symlink(target, filepath.Join(c.dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	yaml, err := os.ReadFile(filepath.Join(root, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	free, err := launch.FreeAddrs(len(listenerKeys))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range listenerKeys {
		addr := free[i]
		if a, ok := set[k]; ok {
			addr = a
		}
		// Every listener the run binds must be in the shipped file, where
		// an operator moves it.
		re := regexp.MustCompile(`(?m)^(  ` + k + `: )\S+`)
		if n := len(re.FindAllIndex(yaml, -1)); n != 1 {
			t.Fatalf("gateway.yaml sets listeners.%s %d times; want once", k, n)
		}
		yaml = re.ReplaceAll(yaml, []byte("${1}"+addr))
		c.addrs[k] = addr
	}
	if err := os.WriteFile(filepath.Join(c.dir, "gateway.yaml"), yaml, 0o644); err != nil {
		t.Fatal(err)
	}
	// The environment of a fresh shell: nothing the demo would otherwise
	// provide, no vendor keys or store.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GATEWAY_") || strings.HasPrefix(k, "DEMO_") || strings.HasPrefix(k, "ALPHA_") ||
			strings.HasPrefix(k, "BETA_") || strings.HasPrefix(k, "REDIS_") {
			continue
		}
		c.env = append(c.env, kv)
	}
	c.env = append(c.env, "ENVOY_BIN="+envoyBin)
	return c
}

// run starts `bin/gateway-local --config gateway.yaml` in the checkout.
func (c *checkout) run(ctx context.Context, t *testing.T) (*exec.Cmd, io.Reader, *strings.Builder) {
	t.Helper()
	return c.runWith(ctx, t, "--config", "gateway.yaml")
}

// runWith starts bin/gateway-local with args in the checkout.
func (c *checkout) runWith(ctx context.Context, t *testing.T, args ...string) (*exec.Cmd, io.Reader, *strings.Builder) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bin/gateway-local", args...)
	cmd.Dir, cmd.Env = c.dir, c.env
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &strings.Builder{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdout, stderr
}

// block is one fenced code block of the README.
type block struct {
	lang, text string
	line       int
}

func readmeBlocks(t *testing.T) []block {
	t.Helper()
	root, err := launch.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var out []block
	var cur *block
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case cur == nil && strings.HasPrefix(l, "```"):
			cur = &block{lang: strings.TrimPrefix(l, "```"), line: i + 1}
		case cur != nil && l == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	return out
}

// TestReadmeSnippetsRun starts the gateway as `make run` does and runs every
// shell and Python snippet of the README as pasted, in a shell that sourced
// nothing else.
func TestReadmeSnippetsRun(t *testing.T) {
	c := newCheckout(t, nil)
	// A log of an earlier run must not survive into this one.
	if err := os.MkdirAll(filepath.Join(c.dir, ".run"), 0o755); err != nil {
		t.Fatal(err)
	}
	const stale = "a line of an earlier run"
	if err := os.WriteFile(filepath.Join(c.dir, ".run", "envoy.log"), []byte(stale+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, stdout, stderr := c.run(ctx, t)
	defer func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("gateway-local stderr:\n%s", stderr)
		}
	}()
	// The banner ends with this line once everything serves.
	var banner strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		banner.WriteString(sc.Text() + "\n")
		if sc.Text() == "Press Ctrl-C to stop." {
			break
		}
	}
	if !strings.Contains(banner.String(), "Press Ctrl-C to stop.") {
		t.Fatalf("gateway-local ended before serving:\n%s", banner.String())
	}
	go io.Copy(io.Discard, stdout)

	envFile, err := os.ReadFile(filepath.Join(c.dir, ".run", "demo.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(string(envFile)), "\n") {
		if !strings.HasPrefix(l, "export ") {
			t.Errorf("demo.env line %q does not export its variable", strings.SplitN(l, "=", 2)[0])
		}
	}
	if log, _ := os.ReadFile(filepath.Join(c.dir, ".run", "envoy.log")); strings.Contains(string(log), stale) {
		t.Error("envoy.log still holds the previous run's lines")
	}

	// The README's models are the ones `make run` prints.
	model := regexp.MustCompile(`"model":\s*"([^"]+)"|model="([^"]+)"`)
	models := func(s string) []string {
		var out []string
		for _, m := range model.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1]+m[2])
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	blocks := readmeBlocks(t)
	var all strings.Builder
	for _, b := range blocks {
		all.WriteString(b.text)
	}
	if got, want := models(all.String()), models(banner.String()); !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("README calls models %v; make run prints %v", got, want)
	}

	ran := 0
	for _, b := range blocks {
		var script string
		switch b.lang {
		case "sh":
			if onlyMake(b.text) {
				continue // the two commands themselves
			}
			script = b.text
		case "python":
			if err := os.WriteFile(filepath.Join(c.dir, "snippet.py"), []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			// As the README says: source the file, then run Python.
			script = "source .run/demo.env\n.venv/bin/python snippet.py\n"
		default:
			continue
		}
		ran++
		sh := exec.CommandContext(ctx, "bash", "-eu", "-o", "pipefail", "-c", script)
		sh.Dir, sh.Env = c.dir, c.env
		out, err := sh.CombinedOutput()
		if err != nil {
			t.Errorf("README.md:%d (%s) failed: %v\n%s", b.line, b.lang, err, out)
			continue
		}
		for _, want := range expected(b) {
			if !strings.Contains(string(out), want) {
				t.Errorf("README.md:%d (%s): output lacks %q:\n%s", b.line, b.lang, want, out)
			}
		}
		if strings.Contains(string(out), `"error"`) {
			t.Errorf("README.md:%d (%s): an error in the output:\n%s", b.line, b.lang, out)
		}
	}
	if ran < 3 {
		t.Fatalf("ran %d snippets; the README has curl, Python and gatewayctl examples", ran)
	}

	// A path outside the routes: one error, encoded once.
	resp, err := http.Get("http://" + c.addrs["public"] + "/nope")
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Error struct{ Type, Message string }
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(body, &e); err != nil || resp.StatusCode != 404 || e.Error.Type != "not_found" ||
		strings.HasPrefix(e.Error.Message, "{") || resp.Header.Get("content-type") != "application/json" {
		t.Errorf("GET /nope: %d %s", resp.StatusCode, body)
	}
}

// expected lists what a snippet's output must show, by what it calls.
func expected(b block) []string {
	var want []string
	for _, x := range []struct{ call, shows string }{
		{"/alpha/v1/messages", `"type":"message"`},
		{"/beta/v1/chat/completions", "data: [DONE]"},
		{"/v1/usage", `"balance_usd"`},
		{"/health", `"status":"ok"`},
		{"keys create", "cr_"},
		{"ledger $ACCOUNT_ID", "ID"},
	} {
		if strings.Contains(b.text, x.call) {
			want = append(want, x.shows)
		}
	}
	if b.lang == "python" {
		want = append(want, "\n")
	}
	return want
}

func onlyMake(s string) bool {
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if !strings.HasPrefix(l, "make ") {
			return false
		}
	}
	return true
}

// TestPortTaken: with the public port taken, the run stops at once with one
// line naming the address and the setting that moves it.
func TestPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := newCheckout(t, map[string]string{"public": l.Addr().String()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd, stdout, stderr := c.run(ctx, t)
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatal("gateway-local did not stop on a taken port")
	}
	if err == nil {
		t.Fatal("gateway-local succeeded on a taken port")
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Contains(msg, "\n") || !strings.Contains(msg, l.Addr().String()) || !strings.Contains(msg, "listeners.public") {
		t.Fatalf("want one line naming %s and listeners.public; got:\n%s", l.Addr(), msg)
	}
}
