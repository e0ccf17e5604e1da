package freeport

import (
	"net"
	"testing"
)

// Ports handed out are distinct, below the kernel's ephemeral range (which
// listeners on port 0 draw from), pass the caller's check, and are free.
func TestListen(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 100 {
		l, err := Listen(func(port int) bool { return port%2 == 0 })
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if seen[port] {
			t.Fatalf("port %d handed out twice", port)
		}
		seen[port] = true
		if low-first >= 4096 && (port < first || port >= low || port%2 != 0) {
			t.Fatalf("port %d: want an even port from %d to %d", port, first, low-1)
		}
		again, err := net.Listen("tcp", l.Addr().String())
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		again.Close()
	}
}
