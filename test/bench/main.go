// Command bench measures what the gateway costs on top of the proxy it is
// built on, in front of one shared fake vendor, on three stacks measured in
// the same run: the gateway (Envoy with the ext_proc filter, the sidecar and
// Redis), the floor (the same Envoy bootstrap and processing modes with a
// null processor that answers CONTINUE to every message) and bare Envoy
// (the same listener and routes without the ext_proc filter).
//
//	go run ./test/bench -out test/bench/results.md   # the full run, ~5 minutes
//	go run ./test/bench -smoke -out bin/bench-smoke.md  # a few seconds, for CI
//
// Every figure is taken on all stacks in short alternating slices (gateway,
// null, bare, then bare, null, gateway, …) so that whatever else the machine
// is doing falls on each about equally and cancels in the differences. The results are a
// markdown report, printed and written to -out. Nothing here asserts a
// timing: targets are printed next to the figures for a person to judge.
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
)

func main() {
	var (
		out         = flag.String("out", "", "write the markdown report to this file too")
		smoke       = flag.Bool("smoke", false, "tiny rates and durations: exercise the harness in seconds, judge nothing")
		quick       = flag.Bool("quick", false, "non-streaming latency and CPU at 500 and 1,000 requests/s only (about a minute): to compare a change")
		open        = flag.Int("open", -1, "concurrent open streams for the memory phase (default: the plan's; 0 skips it)")
		rates       = flag.String("rates", "", "comma-separated request rates for the non-streaming latency phase, replacing the plan's (e.g. -quick -rates 1500: the knee)")
		note        = flag.String("note", "", "a line for the report's header, e.g. that the machine was shared")
		profile     = flag.String("cpuprofile-sidecar", "", "record the sidecar with perf(1) under load into this file (perf.data format; a text summary goes to FILE.txt)")
		null        = flag.String("null-processor", "", "internal: serve the null ext_proc processor on this address and nothing else")
		nullMetrics = flag.String("null-metrics", "", "internal: with -null-processor, serve its Go runtime's metrics on this address")
		otlp        = flag.String("otlp-collector", "", "internal: serve the span-counting OTLP collector on this address and nothing else")
		tracePct    = flag.Float64("trace-percent", -1, "trace this share of requests (0-100) to an OTLP collector (a child process), in every stack's Envoy (the floor is the same Envoy) and the sidecar; off by default")
		traceGw     = flag.Bool("trace-gateway-only", false, "with -trace-percent: trace the gateway stack only, leaving the floor and bare Envoy untraced (what tracing costs in all)")
		sink        = flag.Bool("sink", false, "run the ledger sink against the gateway's Redis, into a PostgreSQL the bench starts")
		leasesOn    = flag.String("leases", "", "on or off: run the gateway with limits.leases so (default: the config's default), to compare admission from escrow leases with the per-request script in the same run's floor")
		hooksOff    = flag.Bool("webhook-down", false, "send the gateway's alerts to a webhook receiver that accepts connections and never answers, with alerts pending for the whole run")
		streams     = flag.Bool("streams", false, "with -quick: also the streaming phases (time to first event and delivery delay, messages, Responses and sockets)")
		anatomy     = flag.Bool("pool-anatomy", false, "with -pool: also split the pool's Envoy cost into its parts, on bare Envoy (three more stacks)")
		poolRounds  = flag.Int("pool-rounds", 12, "with -pool: rounds per rate of the comparison (at least the plan's)")
		pool        = flag.Int("pool", 0, "also compare, in the same run and at the plan's rates, a gateway with a pool of this many vendor keys per upstream against one with one key (two more stacks; at least 2)")
		env         listFlag
		nullEnv     listFlag
	)
	flag.Var(&env, "sidecar-env", "KEY=VALUE for the sidecar's environment, repeatable (e.g. GOMAXPROCS=1, GOGC=200) to try a setting")
	flag.Var(&nullEnv, "null-env", "KEY=VALUE for the null processor's environment, repeatable: the floor under the same runtime setting as -sidecar-env's")
	flag.Parse()
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if *null != "" {
		serveNull(*null, *nullMetrics)
		return
	}
	if *otlp != "" {
		serveCollector(*otlp)
		return
	}

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
	switch {
	case *smoke:
		p = smokePlan
	case *quick:
		p = quickPlan
	}
	if *streams {
		p.streamRate, p.eventDelayMS, p.replyWords = fullPlan.streamRate, fullPlan.eventDelayMS, fullPlan.replyWords
	}
	if *open >= 0 {
		p.openStreams, p.openRate, p.settle = *open, 1000, 2*time.Second
	}
	if *rates != "" {
		// The targets are set at 500 and 1,000 requests/s.
		p.rates, p.judge = nil, false
		for _, r := range strings.Split(*rates, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(r), 64)
			if err != nil || v <= 0 {
				log.Fatalf("-rates: %q is not a rate", r)
			}
			p.rates = append(p.rates, v)
		}
	}
	b := start(tb, p, env, options{tracePct: *tracePct, traceGatewayOnly: *traceGw, webhookDown: *hooksOff, leases: *leasesOn, nullEnv: nullEnv})
	b.res.note = *note
	var ls *ledgerSink
	if *sink {
		ls = startLedgerSink(tb, b.gw)
	}
	usage0 := b.machineUsage()
	b.run()
	if *profile != "" {
		b.profileSidecar(*profile)
	}
	var pb *poolBench
	var pa *poolAnatomy
	if *pool > 1 {
		pb = startPoolBench(tb, *pool, env)
		pb.run(p, max(p.rounds, *poolRounds))
		if *anatomy {
			pa = startPoolAnatomy(tb, *pool)
			pa.run(p, max(p.rounds, *poolRounds))
		}
	}
	b.res.usage = b.machineUsage().sub(usage0)
	b.res.finished = time.Now()
	b.res.loadEnd = loadAvg()
	var extra []string
	if b.traces != nil {
		who := "every stack's Envoy and the sidecar"
		if *traceGw {
			who = "the gateway stack only"
		}
		extra = append(extra, fmt.Sprintf("%s traced at %g %% to an OTLP collector (a child process at nice 19; %d spans received)", who, *tracePct, b.traces.stop()))
	}
	if ls != nil {
		extra = append(extra, "ledger sink running: "+ls.status())
	}
	if b.hooks != nil {
		extra = append(extra, "alerts sent to a webhook receiver that never answers: "+b.hooks.status(b.gw))
	}
	if len(extra) > 0 {
		b.res.note = strings.TrimPrefix(b.res.note+"; "+strings.Join(extra, "; "), "; ")
	}

	report := b.res.markdown()
	if pb != nil {
		report += pb.markdown()
	}
	if pa != nil {
		report += pa.markdown()
	}
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
	// refine is how many times each stack's interval between its last
	// passing and its first failing step is halved after the steps: the
	// steps near a knee are 25–33 % apart, too coarse to judge one rate
	// against 80 % of another.
	refine int

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
	steps: []float64{1000, 1500, 2000, 2500, 3000, 3500, 4000, 4500, 5000, 5500, 6000, 7000, 8000, 10000}, stepSlice: 4 * time.Second,
	refine:     3,
	streamRate: 100, eventDelayMS: 2, replyWords: 20,
	openStreams: 5000, openRate: 1000, settle: 2 * time.Second,
	judge: true,
}

var smokePlan = plan{
	name: "smoke", warm: 300 * time.Millisecond, slice: 400 * time.Millisecond, rounds: 2,
	rates: []float64{100, 200}, slowRate: 100, slowLatencyMS: 20,
	steps: []float64{200, 400}, stepSlice: time.Second,
	streamRate: 20, eventDelayMS: 2, replyWords: 5,
	openStreams: 50, openRate: 200, settle: 200 * time.Millisecond,
}

var quickPlan = plan{
	name: "quick", warm: time.Second, slice: 3 * time.Second, rounds: 4,
	rates: []float64{500, 1000},
}

// The three stacks, in the order of every per-stack array.
const (
	gwI   = iota // the gateway: Envoy with ext_proc, the sidecar, Redis
	nullI        // the floor: the same Envoy with the null processor
	bareI        // bare Envoy: no ext_proc filter
	nStacks
)

var stackNames = [nStacks]string{"gateway", "null processor", "bare Envoy"}

// bench holds the three stacks and what has been measured.
type bench struct {
	tb                *benchTB
	plan              plan
	gw, null, bare    *launch.Stack
	nullPid           int
	nullMetrics       string // the null processor's metrics URL
	targets           [nStacks]*target
	gwT, nullT, bareT *target
	rdb               *redis.Client
	res               *results
	traces            *collectorProcess // nil unless tracing
	hooks             *deadReceiver     // nil unless -webhook-down
}

// The request every non-streaming slice sends: the messages format, a small body.
const (
	messagesPath = "/alpha/v1/messages"
	benchModel   = "claude-sonnet-4-5"
)

// The responses stream: a Codex model, served on the Responses API only.
const responsesPath = "/beta/v1/responses"

var responsesBody = []byte(`{"model":"gpt-5.1-codex","stream":true,"max_output_tokens":256,"instructions":"Be brief.","input":"Hello there, gateway"}`)

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
// options are the gateway's optional parts under measurement.
type options struct {
	tracePct         float64 // < 0: tracing off
	traceGatewayOnly bool    // else the floor's and bare Envoy's bootstraps trace alike
	webhookDown      bool
	leases           string   // "on", "off" or "" (the default)
	nullEnv          []string // the null processor's environment, appended to the bench's
}

func start(tb *benchTB, p plan, sidecarEnv []string, o options) *bench {
	res := &results{plan: p, started: time.Now(), env: readEnvironment(tb), loadStart: loadAvg(), sidecarEnv: sidecarEnv, nullEnv: o.nullEnv}
	var traces *collectorProcess
	var configures []func(*config.Config)
	traced := func(*config.Config) {} // the other stacks' tracing
	if o.tracePct >= 0 {
		var addr string
		traces, addr = startCollector(tb)
		trace := func(c *config.Config) {
			c.Tracing = config.Tracing{Endpoint: addr, Protocol: config.TracingGRPC, SamplingPercent: &o.tracePct}
		}
		configures = append(configures, trace)
		if !o.traceGatewayOnly {
			// Envoy's tracer costs every request a span, sampled or
			// not: the floor is the same Envoy, so it traces too.
			traced = trace
		}
	}
	var hooks *deadReceiver
	if o.webhookDown {
		hooks = startDeadReceiver(tb)
		configures = append(configures, hooks.configure)
		sidecarEnv = append(slices.Clip(sidecarEnv), hooks.env())
	}
	if o.leases != "" {
		configures = append(configures, func(c *config.Config) { c.Limits.Leases = o.leases })
	}
	configure := func(c *config.Config) {
		for _, f := range configures {
			f(c)
		}
	}
	log.Printf("starting the gateway stack")
	gw := up(tb, launch.Options{
		// Production's log level: the per-request log line is part of
		// the cost being measured.
		SidecarArgs: []string{"--log-level", "info"},
		SidecarEnv:  sidecarEnv,
		Configure:   configure,
	})
	// The other stacks reach the gateway's own fake vendor.
	sameVendor := func(c *config.Config) {
		traced(c)
		for i := range c.Upstreams {
			u := &c.Upstreams[i]
			addr := gw.Primary.Addrs.ChatCompletions
			if u.Format == config.FormatMessages {
				addr = gw.Primary.Addrs.Messages
			}
			u.Primary.URL = "http://" + addr
			u.Reserve.URL = "http://" + addr
		}
	}
	log.Printf("starting the null processor stack")
	nullAddr, nullMetrics, nullPid := startNull(tb, o.nullEnv)
	null := up(tb, launch.Options{ExtProcAddr: nullAddr, Configure: sameVendor})
	log.Printf("starting the bare Envoy stack")
	bare := up(tb, launch.Options{Bare: true, Configure: sameVendor})
	acct := gw.NewAccount(1_000_000, account.Limits{})
	if hooks != nil {
		hooks.alertAccounts(tb, gw)
	}
	// The null processor swaps no credential: send the vendor's own key.
	vendorHeaders := map[string]string{
		"x-api-key": launch.AlphaVendorKey, "anthropic-version": "2023-06-01", "content-type": "application/json",
	}
	b := &bench{
		tb: tb, plan: p, gw: gw, null: null, bare: bare, nullPid: nullPid, nullMetrics: nullMetrics, res: res, traces: traces, hooks: hooks,
		gwT: newTarget("gateway", gw.URL, map[string]string{
			"x-api-key": acct.Key, "anthropic-version": "2023-06-01", "content-type": "application/json",
		}),
		nullT: newTarget("null", null.URL, vendorHeaders),
		bareT: newTarget("bare", bare.URL, vendorHeaders),
		rdb:   redis.NewClient(&redis.Options{Addr: gw.RedisAddr}),
	}
	b.targets = [nStacks]*target{b.gwT, b.nullT, b.bareT}
	for i, t := range b.targets {
		t.idx = i
	}
	tb.Cleanup(func() { b.rdb.Close() })
	b.check()
	return b
}

// check sends one request of each kind to each target and stops the run if
// any is not a 200 with the fake's timestamps: measuring errors would be
// meaningless.
func (b *bench) check() {
	for _, t := range b.targets {
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
	if b.plan.openStreams > 0 {
		b.memory()
		// Thousands of streams cut at once must leave every stack
		// serving: stop here, with the processes' logs, if one is not.
		b.check()
	}
	b.latency()
	if b.plan.streamRate > 0 {
		b.streaming(&b.res.stream, request{messagesPath, messagesBody(true)})
		b.streaming(&b.res.respStream, request{responsesPath, responsesBody})
		b.socketPhase()
	}
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

// all runs f once per target per round, reversing the order every other
// round so that a drift in the machine's load over a phase favours none,
// after a discarded warm-up slice each.
func (b *bench) all(warm func(t *target), f func(t *target)) {
	for _, t := range b.targets {
		warm(t)
	}
	for r := range b.plan.rounds {
		order := b.targets
		if r%2 == 1 {
			slices.Reverse(order[:])
		}
		for _, t := range order {
			f(t)
		}
	}
}

// cpuSnap is the CPU time used so far by the processes behind a target
// (the processor is the sidecar or the null processor).
type cpuSnap struct {
	sidecar, envoy, redis time.Duration
	switches              int64
}

func (b *bench) cpuSnap(t *target) cpuSnap {
	switch t {
	case b.bareT:
		return cpuSnap{envoy: cpuTime(b.bare.Envoy.Cmd.Process.Pid)}
	case b.nullT:
		return cpuSnap{sidecar: cpuTime(b.nullPid), switches: switches(b.nullPid), envoy: cpuTime(b.null.Envoy.Cmd.Process.Pid)}
	}
	return cpuSnap{
		sidecar:  cpuTime(b.gw.Sidecar.Cmd.Process.Pid),
		switches: switches(b.gw.Sidecar.Cmd.Process.Pid),
		envoy:    cpuTime(b.gw.Envoy.Cmd.Process.Pid),
		redis:    readRedisStats(b.rdb).cpu,
	}
}

// processorStats reads a target's processor's metrics: for the gateway the
// sidecar's store timings, for both its Go heap.
func (b *bench) processorStats(t *target) sidecarStats {
	switch t {
	case b.bareT:
		return sidecarStats{}
	case b.nullT:
		return sidecarMetrics(b.nullMetrics)
	}
	return sidecarMetrics(b.gw.ControlURL + "/metrics")
}

// metered runs a slice and adds what its target's processes used to u.
// The metrics are read outside the interval the CPU time is taken over:
// a scrape of the sidecar's costs it about 5 ms, which inside a slice of
// 3,000 requests would add almost 2 µs to each.
func (b *bench) metered(t *target, u *cpuUse, slice func() int64) {
	stats0 := b.processorStats(t)
	before := b.cpuSnap(t)
	n := slice()
	after := b.cpuSnap(t)
	stats1 := b.processorStats(t)
	u.sidecar += after.sidecar - before.sidecar
	u.envoy += after.envoy - before.envoy
	u.redis += after.redis - before.redis
	u.switches += after.switches - before.switches
	u.requests += n
	u.admitSeconds += stats1.admitSum - stats0.admitSum
	u.admits += stats1.admitCount - stats0.admitCount
	u.leaseAdmits += stats1.leaseAdmits - stats0.leaseAdmits
	u.storeAdmits += stats1.storeAdmits - stats0.storeAdmits
	u.settleSeconds += stats1.settleSum - stats0.settleSum
	u.settles += stats1.settleCount - stats0.settleCount
	u.allocBytes += stats1.allocBytes - stats0.allocBytes
	u.gcCycles += stats1.gcCycles - stats0.gcCycles
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
		row := latencyRow{rate: rate, vendorMS: vendorMS}
		for i := range row.lat {
			row.lat[i] = newLatencies()
		}
		b.all(func(t *target) {
			l := load(t, req, rate, p.warm)
			if t == b.gwT {
				gwRequests += l.ok + l.failed // they reach Redis too
			}
		}, func(t *target) {
			dst, use := row.lat[t.idx], &row.cpu[t.idx]
			b.metered(t, use, func() int64 {
				l := load(t, req, rate, p.slice)
				dst.merge(l)
				return l.ok + l.failed
			})
		})
		gwRequests += row.cpu[gwI].requests
		b.res.latency = append(b.res.latency, row)
	}
	b.vendor(nil)
	for _, rate := range p.rates {
		measure(rate, 0)
	}
	if p.slowRate > 0 {
		b.vendor(map[string]any{"latency_ms": p.slowLatencyMS})
		measure(p.slowRate, p.slowLatencyMS)
		b.vendor(nil)
	}
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
func (b *bench) streaming(sr *streamResult, req request) {
	p := b.plan
	log.Printf("streaming %s: %.0f streams/s, events %d ms apart", req.path, p.streamRate, p.eventDelayMS)
	b.vendor(map[string]any{"event_delay_ms": p.eventDelayMS, "reply_words": p.replyWords})
	defer b.vendor(nil)
	for i := range sr.s {
		sr.s[i] = newStreams()
	}
	b.all(func(t *target) { streamLoad(t, req, p.streamRate, p.warm) }, func(t *target) {
		dst, use := sr.s[t.idx], &sr.cpu[t.idx]
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
	var knees [nStacks]knee // each stack's last passing and first failing step
	for i, rate := range p.steps {
		row := stepRow{rate: rate}
		order := b.targets
		if i%2 == 1 {
			slices.Reverse(order[:])
		}
		for _, t := range order {
			if failed[t] {
				continue
			}
			l, ok, use := b.try(t, req, rate)
			row.l[t.idx], row.ok[t.idx], row.cpu[t.idx] = l, ok, use
			if ok {
				b.res.maxRate[t.idx] = rate
			}
			if !ok {
				failed[t] = true
				if lo := b.res.maxRate[t.idx]; lo > 0 {
					knees[t.idx] = knee{lo: lo, hi: rate}
				}
				time.Sleep(time.Second)
			}
		}
		b.res.steps = append(b.res.steps, row)
		if len(failed) == nStacks {
			break
		}
	}
	b.refine(req, &knees)
}

// try offers t rate for a step's slice and reports whether it passes,
// trying a failure once more as the steps do, and what t's processes used
// over the slice judged (metered: the gateway's admissions by lease and by
// the store among it).
func (b *bench) try(t *target, req request, rate float64) (*latencies, bool, cpuUse) {
	p := b.plan
	log.Printf("sustained: %s at %.0f requests/s", t.name, rate)
	slice := func() (l *latencies, use cpuUse) {
		b.metered(t, &use, func() int64 {
			l = load(t, req, rate, p.stepSlice)
			return l.ok + l.failed
		})
		return l, use
	}
	l, use := slice()
	if !stepPasses(l, rate) && p.judge {
		time.Sleep(time.Second) // let the backlog drain
		log.Printf("sustained: %s failed at %.0f requests/s, once more", t.name, rate)
		l, use = slice()
	}
	return l, stepPasses(l, rate), use
}

// refine bisects each stack's knee (the zero knee of a stack that passed
// every step, or none, is left), a round at a time with every stack's
// midpoint in each round (the order alternating), so that noise falls on
// all of them alike. The stack's highest sustained rate is the highest
// rate it passed.
func (b *bench) refine(req request, knees *[nStacks]knee) {
	for round := range b.plan.refine {
		order := b.targets
		if round%2 == 0 {
			slices.Reverse(order[:])
		}
		for _, t := range order {
			k := &knees[t.idx]
			rate, ok := k.next()
			if !ok {
				continue
			}
			row := stepRow{rate: rate, refined: true}
			l, pass, use := b.try(t, req, rate)
			row.l[t.idx], row.ok[t.idx], row.cpu[t.idx] = l, pass, use
			k.record(rate, pass)
			b.res.maxRate[t.idx] = k.lo
			b.res.steps = append(b.res.steps, row)
			if !pass {
				time.Sleep(time.Second)
			}
		}
	}
}

// knee is a stack's interval between a rate it passed (lo) and one it
// failed (hi); the zero knee has none to halve.
type knee struct{ lo, hi float64 }

// next is the rate to try: the interval's midpoint to the nearest 10/s,
// while that is a rate of its own.
func (k *knee) next() (float64, bool) {
	if k.hi == 0 {
		return 0, false
	}
	mid := math.Round((k.lo+k.hi)/20) * 10
	if mid <= k.lo || mid >= k.hi {
		return 0, false
	}
	return mid, true
}

func (k *knee) record(rate float64, passed bool) {
	if passed {
		k.lo = rate
	} else {
		k.hi = rate
	}
}

// memory opens many slow streams through each target and reads how much
// the processes' resident memory grew: the sidecar's per-stream cost is
// the figure, and the null processor's and each Envoy's growth are shown
// beside it. Every stream must open: Envoy's circuit breakers (1,024
// requests by default) must not refuse any.
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
	envoys := [nStacks]int{b.gw.Envoy.Cmd.Process.Pid, b.null.Envoy.Cmd.Process.Pid, b.bare.Envoy.Cmd.Process.Pid}
	procs := [nStacks]int{b.gw.Sidecar.Cmd.Process.Pid, b.nullPid, 0}

	for _, t := range b.targets {
		i := t.idx
		var proc0, proc1 int64
		if procs[i] != 0 {
			proc0 = rssKB(procs[i])
		}
		env0 := rssKB(envoys[i])
		go0 := sidecarMetrics(metrics)
		h := holdStreams(t, req, p.openStreams, p.openRate, 90*time.Second)
		time.Sleep(p.settle) // let the last streams' buffers settle
		open, failed, errs := h.counts()
		if procs[i] != 0 {
			proc1 = rssKB(procs[i])
		}
		env1 := rssKB(envoys[i])
		go1 := sidecarMetrics(metrics)
		h.release()
		log.Printf("memory: %s: %d open, %d failed %v", t.name, open, failed, errs)
		n := float64(max(open, 1))
		m.open[i], m.failed[i] = open, failed
		m.errs[i] = errs
		m.envoyKB[i] = float64(env1-env0) / n
		m.procKB[i] = float64(proc1-proc0) / n
		if i == gwI {
			m.heapKB = (go1.heapInuse - go0.heapInuse) / 1024 / n
			m.stackKB = (go1.stackInuse - go0.stackInuse) / 1024 / n
			m.goroutines = (go1.goroutines - go0.goroutines) / n
			m.sidecarBase, m.sidecarPeak = proc0, proc1
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
	u.own += cpuTime(b.nullPid)
	for _, s := range []*launch.Stack{b.gw, b.null, b.bare} {
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
