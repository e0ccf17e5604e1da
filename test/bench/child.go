package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/modelgateway/gateway/test/launch"
)

// startChild runs this same binary as a child process serving one of its
// internal modes (-null-processor, -otlp-collector) on a free loopback
// address, its output in a log of its own, and returns it, and that
// address, once it accepts connections. The bench stops it when it ends.
func startChild(tb *benchTB, mode string, env []string, extra ...string) (*launch.Process, string) {
	addrs, err := launch.FreeAddrs(1)
	if err != nil {
		tb.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	p, err := launch.StartProcess(mode, self, append([]string{"-" + mode, addrs[0]}, extra...), env, filepath.Join(tb.TempDir(), mode+".log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	if err := waitListening(addrs[0], p); err != nil {
		tb.Fatal(fmt.Errorf("%s: %w\n%s", mode, err, p.Tail(4096)))
	}
	return p, addrs[0]
}

// waitListening waits up to 30 s for p to accept connections on addr.
func waitListening(addr string, p *launch.Process) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("exited before listening on %s", addr)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not listening on %s: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}
