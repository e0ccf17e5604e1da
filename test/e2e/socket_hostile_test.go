package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// A hostile client on the Responses API's WebSocket: a flood of large
// messages behind a running response, a ping flood, and refused messages
// sent to keep a socket open.

// procStatusKB reads a field of /proc/PID/status (VmRSS, VmHWM) in KiB.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s: %q", field, v)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// resetPeakRSS sets a process's VmHWM to its VmRSS now, so that VmHWM
// later is the peak since.
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("resetting the peak RSS: %v", err)
	}
}

// socketFloodMessages is how many messages of socketFloodSize the flood
// sends behind one running response (the figures of issue 42).
const (
	socketFloodMessages = 600
	socketFloodSize     = 900 << 10
)

// socketRSSBound is the growth of the sidecar's peak RSS the flood may
// cause: the socket holds three messages at most (the running
// response.create, the one waiting behind it, the one its reader holds),
// each read into a buffer up to twice its size, and the Go runtime may
// let the heap reach twice what is live before it collects (GOGC=100)
// and keeps freed pages a while: 16 MiB for that is the headroom.
const socketRSSBound = 3*2*socketFloodSize + 16<<20

// 600 messages of 0.9 MiB sent on one socket behind one running response
// leave the sidecar's peak RSS within socketRSSBound (the socket reads
// one message ahead; Envoy and the client hold the rest), the running
// response completes and is billed once, exactly; the messages, refused
// once their turn comes, close the socket at the rate of refusals (1008),
// nothing billed for them; another tenant's socket and HTTP requests are
// served meanwhile.
func TestSocketFloodBehindResponseBounded(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	attacker := s.NewAccount(100, noLimits)
	other := s.NewAccount(100, noLimits)
	pid := s.Sidecar.Cmd.Process.Pid
	o := mustDialSocket(t, s, other.Key, nil)
	socketBilled(t, o.create(`{"model":"gpt-6-sol","input":"warm up"}`))

	s.Primary.Control(map[string]any{"event_delay_ms": 100, "reply_words": 30})
	w := mustDialSocket(t, s, attacker.Key, nil)
	before := procStatusKB(t, pid, "VmRSS")
	resetPeakRSS(t, pid)
	envoyPID := s.Envoy.Cmd.Process.Pid
	envoyBefore := procStatusKB(t, envoyPID, "VmRSS")
	resetPeakRSS(t, envoyPID)
	started := time.Now()
	if ev := w.startResponse(slowSocket); ev.Type != "response.created" {
		t.Fatalf("first event %s", ev.raw)
	}
	msg := []byte(`{"type":"keepalive","pad":"` + strings.Repeat("x", socketFloodSize) + `"}`)
	type flood struct {
		sent int
		err  error
	}
	flooded := make(chan flood, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		f := flood{}
		for f.sent < socketFloodMessages {
			if f.err = w.c.Write(ctx, websocket.MessageText, msg); f.err != nil {
				break
			}
			f.sent++
		}
		flooded <- f
	}()

	// Another tenant meanwhile: its socket and HTTP.
	socketBilled(t, o.create(`{"model":"gpt-6-sol","input":"still here?"}`))
	if r, b := s.Do("POST", responsesPath, chatCompletionsHeaders(other.Key), []byte(`{"model":"gpt-6-sol","input":"hi"}`)); r.StatusCode != 200 {
		t.Fatalf("another tenant's HTTP request during the flood: %d %s", r.StatusCode, b)
	}

	evs, code := w.rest()
	ran := time.Since(started)
	completed, refused := 0, 0
	for _, ev := range evs {
		switch {
		case ev.Type == "response.completed":
			completed++
		case ev.Type == "error" && ev.Status == 400:
			refused++
		}
	}
	if completed != 1 {
		t.Fatalf("the running response: %d completed events, last %s", completed, lastRaw(evs))
	}
	// At most the bucket and what it refilled while the socket ran.
	const rate = config.DefaultSocketPingsPerSecond
	if most := rate + int(rate*ran.Seconds()) + 1; code != websocket.StatusPolicyViolation || refused > most {
		t.Fatalf("flooded socket: close %d after %d refusals in %v; want 1008 after at most %d", code, refused, ran, most)
	}
	f := <-flooded
	peak := procStatusKB(t, pid, "VmHWM")
	grew := (peak - before) << 10
	t.Logf("sidecar RSS %d KiB before, peak %d KiB during (+%.1f MiB; bound %.1f MiB); %d of %d messages written before the close (%v)",
		before, peak, float64(grew)/(1<<20), float64(socketRSSBound)/(1<<20), f.sent, socketFloodMessages, f.err)
	t.Logf("Envoy RSS %d KiB before, peak %d KiB during", envoyBefore, procStatusKB(t, envoyPID, "VmHWM"))
	if grew > socketRSSBound {
		t.Errorf("the sidecar's peak RSS grew %d bytes under the flood; the bound is %d", grew, socketRSSBound)
	}

	s.WaitSettled()
	entries := allLedgerEntries(t, s, attacker.ID)
	if len(entries) != 1 || entries[0].Status != 200 || entries[0].Estimated || entries[0].Cost == 0 {
		t.Fatalf("attacker's ledger %+v; want the one response, exact", entries)
	}
	if n := len(allLedgerEntries(t, s, other.ID)); n != 3 {
		t.Errorf("other tenant's ledger has %d entries, want 3", n)
	}
	// The other tenant's socket still serves.
	s.Primary.Control(map[string]any{"event_delay_ms": 0})
	socketBilled(t, o.create(`{"model":"gpt-6-sol","input":"after"}`))
}

// A ping flood through Envoy is cut at limits.socket_pings_per_second: no
// more pongs than the rate allows over the time the flood ran, then a
// close 1008; another socket of the same key is served.
func TestSocketPingFloodCut(t *testing.T) {
	s := launchtest.Start(t, launch.Options{})
	acct := s.NewAccount(100, noLimits)
	w := mustDialSocket(t, s, acct.Key, nil)
	closed := make(chan error, 1)
	go func() {
		// Reads the pongs, and sees the close.
		_, _, err := w.c.Read(context.Background())
		closed <- err
	}()
	const rate = config.DefaultSocketPingsPerSecond
	start := time.Now()
	pongs := 0
	for pongs <= 100*rate {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := w.c.Ping(ctx)
		cancel()
		if err != nil {
			break
		}
		pongs++
	}
	ran := time.Since(start)
	var err error
	select {
	case err = <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the socket stayed open under a ping flood")
	}
	t.Logf("%d pongs in %v before the cut", pongs, ran)
	if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("after %d pongs: %v; want close 1008", pongs, err)
	}
	// At most the bucket (rate) and what it refilled while the flood ran.
	if most := rate + int(float64(rate)*ran.Seconds()) + 1; pongs > most {
		t.Errorf("%d pongs in %v; at %d a second at most %d", pongs, ran, rate, most)
	}
	if got := sidecarMetric(t, s, "gateway_socket_cuts_total"); got != 1 {
		t.Errorf("gateway_socket_cuts_total = %v; want 1", got)
	}
	socketBilled(t, mustDialSocket(t, s, acct.Key, nil).create(`{"model":"gpt-6-sol","input":"hi"}`))
}

// Refused messages do not keep a socket open: with limits.socket_idle at
// 1s, a client sending a refused {"type":"keepalive"} four times a second
// (below the rate) has its socket closed as idle (1000) about a second
// after its last response, not kept open by the refusals.
func TestSocketRefusalsDoNotKeepIdleSocket(t *testing.T) {
	const idle = time.Second
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		c.Limits.SocketIdle = config.Duration(idle)
	}})
	acct := s.NewAccount(100, noLimits)
	w := mustDialSocket(t, s, acct.Key, nil)
	socketBilled(t, w.create(`{"model":"gpt-6-sol","input":"hi"}`))
	served := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	sent := 0
	var err error
	for {
		if err = w.c.Write(ctx, websocket.MessageText, []byte(`{"type":"keepalive"}`)); err != nil {
			_, _, err = w.c.Read(ctx) // the close that came first
			break
		}
		sent++
		var data []byte
		if _, data, err = w.c.Read(ctx); err != nil {
			break
		}
		if !strings.Contains(string(data), `"status":400`) {
			t.Fatalf("keepalive answered %s", data)
		}
		<-tick.C
	}
	if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("after %d keepalives: %v; want the idle close (1000)", sent, err)
	}
	if since := time.Since(served); since < idle {
		t.Fatalf("closed %v after its last response; the idle time is %v", since, idle)
	}
	if sent < 2 {
		t.Fatalf("only %d keepalives were sent before the close", sent)
	}
}
