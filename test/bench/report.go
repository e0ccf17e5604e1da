package main

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/modelgateway/gateway/test/launch"
)

// environment describes the machine, so that figures from different runs
// are not compared blindly.
type environment struct {
	cores     int
	cpuModel  string
	memGiB    float64
	kernel    string
	envoy     string
	goVersion string
}

func readEnvironment(tb *benchTB) environment {
	e := environment{cores: runtime.NumCPU(), goVersion: runtime.Version()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				e.cpuModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				e.memGiB = kb / (1 << 20)
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		e.kernel = strings.TrimSpace(string(b))
	}
	if bin, err := launch.FindEnvoy(); err != nil {
		tb.Fatal(err)
	} else if out, err := exec.Command(bin, "--version").Output(); err == nil {
		// "/path/to/envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
		_, v, _ := strings.Cut(string(out), "version:")
		if parts := strings.Split(strings.TrimSpace(v), "/"); len(parts) > 1 {
			v = parts[1]
		}
		e.envoy = strings.TrimSpace(v)
	}
	return e
}

// loadAvg is the one-minute load average: how busy the machine was
// around the run, other work included.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}

// cpuUse is CPU time spent by the processes behind a target over some
// slices, and the requests those slices completed.
type cpuUse struct {
	sidecar, envoy, redis time.Duration
	requests              int64
	switches              int64 // the processor's context switches (sidecar or null processor)

	// The sidecar's own timings of its two store steps (gateway only).
	admitSeconds, admits   float64
	settleSeconds, settles float64
	// Admissions decided from a lease and by the store's script (leases
	// on; both 0 with leases off, when every admission is the script's).
	leaseAdmits, storeAdmits float64
	allocBytes, gcCycles     float64 // the processor's Go heap allocations and collections (the null processor's: allocations only)
}

// byStore is the share of the admissions the store's script decided
// while leases were on: each a Redis round trip on the request's path;
// "—" with leases off.
func (c cpuUse) byStore() string {
	n := c.leaseAdmits + c.storeAdmits
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%.1f %%)", thousands(int64(c.storeAdmits)), 100*c.storeAdmits/n)
}

// allocKB is what the processor allocated per request it served, in KB;
// false when its metrics were not read.
func (c cpuUse) allocKB() (float64, bool) {
	if c.requests == 0 || c.allocBytes == 0 {
		return 0, false
	}
	return c.allocBytes / float64(c.requests) / 1024, true
}

// meanMS is the mean of a Prometheus histogram's sum over its count, in
// milliseconds.
func meanMS(sum, count float64) string {
	if count == 0 {
		return "—"
	}
	return fmt.Sprintf("%.3f ms", 1000*sum/count)
}

// per is d per request in microseconds.
func (u cpuUse) per(d time.Duration) float64 {
	if u.requests == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(u.requests)
}

type latencyRow struct {
	rate     float64
	vendorMS int
	lat      [nStacks]*latencies
	cpu      [nStacks]cpuUse
}

type stepRow struct {
	rate    float64
	refined bool                // a rate between two steps (bench.refine)
	l       [nStacks]*latencies // nil: not run, the stack had already failed
	ok      [nStacks]bool
	cpu     [nStacks]cpuUse // over the slice judged
}

type streamResult struct {
	s   [nStacks]*streams
	cpu [nStacks]cpuUse
}

type memoryResult struct {
	streams                  int
	open, failed             [nStacks]int
	errs                     [nStacks]map[string]int
	envoyKB                  [nStacks]float64 // per stream
	procKB                   [nStacks]float64 // processor RSS per stream: sidecar, null processor
	heapKB, stackKB          float64          // sidecar, per stream
	goroutines               float64          // sidecar, per stream
	sidecarBase, sidecarPeak int64            // KiB
}

// results is everything one run measured.
type results struct {
	plan               plan
	env                environment
	note               string
	sidecarEnv         []string
	nullEnv            []string
	started, finished  time.Time
	loadStart, loadEnd string

	memory        memoryResult
	latency       []latencyRow
	stream        streamResult
	respStream    streamResult // the same load as stream, on /beta/v1/responses
	socket        streamResult // the gateway's sockets (gwI) against respStream's floors
	steps         []stepRow
	maxRate       [nStacks]float64
	usage         usage
	redis         redisStats
	redisRequests int64
	trace         redisTrace
	traceRequests int64
	profile       string
}

func pct(a, b time.Duration) float64 { return 100 * float64(a) / float64(max(b, 1)) }

// ms formats microseconds as milliseconds.
func ms(us int64) string { return fmt.Sprintf("%.3f ms", float64(us)/1000) }

// diffMS formats a signed difference of microseconds as milliseconds.
func diffMS(us int64) string { return fmt.Sprintf("%+.3f ms", float64(us)/1000) }

func q(h *hdrhistogram.Histogram, p float64) int64 {
	if h.TotalCount() == 0 {
		return 0
	}
	return h.ValueAtQuantile(p)
}

func rate(r float64) string { return thousands(int64(r)) }

func thousands(n int64) string {
	sign := ""
	if n < 0 {
		sign, n = "-", -n
	}
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return sign + s
}

// verdict compares a figure with its target; smoke runs judge nothing.
func (r *results) verdict(ok bool) string {
	switch {
	case !r.plan.judge:
		return "n/a (" + r.plan.name + ")"
	case ok:
		return "yes"
	}
	return "**no**"
}

// ignoredRedis are commands the bench itself sends to Redis (and the
// clients' handshake); they are not the gateway's.
var ignoredRedis = map[string]bool{"info": true, "ping": true, "hello": true, "client|setinfo": true, "client|setname": true}

func (r *results) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	e := r.env

	w("# Gateway benchmark: against the ext_proc floor and bare Envoy\n\n")
	w("- Date: %s (UTC); run took %s; plan: %s\n", r.started.UTC().Format("2006-01-02 15:04"),
		r.finished.Sub(r.started).Round(time.Second), r.plan.name)
	w("- Machine: %d cores (%s), %.1f GiB memory, Linux %s; load average %s at the start, %s at the end\n",
		e.cores, e.cpuModel, e.memGiB, e.kernel, r.loadStart, r.loadEnd)
	w("- Envoy %s, `--concurrency 2`, for every stack; %s; sidecar at `--log-level info`", e.envoy, e.goVersion)
	if len(r.sidecarEnv) > 0 {
		w(", sidecar environment `%s`", strings.Join(r.sidecarEnv, " "))
	}
	if len(r.nullEnv) > 0 {
		w(", null processor environment `%s`", strings.Join(r.nullEnv, " "))
	}
	w("\n")
	if u := r.usage; u.total > 0 {
		others := max(u.busy-u.own, 0)
		w("- CPU over the run: the machine was %.0f%% busy; the bench's own processes (client, three Envoys, sidecar, null processor, Redis, fakes) used %.0f%% of its capacity, other work %.0f%%\n",
			pct(u.busy, u.total), pct(u.own, u.total), pct(others, u.total))
	}
	if r.note != "" {
		w("- Note: %s\n", r.note)
	}
	w("- Setup: three stacks in front of one shared fake vendor process: the **gateway** (Envoy with ext_proc, the sidecar, redis-server); " +
		"the **null processor**, the floor of this design (the same Envoy bootstrap and processing modes, the ext_proc filter talking to a processor " +
		"that answers CONTINUE to every message); and **bare Envoy** (same listener and routes, no ext_proc filter). " +
		"\"Added\" is a stack's figure minus bare Envoy's. Client, proxies, processors, Redis and fake all on this machine. " +
		"Each figure alternates short slices between the stacks (gateway, null, bare, then the reverse, …) after a discarded warm-up slice each, " +
		"so machine noise falls on all of them. Open-model load (fixed arrival rate), keep-alive HTTP/1.1 connections, latencies in HDR histograms.\n\n")

	r.summary(w)
	r.latencyTable(w)
	r.streamTable(w, "Streaming", r.stream, "the messages format")
	r.streamTable(w, "Streaming: the Responses API", r.respStream, "`POST /beta/v1/responses`, the responses format")
	r.streamTable(w, "Streaming: the Responses API over WebSocket", r.socket,
		"the gateway column: `response.create` on a few open sockets, one response at a time each, paced to the SSE phases' rate (\"response headers\" is the first message); "+
			"the null and bare columns: the SSE streams above, the floor a socket message is compared with")
	r.stepTable(w)
	r.cpuTable(w)
	r.memoryTable(w)
	r.redisTable(w)
	if r.profile != "" {
		w("## Sidecar CPU profile\n\n%s\n", r.profile)
	}
	return b.String()
}

func (r *results) row(rate float64, vendorMS int) *latencyRow {
	for i := range r.latency {
		if r.latency[i].rate == rate && r.latency[i].vendorMS == vendorMS {
			return &r.latency[i]
		}
	}
	return nil
}

// added returns the gateway's and the null processor's figure minus bare
// Envoy's, in microseconds.
func added(h [nStacks]*hdrhistogram.Histogram, p float64) (gw, null int64) {
	bare := q(h[bareI], p)
	return q(h[gwI], p) - bare, q(h[nullI], p) - bare
}

func (r *results) summary(w func(string, ...any)) {
	w("## Against the targets\n\n")
	w("| figure | gateway | null processor (floor) | bare Envoy | gateway added | floor added | target | met |\n|---|---:|---:|---:|---:|---:|---|---|\n")
	refs := []float64{500, 1000}
	if !r.plan.judge {
		refs = r.plan.rates
	}
	for _, ref := range refs {
		lr := r.row(ref, 0)
		if lr == nil {
			continue
		}
		h := [nStacks]*hdrhistogram.Histogram{lr.lat[gwI].service, lr.lat[nullI].service, lr.lat[bareI].service}
		// A figure counts only if the gateway answered every request.
		clean := lr.lat[gwI].errors() == 0 && lr.lat[gwI].ok > 0
		g, n := added(h, 50)
		w("| p50 latency at %s requests/s | %s | %s | %s | %s | %s | gateway added ≤ floor + 0.2 ms | %s |\n", rate(ref),
			ms(q(h[gwI], 50)), ms(q(h[nullI], 50)), ms(q(h[bareI], 50)), diffMS(g), diffMS(n), r.verdict(clean && g <= n+200))
		g, n = added(h, 99)
		w("| p99 latency at %s requests/s | %s | %s | %s | %s | %s | gateway added ≤ 1.5 × floor's | %s |\n", rate(ref),
			ms(q(h[gwI], 99)), ms(q(h[nullI], 99)), ms(q(h[bareI], 99)), diffMS(g), diffMS(n), r.verdict(clean && float64(g) <= 1.5*float64(max(n, 0))))
	}
	for _, sr := range []struct {
		prefix string
		s      streamResult
	}{{"", r.stream}, {"responses stream: ", r.respStream}} {
		s := sr.s
		if s.s[gwI] == nil {
			continue
		}
		clean := s.s[gwI].errors() == 0 && s.s[gwI].ok > 0
		h := [nStacks]*hdrhistogram.Histogram{s.s[gwI].firstEvent, s.s[nullI].firstEvent, s.s[bareI].firstEvent}
		g, n := added(h, 50)
		w("| %stime to first event, p50 | %s | %s | %s | %s | %s | gateway added ≤ floor + 0.2 ms | %s |\n", sr.prefix,
			ms(q(h[gwI], 50)), ms(q(h[nullI], 50)), ms(q(h[bareI], 50)), diffMS(g), diffMS(n), r.verdict(clean && g <= n+200))
		h = [nStacks]*hdrhistogram.Histogram{s.s[gwI].delivery, s.s[nullI].delivery, s.s[bareI].delivery}
		for _, pc := range []float64{50, 99} {
			g, n = added(h, pc)
			// "Equal to the floor's": within the 0.1 ms a scheduling
			// hiccup on a shared 2-core machine moves either.
			w("| %sper-event delivery delay, p%.0f | %s | %s | %s | %s | %s | equal to the floor's (± 0.1 ms) | %s |\n", sr.prefix, pc,
				ms(q(h[gwI], pc)), ms(q(h[nullI], pc)), ms(q(h[bareI], pc)), diffMS(g), diffMS(n), r.verdict(clean && g <= n+100))
		}
	}
	if lr := r.row(refs[len(refs)-1], 0); lr != nil {
		g, n := lr.cpu[gwI], lr.cpu[nullI]
		gwCPU := g.per(g.sidecar) + g.per(g.redis)
		nullCPU := n.per(n.sidecar)
		w("| processor CPU per request at %s requests/s (sidecar + Redis; null processor) | %.0f µs | %.0f µs | — | — | — | ≤ 1.2 × the null processor's | %s |\n",
			rate(lr.rate), gwCPU, nullCPU, r.verdict(nullCPU > 0 && g.requests > 0 && lr.lat[gwI].errors() == 0 && gwCPU <= 1.2*nullCPU))
		if kb, ok := g.allocKB(); ok {
			// The gateway's own share is what it allocates beyond the null
			// processor, which allocates to receive and answer the same
			// messages (the target stays the whole figure's).
			own := "—"
			if nkb, ok := n.allocKB(); ok {
				own = fmt.Sprintf("%+.1f KB over the null processor", kb-nkb)
			}
			w("| allocation per request at %s requests/s (the processor's Go heap) | %.1f KB | %s | — | %s | — | ≤ 8 KB | %s |\n",
				rate(lr.rate), kb, perRequestKB(n), own, r.verdict(kb <= 8))
		}
	}
	mg, mn, mb := r.maxRate[gwI], r.maxRate[nullI], r.maxRate[bareI]
	// share is x as a share of of, a stack's highest sustained rate: at
	// most that when the stack passed every step (its real limit is
	// higher).
	share := func(x, of float64, name string) string {
		if of == 0 {
			return "— (" + name + " passed no step)"
		}
		if of == r.plan.steps[len(r.plan.steps)-1] {
			return fmt.Sprintf("≤ %.0f%% of %s", 100*x/of, name)
		}
		return fmt.Sprintf("%.0f%% of %s", 100*x/of, name)
	}
	if len(r.plan.steps) > 0 {
		w("| highest sustained rate (p99 < 50 ms, no errors) | %s/s | %s/s | %s/s | %s | %s | gateway ≥ 80%% of the floor's (%s) | %s |\n",
			rate(mg), rate(mn), rate(mb), share(mg, mb, "bare"), share(mn, mb, "bare"), share(mg, mn, "the floor"), r.verdict(mn > 0 && mg >= 0.8*mn))
	}
	if r.redisRequests > 0 {
		var total int64
		for k, n := range r.redis.calls {
			if !ignoredRedis[k] {
				total += n
			}
		}
		per := float64(total) / float64(r.redisRequests)
		w("| Redis commands per request, scripts' inner ones included (`INFO commandstats`, latency phases) | %.1f | — | — | — | — | ≤ 15 | %s |\n",
			per, r.verdict(per >= 1 && per <= 15)) // no command at all: the gateway never reached Redis
	}
	if r.traceRequests > 0 {
		var sent int64
		for k, n := range r.trace.client {
			if !ignoredRedis[k] && k != "monitor" {
				sent += n
			}
		}
		per := float64(sent) / float64(r.traceRequests)
		w("| Redis round trips per request, commands the sidecar sent (MONITOR sample at a low rate, where settlements batch least) | %.2f | — | — | — | — | ≤ 2 | %s |\n",
			per, r.verdict(per > 0 && per <= 2))
	}
	m := r.memory
	if m.streams == 0 {
		w("\n")
		return
	}
	w("| %s concurrent open streams: opened (refused or failed) | %d (%d) | %d (%d) | %d (%d) | — | — | all open through the gateway, none refused | %s |\n",
		thousands(int64(m.streams)), m.open[gwI], m.failed[gwI], m.open[nullI], m.failed[nullI], m.open[bareI], m.failed[bareI],
		r.verdict(m.open[gwI] == m.streams && m.failed[gwI] == 0))
	w("| processor memory per open stream (RSS) | %.1f KB | %.1f KB | — | — | — | sidecar ≤ 20 KB | %s |\n\n",
		m.procKB[gwI], m.procKB[nullI], r.verdict(m.open[gwI] > 0 && m.procKB[gwI] <= 20))
}

func (r *results) latencyTable(w func(string, ...any)) {
	w("## Non-streaming latency\n\n")
	w("The messages format, `POST %s` (%d-byte body, %s), the fake answering a 12-word message. "+
		"Service time: from sending the request to the last byte of the reply.\n\n",
		messagesPath, len(messagesBody(false)), benchModel)
	w("| rate | vendor | percentile | gateway | null processor | bare Envoy | gateway added | floor added | gateway − floor |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, lr := range r.latency {
		h := [nStacks]*hdrhistogram.Histogram{lr.lat[gwI].service, lr.lat[nullI].service, lr.lat[bareI].service}
		for _, p := range []float64{50, 90, 99} {
			g, n := added(h, p)
			w("| %s/s | +%d ms | p%.0f | %s | %s | %s | %s | %s | %s |\n", rate(lr.rate), lr.vendorMS, p,
				ms(q(h[gwI], p)), ms(q(h[nullI], p)), ms(q(h[bareI], p)), diffMS(g), diffMS(n), diffMS(g-n))
		}
	}
	w("\nRequests and errors, and the two Redis steps of every gateway request as the sidecar timed them " +
		"(`gateway_admission_seconds`, on the request's path, and `gateway_settlement_seconds`, after the reply's last chunk was released; mean over the same slices), and the admissions the store's script decided with leases on (each a round trip to Redis on the request's path; the rest came from a lease, in memory):\n\n")
	w("| rate | vendor | gateway requests (errors) | null requests (errors) | bare requests (errors) | errors seen | admission | settlement | admitted by the store |\n|---:|---:|---:|---:|---:|---|---:|---:|---:|\n")
	for _, lr := range r.latency {
		g, n, bb := lr.lat[gwI], lr.lat[nullI], lr.lat[bareI]
		w("| %s/s | +%d ms | %s (%d) | %s (%d) | %s (%d) | %s | %s | %s | %s |\n", rate(lr.rate), lr.vendorMS,
			thousands(g.ok), g.errors(), thousands(n.ok), n.errors(), thousands(bb.ok), bb.errors(), errList(g, n, bb),
			meanMS(lr.cpu[gwI].admitSeconds, lr.cpu[gwI].admits), meanMS(lr.cpu[gwI].settleSeconds, lr.cpu[gwI].settles), lr.cpu[gwI].byStore())
	}
	w("\n")
}

func errList(ls ...*latencies) string {
	m := map[string]int64{}
	for _, l := range ls {
		for k, v := range l.errs {
			m[k] += v
		}
		if l.dropped > 0 {
			m["dropped (in flight limit)"] += l.dropped
		}
	}
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func (r *results) streamTable(w func(string, ...any), title string, s streamResult, what string) {
	if s.s[gwI] == nil {
		return
	}
	p := r.plan
	w("## %s\n\n", title)
	w("%s: ", what)
	w("%s streams/s, each about %d events %d ms apart (the fake stamps every event with `: sent_unix_nano`). "+
		"Response headers and first event: from sending the request. Delivery delay: the client's receipt of an event minus the fake's stamp, every event.\n\n",
		rate(p.streamRate), p.replyWords+6, p.eventDelayMS)
	w("| figure | percentile | gateway | null processor | bare Envoy | gateway added | floor added | gateway − floor |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, f := range []struct {
		name string
		h    func(*streams) *hdrhistogram.Histogram
	}{
		{"response headers", func(x *streams) *hdrhistogram.Histogram { return x.headers }},
		{"first event", func(x *streams) *hdrhistogram.Histogram { return x.firstEvent }},
		{"event delivery delay", func(x *streams) *hdrhistogram.Histogram { return x.delivery }},
	} {
		h := [nStacks]*hdrhistogram.Histogram{f.h(s.s[gwI]), f.h(s.s[nullI]), f.h(s.s[bareI])}
		for _, pc := range []float64{50, 90, 99} {
			g, n := added(h, pc)
			w("| %s | p%.0f | %s | %s | %s | %s | %s | %s |\n", f.name, pc, ms(q(h[gwI], pc)), ms(q(h[nullI], pc)), ms(q(h[bareI], pc)),
				diffMS(g), diffMS(n), diffMS(g-n))
		}
	}
	w("\nStreams (errors): gateway %s (%d), null %s (%d), bare %s (%d); events: gateway %s, null %s, bare %s",
		thousands(s.s[gwI].ok), s.s[gwI].errors(), thousands(s.s[nullI].ok), s.s[nullI].errors(), thousands(s.s[bareI].ok), s.s[bareI].errors(),
		thousands(s.s[gwI].events), thousands(s.s[nullI].events), thousands(s.s[bareI].events))
	if s.cpu[gwI].requests > 0 {
		w("; the gateway's streams admitted by the store's script (not a lease): %s", s.cpu[gwI].byStore())
	}
	w(".\n\n")
}

func (r *results) stepTable(w func(string, ...any)) {
	if len(r.plan.steps) == 0 {
		return
	}
	w("## Sustained rate\n\n")
	w("Each step offers a fixed rate for %s; it passes with every reply a 200, p99 from the planned arrival time (queueing included) under 50 ms, "+
		"and at least 97%% of the offered rate completed. A failed step is tried once more before the stepping stops for that stack. "+
		"Then, %d times, each stack's interval between its last passing and its first failing step is halved (a round at a time, every stack in each round): "+
		"those rows are marked \"between\", and a stack's highest sustained rate is the highest rate it passed. "+
		"Client and servers share the machine's cores, so the generator's own CPU use is part of the limit, for every stack alike. "+
		"\"By the store\" is how many of the gateway's admissions in the step the store's script decided (a round trip to Redis each, on the request's path; the rest came from a lease).\n\n", r.plan.stepSlice, r.plan.refine)
	w("| offered | gateway completed/s | p99 | errors | passes | by the store | null completed/s | p99 | errors | passes | bare completed/s | p99 | errors | passes |\n")
	w("|---:|---:|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|---|\n")
	cell := func(l *latencies, ok bool) string {
		if l == nil {
			return "— | — | — | —"
		}
		pass := "yes"
		if !ok {
			pass = "no"
		}
		return fmt.Sprintf("%s | %s | %d | %s", thousands(int64(l.achieved())), ms(q(l.schedule, 99)), l.errors(), pass)
	}
	for _, s := range r.steps {
		between := ""
		if s.refined {
			between = " (between)"
		}
		w("| %s/s%s | %s | %s | %s | %s |\n", rate(s.rate), between, cell(s.l[gwI], s.ok[gwI]), s.cpu[gwI].byStore(), cell(s.l[nullI], s.ok[nullI]), cell(s.l[bareI], s.ok[bareI]))
	}
	w("\nHighest sustained: gateway %s/s, null processor %s/s, bare Envoy %s/s (the highest step tried was %s/s).\n\n",
		rate(r.maxRate[gwI]), rate(r.maxRate[nullI]), rate(r.maxRate[bareI]), rate(r.plan.steps[len(r.plan.steps)-1]))
}

func (r *results) cpuTable(w func(string, ...any)) {
	w("## CPU time per request\n\n")
	w("utime + stime from `/proc/PID/stat` (10 ms ticks) over the measured slices, divided by the requests they completed; Redis from `INFO cpu`. " +
		"\"Envoy added\" is a stack's Envoy minus bare Envoy: the ext_proc filter's own cost. " +
		"Switches: the processor's context switches per request (its threads put to sleep and woken again, from `/proc/PID/task/*/status`). " +
		"Allocated: the processor's Go heap allocations per request (the sidecar's and the null processor's, each from its own metrics: what gRPC and protobuf allocate to receive and answer Envoy's messages is in both), and the sidecar's garbage collections per thousand requests.\n\n")
	w("| load | sidecar | Redis | gateway Envoy | gateway total added | null processor | null Envoy | floor total added | bare Envoy | switches, sidecar | switches, null | allocated, sidecar | allocated, null | GC per 1,000 |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	line := func(name string, c [nStacks]cpuUse) {
		g, n, bb := c[gwI], c[nullI], c[bareI]
		bareEnvoy := bb.per(bb.envoy)
		gwTotal := g.per(g.sidecar) + g.per(g.redis) + g.per(g.envoy) - bareEnvoy
		nullTotal := n.per(n.sidecar) + n.per(n.envoy) - bareEnvoy
		reqs := float64(max(g.requests, 1))
		w("| %s | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %.1f | %.1f | %s | %s | %.2f |\n", name,
			g.per(g.sidecar), g.per(g.redis), g.per(g.envoy), gwTotal, n.per(n.sidecar), n.per(n.envoy), nullTotal, bareEnvoy,
			float64(g.switches)/reqs, float64(n.switches)/float64(max(n.requests, 1)), perRequestKB(g), perRequestKB(n), 1000*g.gcCycles/reqs)
	}
	for _, lr := range r.latency {
		line(fmt.Sprintf("%s requests/s, vendor +%d ms", rate(lr.rate), lr.vendorMS), lr.cpu)
	}
	if r.stream.s[gwI] != nil {
		line(fmt.Sprintf("%s streams/s (per stream)", rate(r.plan.streamRate)), r.stream.cpu)
	}
	if r.respStream.s[gwI] != nil {
		line(fmt.Sprintf("%s responses streams/s (per stream)", rate(r.plan.streamRate)), r.respStream.cpu)
	}
	w("\n")
}

func (r *results) memoryTable(w func(string, ...any)) {
	m := r.memory
	if m.streams == 0 {
		return
	}
	w("## %s concurrent open streams\n\n", thousands(int64(m.streams)))
	w("Slow streams (the fake sends the first event, then waits ten minutes) held open at once; resident memory (VmRSS) read before opening them " +
		"and once all were open, the growth divided by the streams open. Measured first, before the load phases grow the sidecar's heap. " +
		"Every stream must open: Envoy's circuit breakers are sized for long streams.\n\n")
	w("| figure | per open stream |\n|---|---:|\n")
	w("| sidecar RSS | %.1f KB (%.1f → %.1f MB) |\n", m.procKB[gwI], float64(m.sidecarBase)/1024, float64(m.sidecarPeak)/1024)
	w("| sidecar Go heap in use | %.1f KB |\n", m.heapKB)
	w("| sidecar goroutine stacks | %.1f KB |\n", m.stackKB)
	w("| sidecar goroutines | %.1f |\n", m.goroutines)
	w("| null processor RSS | %.1f KB |\n", m.procKB[nullI])
	for i := range nStacks {
		w("| Envoy RSS, %s | %.1f KB |\n", stackNames[i], m.envoyKB[i])
	}
	w("\nOpen of %d: ", m.streams)
	for i := range nStacks {
		sep := ", "
		if i == nStacks-1 {
			sep = ".\n\n"
		}
		w("%s %d (%d failed%s)%s", stackNames[i], m.open[i], m.failed[i], errMap(m.errs[i]), sep)
	}
}

func errMap(m map[string]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return ": " + strings.Join(parts, ", ")
}

func (r *results) redisTable(w func(string, ...any)) {
	w("## Redis commands per request\n\n")
	per := func(n, of int64) string { return fmt.Sprintf("%.3f", float64(n)/float64(max(of, 1))) }
	if r.traceRequests > 0 {
		w("MONITOR over a short gateway-only sample of %s requests (background work such as key-cache refreshes included): "+
			"commands the sidecar sent, each a network round trip, apart from the commands its Lua scripts ran inside Redis.\n\n",
			thousands(r.traceRequests))
		w("| command | round trips per request | run inside scripts per request |\n|---|---:|---:|\n")
		names := map[string]bool{}
		for k := range r.trace.client {
			names[k] = true
		}
		for k := range r.trace.script {
			names[k] = true
		}
		var client, script int64
		for _, k := range slices.Sorted(maps.Keys(names)) {
			if ignoredRedis[k] || k == "monitor" {
				continue
			}
			c, s := r.trace.client[k], r.trace.script[k]
			client += c
			script += s
			w("| %s | %s | %s |\n", k, per(c, r.traceRequests), per(s, r.traceRequests))
		}
		w("| **total** | **%s** | **%s** |\n\n", per(client, r.traceRequests), per(script, r.traceRequests))
	}
	var total int64
	for k, n := range r.redis.calls {
		if !ignoredRedis[k] {
			total += n
		}
	}
	w("Cross-check: `INFO commandstats` over all the non-streaming latency phases counted %s commands (scripts' inner ones included) "+
		"for %s gateway requests: %s per request; of them EVALSHA %s per request.\n\n",
		thousands(total), thousands(r.redisRequests), per(total, r.redisRequests), per(r.redis.calls["evalsha"], r.redisRequests))
	r.redisTime(w)
}

// redisTime writes where Redis spent its time over the same phases, per
// gateway request: each command's own (commandstats' usec), a script's
// split into the commands it ran and the rest (its Lua).
func (r *results) redisTime(w func(string, ...any)) {
	if r.redisRequests == 0 || len(r.redis.usec) == 0 {
		return
	}
	n := float64(r.redisRequests)
	inner := int64(0)
	for k, us := range r.redis.usec {
		if !ignoredRedis[k] && k != "evalsha" && k != "eval" {
			inner += us
		}
	}
	scripts := r.redis.usec["evalsha"] + r.redis.usec["eval"]
	w("Redis time per gateway request over the same phases (commandstats' usec; the server's CPU was %.1f µs): scripts %.1f µs, "+
		"of which the commands they and the sidecar ran %.1f µs and the rest (Lua: arguments, tables, strings) %.1f µs.\n\n",
		float64(r.redis.cpu.Microseconds())/n, float64(scripts)/n, float64(inner)/n, float64(scripts-inner)/n)
	w("| command | µs per request |\n|---|---:|\n")
	for _, k := range slices.Sorted(maps.Keys(r.redis.usec)) {
		if ignoredRedis[k] || k == "monitor" {
			continue
		}
		w("| %s | %.2f |\n", k, float64(r.redis.usec[k])/n)
	}
	w("\n")
}

// perRequestKB is allocKB as a cell, "—" when the metrics were not read.
func perRequestKB(c cpuUse) string {
	kb, ok := c.allocKB()
	if !ok {
		return "—"
	}
	return fmt.Sprintf("%.1f KB", kb)
}
