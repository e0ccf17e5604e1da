package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// Envoy's default circuit breakers refuse the 1,025th concurrent request on
// a cluster with an immediate 503. Streams that last minutes reach that at a
// few tens of requests per second, so the gateway sets its own: more than
// 1,024 streams open at once through one gateway all succeed.
func TestMoreThan1024ConcurrentStreams(t *testing.T) {
	const n = 1200
	// Each stream holds a client socket here, two sockets in Envoy and one
	// in the fake vendor.
	raiseFileLimit(t, 2*n+512)
	s := launchtest.Start(t, launch.Options{})
	if lim := openFileLimit(t, s.Envoy.Cmd.Process.Pid); lim < 2*n+256 {
		t.Skipf("Envoy may open only %d files; %d streams need about %d", lim, n, 2*n+256)
	}
	acct := s.NewAccount(1000, noLimits)
	// The first event comes at once, the next after ten minutes: every
	// stream stays open until the test lets go of it.
	s.Primary.Control(map[string]any{"event_delay_ms": 600_000, "reply_words": 3})

	ctx, cancel := context.WithCancel(context.Background())
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, DisableCompression: true}}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		open   int
		failed = map[string]int{}
		done   = make(chan struct{}, n)
	)
	body := messagesBody(true, "")
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := holdStream(ctx, client, s.URL+alphaPath, messagesHeaders(acct.Key), body, func() {
				mu.Lock()
				open++
				mu.Unlock()
				done <- struct{}{}
			})
			if err != nil && ctx.Err() == nil {
				mu.Lock()
				failed[err.Error()]++
				mu.Unlock()
				done <- struct{}{}
			}
		}()
	}
	// Bounded: on a loaded two-core machine 1,200 admissions take seconds.
	deadline := time.After(90 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-done:
		case <-deadline:
			i = n
		}
	}
	mu.Lock()
	gotOpen, gotFailed := open, fmt.Sprint(failed)
	mu.Unlock()
	cancel()
	wg.Wait()
	client.CloseIdleConnections()
	if gotOpen != n {
		t.Fatalf("%d of %d concurrent streams open; failures: %s", gotOpen, n, gotFailed)
	}
	// Envoy counted no overflow on any cluster.
	resp, err := http.Get(s.AdminURL + "/stats?filter=_overflow$")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, _ := strings.Cut(sc.Text(), ": ")
		if v != "0" && strings.HasPrefix(name, "cluster.") {
			t.Errorf("Envoy refused requests: %s", sc.Text())
		}
	}
}

// holdStream opens one streaming request, calls opened once its first event
// has arrived and keeps it open until ctx ends.
func holdStream(ctx context.Context, c *http.Client, url string, header map[string]string, body []byte, opened func()) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	return launch.HoldStream(ctx, resp, opened)
}

// raiseFileLimit raises this process's open-file limit (and so its
// children's) to at least want, up to the hard limit.
func raiseFileLimit(t *testing.T, want uint64) {
	t.Helper()
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
	if r.Cur >= want {
		return
	}
	if r.Max < want {
		t.Skipf("the open-file limit is %d (hard); this test needs %d", r.Max, want)
	}
	r.Cur = r.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		t.Fatal(err)
	}
}

// openFileLimit reads a process's soft open-file limit from /proc.
func openFileLimit(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/limits")
	if err != nil {
		t.Skipf("cannot read Envoy's limits: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				if n, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					return n
				}
			}
		}
	}
	t.Fatal(errors.New("no open-file limit in /proc/PID/limits"))
	return 0
}
