// Command bench measures what the gateway costs on top of the proxy it is
// built on: the same Envoy listener and routes with and without the ext_proc
// filter (and so the sidecar and Redis), in front of one shared fake vendor,
// measured in the same run.
//
//	go run ./test/bench -out test/bench/results.md   # the full run, ~5 minutes
//	go run ./test/bench -smoke -out bin/bench-smoke.md  # a few seconds, for CI
//
// Every figure is taken on both stacks in short alternating slices (gateway,
// bare, bare, gateway, …) so that whatever else the machine is doing falls
// on both about equally and cancels in the difference. The results are a
// markdown report, printed and written to -out. Nothing here asserts a
// timing: targets are printed next to the figures for a person to judge.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/launch"
	"github.com/modelgateway/gateway/internal/store"
)

func main() {
	var (
		out     = flag.String("out", "", "write the markdown report to this file too")
		smoke   = flag.Bool("smoke", false, "tiny rates and durations: exercise the harness in seconds, judge nothing")
		note    = flag.String("note", "", "a line for the report's header, e.g. that the machine was shared")
		profile = flag.String("cpuprofile-sidecar", "", "record the sidecar with perf(1) under load into this file (perf.data format; a text summary goes to FILE.txt)")
		env     listFlag
	)
	flag.Var(&env, "sidecar-env", "KEY=VALUE for the sidecar's environment, repeatable (e.g. GOMAXPROCS=1, GOGC=200) to try a setting")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)

	tb := newBenchTB()
	defer tb.runCleanups()
	// An interrupted run still stops Envoy, the sidecar, Redis and the fakes.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		tb.die("interrupted")
	}()

	p := fullPlan
	if *smoke {
		p = smokePlan
	}
	b := start(tb, p, env)
	b.res.note = *note
	usage0 := b.machineUsage()
	b.run()
	if *profile != "" {
		b.profileSidecar(*profile)
	}
	b.res.usage = b.machineUsage().sub(usage0)
	b.res.finished = time.Now()
	b.res.loadEnd = loadAvg()

	report := b.res.markdown()
	fmt.Print(report)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
			tb.Fatal(err)
		}
		log.Printf("wrote %s", *out)
	}
}

// plan is how long and how hard each phase runs.
type plan struct {
	name   string
	warm   time.Duration // a discarded slice per target before each phase
	slice  time.Duration // one measured slice
	rounds int           // measured slices per target and phase

	rates         []float64 // non-streaming latency, vendor answering at once
	slowRate      float64   // the same with a slow vendor
	slowLatencyMS int

	steps     []float64 // offered rates for the sustained-rate search
	stepSlice time.Duration

	streamRate   float64 // streams started per second
	eventDelayMS int     // the fake's pause between events
	replyWords   int     // events per stream is about this plus 6

	openStreams int           // concurrent streams for the memory figure
	openRate    float64       // streams opened per second on the way there
	settle      time.Duration // pause for buffers and goroutines to settle

	judge bool // compare against the targets
}

var fullPlan = plan{
	name: "full", warm: time.Second, slice: 3 * time.Second, rounds: 4,
	rates: []float64{500, 1000, 2000}, slowRate: 1000, slowLatencyMS: 20,
	steps: []float64{1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000}, stepSlice: 4 * time.Second,
	streamRate: 100, eventDelayMS: 2, replyWords: 20,
	openStreams: 1000, openRate: 500, settle: time.Second,
	judge: true,
}

var smokePlan = plan{
	name: "smoke", warm: 300 * time.Millisecond, slice: 400 * time.Millisecond, rounds: 2,
	rates: []float64{100, 200}, slowRate: 100, slowLatencyMS: 20,
	steps: []float64{200, 400}, stepSlice: time.Second,
	streamRate: 20, eventDelayMS: 2, replyWords: 5,
	openStreams: 50, openRate: 200, settle: 200 * time.Millisecond,
}

// bench holds the two stacks and what has been measured.
type bench struct {
	tb       *benchTB
	plan     plan
	gw, bare *launch.Stack
	gwT      *target // through the gateway, with a cr_ key
	bareT    *target // through bare Envoy, with the vendor's own key
	rdb      *redis.Client
	res      *results
}

// The request every non-streaming slice sends: format A, a small body.
const (
	messagesPath = "/alpha/v1/messages"
	benchModel   = "claude-sonnet-4-5"
)

func messagesBody(stream bool) []byte {
	return fmt.Appendf(nil, `{"model":%q,"max_tokens":256,"stream":%t,"system":"Be brief.",`+
		`"messages":[{"role":"user","content":"Hello there, gateway"}]}`, benchModel, stream)
}

// up starts a stack that the bench stops when it ends.
func up(tb *benchTB, o launch.Options) *launch.Stack {
	s, err := launch.Up(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			log.Print(s.Logs())
		}
		s.Close()
	})
	s.T, s.Primary.T, s.Reserve.T = tb, tb, tb
	return s
}

// start brings up the gateway, then bare Envoy pointed at the gateway's
// fake vendors, so that both proxies reach the very same upstream process.
func start(tb *benchTB, p plan, sidecarEnv []string) *bench {
	res := &results{plan: p, started: time.Now(), env: readEnvironment(tb), loadStart: loadAvg(), sidecarEnv: sidecarEnv}
	log.Printf("starting the gateway stack")
	gw := up(tb, launch.Options{
		// Production's log level: the per-request log line is part of
		// the cost being measured.
		SidecarArgs: []string{"--log-level", "info"},
		SidecarEnv:  sidecarEnv,
	})
	log.Printf("starting the bare Envoy stack")
	bare := up(tb, launch.Options{Bare: true, Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			addr := gw.Primary.Addrs.Beta
			if u.Format == config.FormatMessages {
				addr = gw.Primary.Addrs.Alpha
			}
			u.Primary.URL = "http://" + addr
			u.Reserve.URL = "http://" + addr
		}
	}})
	acct := gw.NewAccount(1_000_000, store.Limits{})
	b := &bench{
		tb: tb, plan: p, gw: gw, bare: bare, res: res,
		gwT: newTarget("gateway", gw.URL, map[string]string{
			"x-api-key": acct.Key, "anthropic-version": "2023-06-01", "content-type": "application/json",
		}),
		bareT: newTarget("bare", bare.URL, map[string]string{
			"x-api-key": launch.AlphaVendorKey, "anthropic-version": "2023-06-01", "content-type": "application/json",
		}),
		rdb: redis.NewClient(&redis.Options{Addr: gw.RedisAddr}),
	}
	tb.Cleanup(func() { b.rdb.Close() })
	b.check()
	return b
}

// check sends one request of each kind to each target and stops the run if
// any is not a 200 with the fake's timestamps: measuring errors would be
// meaningless.
func (b *bench) check() {
	for _, t := range []*target{b.gwT, b.bareT} {
		if err := t.call(request{messagesPath, messagesBody(false)}); err != nil {
			if se, ok := err.(*statusError); ok {
				b.tb.Fatalf("%s: %v: %s", t.name, err, se.body)
			}
			b.tb.Fatalf("%s: %v", t.name, err)
		}
		if _, err := t.stream(request{messagesPath, messagesBody(true)}, time.Now()); err != nil {
			b.tb.Fatalf("%s stream: %v", t.name, err)
		}
	}
}

// run measures every figure. Memory comes first, while the sidecar's heap
// has not yet been grown (and kept) by the load phases, which would hide
// part of what the streams cost.
func (b *bench) run() {
	b.memory()
	b.latency()
	b.streaming()
	b.sustained()
}

// vendor sets the shared fake's behaviour for the next phase, starting
// from its defaults.
func (b *bench) vendor(settings map[string]any) {
	b.gw.Primary.Reset()
	if len(settings) > 0 {
		b.gw.Primary.Control(settings)
	}
}

// both runs f once per target per round, alternating which goes first so
// that a drift in the machine's load over a phase favours neither, after a
// discarded warm-up slice each.
func (b *bench) both(warm func(t *target), f func(t *target)) {
	for _, t := range []*target{b.gwT, b.bareT} {
		warm(t)
	}
	for r := range b.plan.rounds {
		order := []*target{b.gwT, b.bareT}
		if r%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, t := range order {
			f(t)
		}
	}
}

// cpuSnap is the CPU time used so far by the processes behind a target,
// and for the gateway the sidecar's store timings.
type cpuSnap struct {
	sidecar, envoy, redis time.Duration
	store                 sidecarStats
}

func (b *bench) cpuSnap(t *target) cpuSnap {
	if t == b.bareT {
		return cpuSnap{envoy: cpuTime(b.bare.Envoy.Cmd.Process.Pid)}
	}
	return cpuSnap{
		sidecar: cpuTime(b.gw.Sidecar.Cmd.Process.Pid),
		envoy:   cpuTime(b.gw.Envoy.Cmd.Process.Pid),
		redis:   readRedisStats(b.rdb).cpu,
		store:   sidecarMetrics(b.gw.ControlURL + "/metrics"),
	}
}

// metered runs a slice and adds what its target's processes used to u.
func (b *bench) metered(t *target, u *cpuUse, slice func() int64) {
	before := b.cpuSnap(t)
	n := slice()
	after := b.cpuSnap(t)
	u.sidecar += after.sidecar - before.sidecar
	u.envoy += after.envoy - before.envoy
	u.redis += after.redis - before.redis
	u.requests += n
	u.admitSeconds += after.store.admitSum - before.store.admitSum
	u.admits += after.store.admitCount - before.store.admitCount
	u.settleSeconds += after.store.settleSum - before.store.settleSum
	u.settles += after.store.settleCount - before.store.settleCount
}

// latency measures non-streaming latency at each rate with an immediate
// vendor, then at one rate with a slow one, and counts the Redis commands
// the gateway's requests cost.
func (b *bench) latency() {
	p := b.plan
	req := request{messagesPath, messagesBody(false)}
	redis0 := readRedisStats(b.rdb)
	var gwRequests int64
	measure := func(rate float64, vendorMS int) {
		log.Printf("latency: %.0f requests/s, vendor +%d ms", rate, vendorMS)
		row := latencyRow{rate: rate, vendorMS: vendorMS, gw: newLatencies(), bare: newLatencies()}
		b.both(func(t *target) {
			l := load(t, req, rate, p.warm)
			if t == b.gwT {
				gwRequests += l.ok + l.failed // they reach Redis too
			}
		}, func(t *target) {
			dst, use := row.bare, &row.bareCPU
			if t == b.gwT {
				dst, use = row.gw, &row.gwCPU
			}
			b.metered(t, use, func() int64 {
				l := load(t, req, rate, p.slice)
				dst.merge(l)
				return l.ok + l.failed
			})
		})
		gwRequests += row.gwCPU.requests
		b.res.latency = append(b.res.latency, row)
	}
	b.vendor(nil)
	for _, rate := range p.rates {
		measure(rate, 0)
	}
	b.vendor(map[string]any{"latency_ms": p.slowLatencyMS})
	measure(p.slowRate, p.slowLatencyMS)
	b.vendor(nil)
	b.res.redis = readRedisStats(b.rdb).sub(redis0)
	b.res.redisRequests = gwRequests
	b.redisSample(req)
}

// redisSample watches a short gateway-only slice with MONITOR, to tell the
// sidecar's round trips to Redis from the commands its scripts run inside
// the server.
func (b *bench) redisSample(req request) {
	rate, d := 100.0, 2*time.Second
	if !b.plan.judge {
		rate, d = 50, time.Second
	}
	m, err := startMonitor(b.gw.RedisAddr)
	if err != nil {
		log.Printf("redis sample: %v", err)
		return
	}
	l := load(b.gwT, req, rate, d)
	time.Sleep(500 * time.Millisecond) // the last settlements reach Redis
	b.res.trace = m.stop()
	b.res.traceRequests = l.ok + l.failed
}

// streaming measures time to first byte and event delivery with the fake
// pacing events a little apart, so that each event is its own chunk through
// Envoy (and the sidecar) rather than several coalesced into one.
func (b *bench) streaming() {
	p := b.plan
	log.Printf("streaming: %.0f streams/s, events %d ms apart", p.streamRate, p.eventDelayMS)
	b.vendor(map[string]any{"event_delay_ms": p.eventDelayMS, "reply_words": p.replyWords})
	defer b.vendor(nil)
	req := request{messagesPath, messagesBody(true)}
	sr := &b.res.stream
	sr.gw, sr.bare = newStreams(), newStreams()
	b.both(func(t *target) { streamLoad(t, req, p.streamRate, p.warm) }, func(t *target) {
		dst, use := sr.bare, &sr.bareCPU
		if t == b.gwT {
			dst, use = sr.gw, &sr.gwCPU
		}
		b.metered(t, use, func() int64 {
			s := streamLoad(t, req, p.streamRate, p.slice)
			dst.merge(s)
			return s.ok + s.failed
		})
	})
}

// stepPasses is the sustained-rate criterion: every request answered 200,
// p99 from planned arrival under 50 ms, and the offered rate achieved.
func stepPasses(l *latencies, rate float64) bool {
	return l.errors() == 0 && l.schedule.ValueAtQuantile(99) < 50_000 && l.achieved() >= 0.97*rate
}

// sustained steps the offered rate up until each target fails the
// criterion twice in a row at one step (once may be the shared machine;
// a smoke run does not retry).
func (b *bench) sustained() {
	p := b.plan
	b.vendor(nil)
	req := request{messagesPath, messagesBody(false)}
	failed := map[*target]bool{}
	for i, rate := range p.steps {
		row := stepRow{rate: rate}
		order := []*target{b.gwT, b.bareT}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, t := range order {
			if failed[t] {
				continue
			}
			log.Printf("sustained: %s at %.0f requests/s", t.name, rate)
			l := load(t, req, rate, p.stepSlice)
			if !stepPasses(l, rate) && p.judge {
				time.Sleep(time.Second) // let the backlog drain
				log.Printf("sustained: %s failed at %.0f requests/s, once more", t.name, rate)
				l = load(t, req, rate, p.stepSlice)
			}
			ok := stepPasses(l, rate)
			if t == b.gwT {
				row.gw, row.gwOK = l, ok
				if ok {
					b.res.maxGW = rate
				}
			} else {
				row.bare, row.bareOK = l, ok
				if ok {
					b.res.maxBare = rate
				}
			}
			if !ok {
				failed[t] = true
				time.Sleep(time.Second)
			}
		}
		b.res.steps = append(b.res.steps, row)
		if failed[b.gwT] && failed[b.bareT] {
			break
		}
	}
}

// memory opens many slow streams through each target and reads how much
// the processes' resident memory grew: the sidecar's per-stream cost is
// the figure, and Envoy's own growth with and without ext_proc is shown
// beside it.
func (b *bench) memory() {
	p := b.plan
	log.Printf("memory: %d open streams", p.openStreams)
	// The first event comes at once, the next only after ten minutes:
	// every stream stays open, idle, until it is released.
	b.vendor(map[string]any{"event_delay_ms": 600_000, "reply_words": 3})
	defer b.vendor(nil)
	req := request{messagesPath, messagesBody(true)}
	m := &b.res.memory
	m.streams = p.openStreams
	metrics := b.gw.ControlURL + "/metrics"
	sidecarPid, gwEnvoy, bareEnvoy := b.gw.Sidecar.Cmd.Process.Pid, b.gw.Envoy.Cmd.Process.Pid, b.bare.Envoy.Cmd.Process.Pid

	for _, t := range []*target{b.gwT, b.bareT} {
		envoyPid := gwEnvoy
		if t == b.bareT {
			envoyPid = bareEnvoy
		}
		sc0, env0 := rssKB(sidecarPid), rssKB(envoyPid)
		go0 := sidecarMetrics(metrics)
		h := holdStreams(t, req, p.openStreams, p.openRate, 60*time.Second)
		time.Sleep(p.settle) // let the last streams' buffers settle
		open, failed, errs := h.counts()
		sc1, env1 := rssKB(sidecarPid), rssKB(envoyPid)
		go1 := sidecarMetrics(metrics)
		h.release()
		log.Printf("memory: %s: %d open, %d failed %v", t.name, open, failed, errs)
		if t == b.gwT {
			m.gwOpen, m.gwFailed = open, failed
			m.sidecarKB = float64(sc1-sc0) / float64(max(open, 1))
			m.gwEnvoyKB = float64(env1-env0) / float64(max(open, 1))
			n := float64(max(open, 1))
			m.heapKB = (go1.heapInuse - go0.heapInuse) / 1024 / n
			m.stackKB = (go1.stackInuse - go0.stackInuse) / 1024 / n
			m.goroutines = (go1.goroutines - go0.goroutines) / n
			m.sidecarBase, m.sidecarPeak = sc0, sc1
		} else {
			m.bareOpen, m.bareFailed = open, failed
			m.bareEnvoyKB = float64(env1-env0) / float64(max(open, 1))
		}
		time.Sleep(p.settle) // released streams settle before the next phase
	}
}

// machineUsage is the CPU time of the whole machine and of the bench's own
// processes: the client (this process), both Envoys, the sidecar, Redis and
// the fakes. The rest is other work sharing the machine, which the report
// states so that a noisy run is seen to be one.
func (b *bench) machineUsage() usage {
	var u usage
	u.busy, u.total = machineCPU()
	u.own = cpuTime(os.Getpid()) + readRedisStats(b.rdb).cpu
	for _, s := range []*launch.Stack{b.gw, b.bare} {
		for _, p := range []*launch.Process{s.Envoy, s.Sidecar, s.Primary.Process, s.Reserve.Process} {
			if p != nil {
				u.own += cpuTime(p.Cmd.Process.Pid)
			}
		}
	}
	return u
}

// usage is machine-wide and own CPU time; see machineUsage.
type usage struct {
	busy, total, own time.Duration
}

func (u usage) sub(o usage) usage {
	return usage{busy: u.busy - o.busy, total: u.total - o.total, own: u.own - o.own}
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, " ") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
