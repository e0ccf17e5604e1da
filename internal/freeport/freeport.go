// Package freeport picks loopback ports for the processes that tests, the
// benchmark and `gateway-local` start. A port picked now is bound later, by
// the process it is given to, and another process could take it in
// between. So ports come from below the kernel's ephemeral range, which it
// never hands out to a listener on port 0 or to an outgoing connection,
// chosen at random and never twice by one process: what is left is another
// process of ours choosing the same port in the same instant.
package freeport

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// first is the lowest port picked: above the well-known and most
// registered services' ports.
const first = 10000

var (
	mu     sync.Mutex
	picked = map[int]bool{} // ports this process has handed out
)

// Listen listens on a free loopback port below the ephemeral range that
// this process has not handed out before and for which ok holds (ok nil:
// any). Where that range leaves too few ports to pick from, it listens on
// port 0 instead.
func Listen(ok func(port int) bool) (net.Listener, error) {
	low := ephemeralLow()
	if low-first < 4096 {
		return net.Listen("tcp", "127.0.0.1:0")
	}
	mu.Lock()
	defer mu.Unlock()
	for range 1000 {
		port := first + rand.IntN(low-first)
		if picked[port] || ok != nil && !ok(port) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // in use
		}
		picked[port] = true
		return l, nil
	}
	return nil, errors.New("freeport: no free loopback port below the ephemeral range")
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read), read once.
var ephemeralLow = sync.OnceValue(func() int {
	const linuxDefault = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return linuxDefault
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return linuxDefault
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return linuxDefault
	}
	return low
})
