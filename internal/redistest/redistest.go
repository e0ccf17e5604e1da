// Package redistest runs real redis-server processes for tests: a standalone
// server that can be stopped and started again on the same port, and small
// Redis Clusters, with or without replicas.
//
// redis-server (and redis-cli, for clusters) must be on PATH; the Makefile
// installs them. With GATEWAY_SKIP_REDIS=1 in the environment, tests that need
// them are skipped instead of failed.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/freeport"
)

// startTimeout bounds how long a server may take to answer PING, and a
// cluster to report cluster_state:ok.
const startTimeout = 20 * time.Second

// Server is one redis-server process on a fixed loopback port.
type Server struct {
	Addr string // host:port

	tb   testing.TB
	port int
	dir  string
	args []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a standalone redis-server for the test and returns its address.
// The server is killed when the test ends.
func Start(tb testing.TB) (addr string) {
	tb.Helper()
	return NewServer(tb).Addr
}

// NewServer starts a standalone redis-server for the test. The server is
// killed when the test ends; Stop and Start control it in between.
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	need(tb, "redis-server")
	return newServer(tb, nil)
}

// NewServerWith is NewServer with extra redis-server arguments, which
// override the defaults. With "--appendonly", "yes", "--appendfsync",
// "always" the data survives Stop and Start, as a production Redis with
// persistence would keep it through a crash.
func NewServerWith(tb testing.TB, args ...string) *Server {
	tb.Helper()
	need(tb, "redis-server")
	return newServer(tb, args)
}

// newServer starts a server with extra arguments on a free port, trying a few
// ports in case another process takes the one picked.
func newServer(tb testing.TB, extra []string) *Server {
	tb.Helper()
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		dir := tb.TempDir()
		s := &Server{
			Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
			tb:   tb,
			port: port,
			dir:  dir,
			args: append([]string{
				"--port", strconv.Itoa(port),
				"--bind", "127.0.0.1",
				"--dir", dir,
				"--save", "",
				"--appendonly", "no",
				"--logfile", filepath.Join(dir, "redis.log"),
			}, extra...),
		}
		if lastErr = s.start(); lastErr == nil {
			tb.Cleanup(s.Stop)
			return s
		}
	}
	tb.Fatalf("redistest: %v", lastErr)
	return nil
}

// Start starts the server again on its port after Stop. The data is gone
// unless the server was started with persistence (see NewServerWith).
func (s *Server) Start() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
}

// Restart stops the server and starts it again on the same port.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Stop()
	s.Start()
}

// Stop kills the server, as a crash would, and waits until it has exited.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("server %s already running", s.Addr)
	}
	cmd := exec.Command("redis-server", s.args...)
	cmd.Dir = s.dir
	setDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	if err := waitFor(done, func() error { return ping(s.Addr) }); err != nil {
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server on %s: %w\n%s", s.Addr, err, s.logTail())
	}
	s.cmd, s.done = cmd, done
	return nil
}

// logTail returns the end of the server's log, for failure messages.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// StartCluster starts a Redis Cluster of n masters without replicas (n ≥ 3)
// and returns the nodes' addresses once every node reports cluster_state:ok.
// The nodes are killed when the test ends.
func StartCluster(tb testing.TB, n int) (addrs []string) {
	tb.Helper()
	for _, s := range startCluster(tb, n, 0) {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// StartReplicatedCluster starts a Redis Cluster of masters (≥ 3) with
// replicas per master, and returns its nodes once every node reports
// cluster_state:ok and every replica is in sync with its master. Which
// node is a master is the cluster's to say (CLUSTER NODES); Stop on one
// kills it as a crash would, and its replica takes over after the node
// timeout (5 s) and an election. The nodes are killed when the test ends.
func StartReplicatedCluster(tb testing.TB, masters, replicas int) []*Server {
	tb.Helper()
	if replicas < 1 {
		tb.Fatalf("redistest: a replicated cluster needs a replica per master, not %d", replicas)
	}
	return startCluster(tb, masters, replicas)
}

func startCluster(tb testing.TB, masters, replicas int) []*Server {
	tb.Helper()
	if masters < 3 {
		tb.Fatalf("redistest: a cluster needs at least 3 masters, not %d", masters)
	}
	need(tb, "redis-server")
	need(tb, "redis-cli")
	var nodes []*Server
	args := []string{"--cluster", "create"}
	for i := range masters * (1 + replicas) {
		// Each node's cluster bus listens on its port + 10000.
		s := newServer(tb, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", fmt.Sprintf("nodes-%d.conf", i),
			"--cluster-node-timeout", "5000",
		})
		nodes = append(nodes, s)
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, s := range nodes {
		err := waitFor(nil, func() error {
			info, err := command(s.Addr, "CLUSTER", "INFO")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return errors.New("cluster state is not ok")
			}
			repl, err := command(s.Addr, "INFO", "replication")
			if err != nil {
				return err
			}
			if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
				return errors.New("replica not in sync with its master")
			}
			return nil
		})
		if err != nil {
			tb.Fatalf("redistest: cluster node %s: %v", s.Addr, err)
		}
	}
	return nodes
}

// need fails the test when tool is not on PATH, or skips it under -short
// or when GATEWAY_SKIP_REDIS=1.
func need(tb testing.TB, tool string) {
	tb.Helper()
	if testing.Short() {
		tb.Skipf("needs %s: skipped by -short (make unit)", tool)
	}
	if _, err := exec.LookPath(tool); err == nil {
		return
	}
	if os.Getenv("GATEWAY_SKIP_REDIS") == "1" {
		tb.Skipf("redistest: %s not on PATH and GATEWAY_SKIP_REDIS=1", tool)
	}
	tb.Fatalf("redistest: %s not on PATH: install it (apt-get install redis-server redis-tools; the Makefile does), or set GATEWAY_SKIP_REDIS=1 to skip tests that need Redis", tool)
}

// waitFor polls check until it succeeds, done is closed (the process exited)
// or startTimeout passes.
func waitFor(done <-chan struct{}, check func() error) error {
	deadline := time.Now().Add(startTimeout)
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-done:
			return errors.New("exited before it was ready")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// freePort returns a loopback port that is free, and whose cluster bus port
// (port + 10000) is free too (see freeport for how the port stays free
// until redis-server binds it).
func freePort() (int, error) {
	l, err := freeport.Listen(func(port int) bool {
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		if err != nil {
			return false
		}
		bus.Close()
		return true
	})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func ping(addr string) error {
	r, err := command(addr, "PING")
	if err != nil {
		return err
	}
	if r != "PONG" {
		return fmt.Errorf("PING answered %q", r)
	}
	return nil
}

// command sends one command over a fresh connection and returns a simple,
// integer or bulk string reply; a nil reply is "".
func command(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if n == -1 {
			return "", nil // nil reply
		}
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk reply %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
