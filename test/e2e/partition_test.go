package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// tcpProxy forwards connections to a target and can hang: while hung, bytes
// are read but not passed on and new connections wait, as over a network
// partition that drops packets.
type tcpProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   chan struct{} // closed while traffic flows
}

func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, open: make(chan struct{})}
	close(p.open)
	t.Cleanup(func() { ln.Close(); p.Heal() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) gate() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// Hang stops all traffic until Heal.
func (p *tcpProxy) Hang() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
		p.open = make(chan struct{})
	default:
	}
}

// Heal lets traffic flow again.
func (p *tcpProxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

func (p *tcpProxy) serve(c net.Conn) {
	defer c.Close()
	<-p.gate()
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				<-p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pipe(u, c)
	go pipe(c, u)
	<-done
}

// Money is conserved when Redis goes away for longer than the hold lease:
// first a partition of one sidecar (A, behind a proxy that hangs) while
// another (B) keeps admitting on the same account, then an outage of Redis
// itself while streams end. A's streams stop being served before their
// lease ends; B's sweeper settles them at their checkpoints, and A's own
// settlements, replayed from its spool once the partition heals, are
// reconciled: the difference is posted once, flagged reconciled, never
// dropped as a duplicate. The account's balance goes below zero by no more
// than the holds swept while their requests ran. Every stream that
// completed during the outage is charged exactly the usage its client saw.
func TestConservationPartitionAndOutage(t *testing.T) {
	rs := redistest.NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	px := startProxy(t, rs.Addr)
	const lease = 4 * time.Second
	conf := func(c *config.Config) {
		c.Limits.HoldLease = config.Duration(lease)
		c.Limits.BackgroundPoll = config.Duration(lease / 4)
	}
	a := launchtest.Start(t, launch.Options{RedisAddr: px.Addr(), Configure: conf})
	b := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: conf})
	for _, s := range []*launch.Stack{a, b} {
		for _, f := range []*launch.Fake{s.Primary, s.Reserve} {
			f.Control(map[string]any{"event_delay_ms": 50, "reply_words": 30})
		}
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	ctx := context.Background()
	balance := func(acct string) int64 {
		r, err := b.Store.Usage(ctx, acct, ledger.Total)
		if err != nil {
			t.Fatal(err)
		}
		return r.Balance
	}

	// Partition. The shared account can pay for A's streams and a few more
	// requests: B spends what the sweep releases.
	hold := priceOf(t, b, "alpha", alphaModel).Hold(int64(len(messagesBody(true, ""))), 256)
	shared := b.NewAccount(float64(5*hold)/pricing.NanoPerUSD, noLimits)
	initial := balance(shared.ID)
	const aStreams = 4
	var (
		wg      sync.WaitGroup
		started sync.WaitGroup
		aReply  [aStreams]clientReply
	)
	started.Add(aStreams)
	for i := range aStreams {
		wg.Go(func() {
			path, h, body := alphaPath, messagesHeaders(shared.Key), messagesBody(true, "")
			h["x-fake-controls"] = `{"event_delay_ms":100,"reply_words":80}` // 8 s: longer than the partition's cut
			var once sync.Once
			aReply[i] = postAndRead(client, a.URL+path, h, body, 0, func() { once.Do(started.Done) })
			once.Do(started.Done)
		})
	}
	started.Wait()
	eventually.True(t, 20*time.Second, "A's streams to be checkpointed", func() bool {
		cs, _ := b.Store.Checkpoints(ctx, shared.ID)
		n := 0
		for _, c := range cs {
			if c.Usage.Output > 0 {
				n++
			}
		}
		return n == aStreams
	})
	_, bound, err := b.Store.OpenHolds(ctx, shared.ID)
	if err != nil {
		t.Fatal(err)
	}
	px.Hang()
	t.Logf("A partitioned from Redis with %d streams holding %d nano-USD", aStreams, bound)
	// The lowest balance seen, sampled until the books are checked.
	var lowest atomic.Int64
	lowest.Store(initial)
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if r, err := b.Store.Usage(ctx, shared.ID, ledger.Total); err == nil && r.Balance < lowest.Load() {
				lowest.Store(r.Balance)
			}
			time.Sleep(20 * time.Millisecond) // sampling interval
		}
	}()
	wg.Wait() // A's streams end: cut, since A cannot renew their holds
	for i, r := range aReply {
		if r.status != 200 || r.complete {
			t.Errorf("A's stream %d: status %d, complete %v: a stream whose hold could not be renewed must be cut before its lease ends", i, r.status, r.complete)
		}
	}
	// B keeps admitting on the account: once the sweep released A's holds it
	// spends the balance they held, until it is refused.
	eventually.True(t, 30*time.Second, "B's sweeper to settle A's streams", func() bool {
		n := 0
		for _, e := range allLedgerEntries(t, b, shared.ID) {
			if e.Interrupted {
				n++
			}
		}
		return n == aStreams
	})
	var bServed, bRefused int
	for bRefused == 0 && bServed < 500 {
		path, h, body := requestFor("alpha", shared.Key, false)
		r := postAndRead(client, b.URL+path, h, body, 0, nil)
		switch r.status {
		case 200:
			bServed++
		case 402:
			bRefused++
		default:
			t.Fatalf("B during the partition: %d %s", r.status, r.body)
		}
	}
	px.Heal()
	eventually.True(t, 30*time.Second, "A's spool to be replayed", func() bool {
		return sidecarMetric(t, a, "gateway_spool_depth") == 0
	})
	a.WaitSettled()
	b.WaitSettled()
	waitNoHolds(t, b, shared.ID)
	stopSampling()
	<-sampled
	seen := map[string]bool{}
	entries := checkBooksFloor(t, b, shared.ID, initial, seen, -bound)
	reconciled := map[string]bool{}
	for _, e := range entries {
		if e.Reconciled {
			reconciled[e.RequestID] = true
		}
	}
	for _, e := range entries {
		if e.Interrupted && !reconciled[e.RequestID] {
			t.Errorf("request %s was swept and its own settlement never reconciled", e.RequestID)
		}
	}
	if len(reconciled) != aStreams {
		t.Errorf("%d reconciled requests, want %d", len(reconciled), aStreams)
	}
	if low := lowest.Load(); low < -bound {
		t.Errorf("the balance reached %d, below minus the swept holds (%d)", low, -bound)
	}
	t.Logf("partition: B served %d and refused %d; balance %d (lowest %d), bound %d; %d reconciled",
		bServed, bRefused, balance(shared.ID), lowest.Load(), -bound, len(reconciled))

	// Outage: streams on both sidecars end while Redis is down for longer
	// than the lease; each settles exactly once its spool replays.
	const outStreams = 6
	type run struct {
		s     *launch.Stack
		acct  launch.Account
		reply clientReply
	}
	runs := make([]run, outStreams)
	started.Add(outStreams)
	for i := range runs {
		runs[i].s = []*launch.Stack{a, b}[i%2]
		runs[i].acct = b.NewAccount(5, noLimits)
		wg.Go(func() {
			path, h, body := alphaPath, messagesHeaders(runs[i].acct.Key), messagesBody(true, "")
			var once sync.Once
			runs[i].reply = postAndRead(client, runs[i].s.URL+path, h, body, 0, func() { once.Do(started.Done) })
			once.Do(started.Done)
		})
	}
	started.Wait()
	rs.Stop()
	down := time.Now()
	wg.Wait()
	// Keep Redis down for longer than the lease after the streams ended.
	time.Sleep(time.Until(down.Add(lease + lease/2))) // the outage's length, not a synchronisation
	rs.Start()
	completed := 0
	for _, r := range runs {
		eventually.True(t, 60*time.Second, "the outage's settlements", func() bool {
			n, _, err := b.Store.OpenHolds(ctx, r.acct.ID)
			return err == nil && n == 0 && sidecarMetric(t, r.s, "gateway_spool_depth") == 0
		})
		r.s.WaitSettled()
		if r.reply.status != 200 {
			t.Fatalf("stream during the outage: %d %s", r.reply.status, r.reply.body)
		}
		entries := checkBooks(t, b, r.acct.ID, 5*pricing.NanoPerUSD, seen)
		if !r.reply.complete {
			continue
		}
		completed++
		evs := readEvents(t, bufio.NewReader(bytes.NewReader(r.reply.body)))
		want := messagesUsage(t, nil, evs)
		var in, out int64
		for _, e := range entries {
			in += e.Usage.Input
			out += e.Usage.Output
		}
		if in != want.Input || out != want.Output {
			t.Errorf("%s: charged %d in, %d out; the client saw %+v (%s)", r.acct.ID, in, out, want, ledgerSummary(entries))
		}
	}
	if completed == 0 {
		t.Error("no stream completed during the outage: the scenario was not exercised")
	}
	t.Logf("outage: %d of %d streams completed while Redis was down", completed, outStreams)
}

// ledgerSummary describes entries for a failure message.
func ledgerSummary(entries []ledger.Entry) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range entries {
		enc.Encode(map[string]any{"id": e.RequestID, "out": e.Usage.Output, "cost": e.Cost, "interrupted": e.Interrupted, "reconciled": e.Reconciled, "status": e.Status})
	}
	return buf.String()
}
