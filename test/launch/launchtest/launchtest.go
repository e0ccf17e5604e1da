// Package launchtest is launch for tests: each helper fails the test
// instead of returning an error, skips under -short (make unit has no
// Envoy, Redis or Python), and stops what it started when the test ends.
package launchtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
)

// Start starts a whole stack (redis-server unless the options name one,
// fake vendors, the sidecar, Envoy) and stops it when the test ends,
// printing the sidecar's and Envoy's logs if the test failed.
func Start(tb testing.TB, o launch.Options) *launch.Stack {
	tb.Helper()
	skipShort(tb)
	var rs *redistest.Server
	if o.RedisAddr == "" && len(o.RedisCluster) == 0 && !o.Bare && o.ExtProcAddr == "" {
		// A redistest server can be stopped and started on its port.
		rs = redistest.NewServer(tb)
		o.RedisAddr = rs.Addr
	}
	if o.Dir == "" {
		o.Dir = tb.TempDir()
	}
	s, err := launch.Up(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Log(s.Logs())
		}
		s.Close()
	})
	s.T, s.Primary.T, s.Reserve.T = tb, tb, tb
	if rs != nil {
		s.Redis = rs
	}
	return s
}

// EnvoyBinary is the Envoy the stack runs (ENVOY_BIN, the project's .venv,
// PATH).
func EnvoyBinary(tb testing.TB) string {
	tb.Helper()
	skipShort(tb)
	p, err := launch.FindEnvoy()
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// EnvoyValidate runs `envoy --mode validate` on a bootstrap: every typed
// config and field is checked, no port is opened.
func EnvoyValidate(tb testing.TB, name string, boot []byte) {
	tb.Helper()
	bin := EnvoyBinary(tb)
	path := filepath.Join(tb.TempDir(), name)
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, "--mode", "validate", "-c", path, "--disable-hot-restart", "--log-level", "warn")
	// Envoy reads the vendor keys from its environment at start.
	cmd.Env = append(os.Environ(), "ALPHA_API_KEY=test-alpha", "BETA_API_KEY=test-beta")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("OK")) {
		tb.Errorf("envoy rejects %s: %v\n%s", name, err, out)
	}
}

// Binary is one of the project's commands, built once per test process.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	p, err := launch.BuildBinary(name)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// Postgres starts a PostgreSQL server of its own for the test and removes
// it when the test ends, printing its log if the test failed.
func Postgres(tb testing.TB) *launch.Postgres {
	tb.Helper()
	skipShort(tb)
	pg, err := launch.StartPostgres("") // the test's own directory is not the server user's to enter
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Log(pg.Proc.Tail(40))
		}
		pg.Remove()
	})
	return pg
}

// RepoRoot is the module root.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	r, err := launch.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	return r
}

func skipShort(tb testing.TB) {
	if testing.Short() {
		tb.Skip("starts real processes (Envoy, redis-server): skipped by -short (make unit)")
	}
}

// Freeze stops p (SIGSTOP) and returns once every one of its threads is
// stopped: kill(2) returns when the signal is queued, and on a busy machine
// a thread already running can answer one more message before the group
// stop reaches it. p is continued when the test ends.
func Freeze(tb testing.TB, p *launch.Process) {
	tb.Helper()
	p.Signal(syscall.SIGSTOP)
	tb.Cleanup(func() { p.Signal(syscall.SIGCONT) })
	eventually.That(tb, 10*time.Second, p.Name+" stopped", func() (bool, string) {
		n, err := p.RunningThreads()
		return err == nil && n == 0, fmt.Sprintf("%d thread(s) running (%v)", n, err)
	})
}
