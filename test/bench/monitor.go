package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// redisTrace is what MONITOR saw during a sample: commands sent by clients
// (each one a network round trip) apart from the commands Lua scripts ran
// inside the server. INFO commandstats cannot tell the two apart: it counts
// a script's inner commands under their own names.
type redisTrace struct {
	client map[string]int64
	script map[string]int64
}

// monitor is a MONITOR connection read in the background. MONITOR costs
// the server time, so it runs only around a short sample, never during the
// timed slices.
type monitor struct {
	conn  net.Conn
	done  chan struct{}
	mu    sync.Mutex
	trace redisTrace
}

// startMonitor speaks RESP directly: go-redis's MONITOR support polls in a
// busy loop, which on a small machine would skew the sample.
func startMonitor(addr string) (*monitor, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		conn.Close()
		return nil, err
	}
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	m := &monitor{conn: conn, done: make(chan struct{}),
		trace: redisTrace{client: map[string]int64{}, script: map[string]int64{}}}
	go m.read(br)
	return m, nil
}

// read parses lines like
//
//	+1700000000.123456 [0 127.0.0.1:5000] "evalsha" "…" "10" …
//	+1700000000.123457 [0 lua] "HGET" "…" "…"
func (m *monitor) read(br *bufio.Reader) {
	defer close(m.done)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		open, close := strings.IndexByte(line, '['), strings.IndexByte(line, ']')
		if open < 0 || close < open {
			continue
		}
		source := line[open+1 : close]
		rest := strings.TrimSpace(line[close+1:])
		name, _, _ := strings.Cut(strings.TrimPrefix(rest, `"`), `"`)
		name = strings.ToLower(name)
		m.mu.Lock()
		if strings.HasSuffix(source, " lua") {
			m.trace.script[name]++
		} else {
			m.trace.client[name]++
		}
		m.mu.Unlock()
	}
}

// stop closes the connection and returns what was seen.
func (m *monitor) stop() redisTrace {
	m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.trace
}
