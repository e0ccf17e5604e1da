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

	"github.com/modelgateway/gateway/internal/launch"
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

	// The sidecar's own timings of its two store steps (gateway only).
	admitSeconds, admits   float64
	settleSeconds, settles float64
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
	rate           float64
	vendorMS       int
	gw, bare       *latencies
	gwCPU, bareCPU cpuUse
}

type stepRow struct {
	rate         float64
	gw, bare     *latencies // nil: not run, the target had already failed
	gwOK, bareOK bool
}

type streamResult struct {
	gw, bare       *streams
	gwCPU, bareCPU cpuUse
}

type memoryResult struct {
	streams                  int
	gwOpen, gwFailed         int
	bareOpen, bareFailed     int
	sidecarKB, heapKB        float64 // per stream
	stackKB                  float64 // per stream
	goroutines               float64 // per stream
	gwEnvoyKB, bareEnvoyKB   float64 // per stream
	sidecarBase, sidecarPeak int64   // KiB
}

// results is everything one run measured.
type results struct {
	plan               plan
	env                environment
	note               string
	sidecarEnv         []string
	started, finished  time.Time
	loadStart, loadEnd string

	memory        memoryResult
	latency       []latencyRow
	stream        streamResult
	steps         []stepRow
	maxGW         float64
	maxBare       float64
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
		return "n/a (smoke)"
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

	w("# Gateway benchmark: overhead against bare Envoy\n\n")
	w("- Date: %s (UTC); run took %s; plan: %s\n", r.started.UTC().Format("2006-01-02 15:04"),
		r.finished.Sub(r.started).Round(time.Second), r.plan.name)
	w("- Machine: %d cores (%s), %.1f GiB memory, Linux %s; load average %s at the start, %s at the end\n",
		e.cores, e.cpuModel, e.memGiB, e.kernel, r.loadStart, r.loadEnd)
	w("- Envoy %s, `--concurrency 2`, for both stacks; %s; sidecar at `--log-level info`", e.envoy, e.goVersion)
	if len(r.sidecarEnv) > 0 {
		w(", sidecar environment `%s`", strings.Join(r.sidecarEnv, " "))
	}
	w("\n")
	if u := r.usage; u.total > 0 {
		others := max(u.busy-u.own, 0)
		w("- CPU over the run: the machine was %.0f%% busy; the bench's own processes (client, both Envoys, sidecar, Redis, fakes) used %.0f%% of its capacity, other work %.0f%%\n",
			pct(u.busy, u.total), pct(u.own, u.total), pct(others, u.total))
	}
	if r.note != "" {
		w("- Note: %s\n", r.note)
	}
	w("- Setup: the gateway (Envoy with ext_proc, the sidecar, redis-server) and bare Envoy (same listener and routes, no ext_proc filter) " +
		"in front of one shared fake vendor process; client, proxies, sidecar, Redis and fake all on this machine. " +
		"Each figure alternates short slices between the two stacks (gateway first, then bare first, …) after a discarded warm-up slice each, " +
		"so machine noise falls on both. Open-model load (fixed arrival rate), keep-alive HTTP/1.1 connections, latencies in HDR histograms.\n\n")

	r.summary(w)
	r.latencyTable(w)
	r.streamTable(w)
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

func (r *results) summary(w func(string, ...any)) {
	w("## Against the targets\n\n")
	w("| figure | gateway | bare Envoy | difference | target | met |\n|---|---:|---:|---:|---|---|\n")
	ref := 1000.0
	if !r.plan.judge {
		ref = r.plan.rates[len(r.plan.rates)-1]
	}
	if lr := r.row(ref, 0); lr != nil {
		for _, p := range []struct {
			q     float64
			label string
			limit int64
		}{{50, "p50", 500}, {99, "p99", 2000}} {
			g, bb := q(lr.gw.service, p.q), q(lr.bare.service, p.q)
			w("| %s latency at %s requests/s | %s | %s | %s | added ≤ %s | %s |\n", p.label, rate(ref),
				ms(g), ms(bb), diffMS(g-bb), ms(p.limit), r.verdict(g-bb <= p.limit))
		}
	}
	if s := r.stream; s.gw != nil {
		g, bb := q(s.gw.firstEvent, 50), q(s.bare.firstEvent, 50)
		w("| time to first event (TTFB), p50 | %s | %s | %s | added ≤ 1 ms | %s |\n", ms(g), ms(bb), diffMS(g-bb), r.verdict(g-bb <= 1000))
		g, bb = q(s.gw.delivery, 99), q(s.bare.delivery, 99)
		w("| event delivery delay, p99 | %s | %s | %s | added ≤ 1 ms | %s |\n", ms(g), ms(bb), diffMS(g-bb), r.verdict(g-bb <= 1000))
	}
	w("| highest sustained rate (p99 < 50 ms, no errors) | %s/s | %s/s | %s/s | ≥ 2,500/s through the gateway | %s |\n",
		rate(r.maxGW), rate(r.maxBare), thousands(int64(r.maxGW-r.maxBare)), r.verdict(r.maxGW >= 2500))
	m := r.memory
	w("| sidecar memory per open stream (RSS) | %.1f KB | — | — | ≤ 20 KB | %s |\n\n", m.sidecarKB, r.verdict(m.gwOpen > 0 && m.sidecarKB <= 20))
}

func (r *results) latencyTable(w func(string, ...any)) {
	w("## Non-streaming latency\n\n")
	w("Format A `POST %s` (%d-byte body, %s), the fake answering a 12-word message. "+
		"Service time: from sending the request to the last byte of the reply.\n\n",
		messagesPath, len(messagesBody(false)), benchModel)
	w("| rate | vendor | percentile | gateway | bare Envoy | difference |\n|---:|---:|---|---:|---:|---:|\n")
	for _, lr := range r.latency {
		for _, p := range []float64{50, 90, 99} {
			g, bb := q(lr.gw.service, p), q(lr.bare.service, p)
			w("| %s/s | +%d ms | p%.0f | %s | %s | %s |\n", rate(lr.rate), lr.vendorMS, p, ms(g), ms(bb), diffMS(g-bb))
		}
	}
	w("\nRequests and errors, and the two Redis steps on every gateway request's path as the sidecar timed them " +
		"(`gateway_admission_seconds` and `gateway_settlement_seconds`, mean over the same slices):\n\n")
	w("| rate | vendor | gateway requests (errors) | bare requests (errors) | errors seen | admission | settlement |\n|---:|---:|---:|---:|---|---:|---:|\n")
	for _, lr := range r.latency {
		w("| %s/s | +%d ms | %s (%d) | %s (%d) | %s | %s | %s |\n", rate(lr.rate), lr.vendorMS,
			thousands(lr.gw.ok), lr.gw.errors(), thousands(lr.bare.ok), lr.bare.errors(), errList(lr.gw, lr.bare),
			meanMS(lr.gwCPU.admitSeconds, lr.gwCPU.admits), meanMS(lr.gwCPU.settleSeconds, lr.gwCPU.settles))
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

func (r *results) streamTable(w func(string, ...any)) {
	s := r.stream
	if s.gw == nil {
		return
	}
	p := r.plan
	w("## Streaming\n\n")
	w("%s streams/s, each about %d events %d ms apart (the fake stamps every event with `: sent_unix_nano`). "+
		"Response headers and first event: from sending the request. Delivery delay: the client's receipt of an event minus the fake's stamp, every event.\n\n",
		rate(p.streamRate), p.replyWords+6, p.eventDelayMS)
	w("| figure | percentile | gateway | bare Envoy | difference |\n|---|---|---:|---:|---:|\n")
	for _, f := range []struct {
		name     string
		gw, bare *hdrhistogram.Histogram
	}{
		{"response headers", s.gw.headers, s.bare.headers},
		{"first event (TTFB)", s.gw.firstEvent, s.bare.firstEvent},
		{"event delivery delay", s.gw.delivery, s.bare.delivery},
	} {
		for _, pc := range []float64{50, 90, 99} {
			g, bb := q(f.gw, pc), q(f.bare, pc)
			w("| %s | p%.0f | %s | %s | %s |\n", f.name, pc, ms(g), ms(bb), diffMS(g-bb))
		}
	}
	w("\nStreams: gateway %s (%d errors), bare %s (%d errors); events: gateway %s, bare %s.\n\n",
		thousands(s.gw.ok), s.gw.errors(), thousands(s.bare.ok), s.bare.errors(), thousands(s.gw.events), thousands(s.bare.events))
}

func (r *results) stepTable(w func(string, ...any)) {
	w("## Sustained rate\n\n")
	w("Each step offers a fixed rate for %s; it passes with every reply a 200, p99 from the planned arrival time (queueing included) under 50 ms, "+
		"and at least 97%% of the offered rate completed. A failed step is tried once more before the stepping stops for that stack. "+
		"Client and servers share the machine's cores, so the generator's own CPU use is part of the limit, for both stacks alike.\n\n", r.plan.stepSlice)
	w("| offered | gateway completed/s | gateway p99 | gateway errors | passes | bare completed/s | bare p99 | bare errors | passes |\n")
	w("|---:|---:|---:|---:|---|---:|---:|---:|---|\n")
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
		w("| %s/s | %s | %s |\n", rate(s.rate), cell(s.gw, s.gwOK), cell(s.bare, s.bareOK))
	}
	w("\nHighest sustained: gateway %s/s, bare Envoy %s/s (the highest step tried was %s/s).\n\n",
		rate(r.maxGW), rate(r.maxBare), rate(r.plan.steps[len(r.plan.steps)-1]))
}

func (r *results) cpuTable(w func(string, ...any)) {
	w("## CPU time per request\n\n")
	w("utime + stime from `/proc/PID/stat` (10 ms ticks) over the measured slices, divided by the requests they completed; Redis from `INFO cpu`. " +
		"\"Envoy added\" is the gateway's Envoy minus bare Envoy: the ext_proc filter's own cost.\n\n")
	w("| load | sidecar | Redis | Envoy (gateway) | Envoy (bare) | Envoy added | total added |\n|---|---:|---:|---:|---:|---:|---:|\n")
	line := func(name string, g, bb cpuUse) {
		envoyAdded := g.per(g.envoy) - bb.per(bb.envoy)
		total := g.per(g.sidecar) + g.per(g.redis) + envoyAdded
		w("| %s | %.0f µs | %.0f µs | %.0f µs | %.0f µs | %+.0f µs | %.0f µs |\n", name,
			g.per(g.sidecar), g.per(g.redis), g.per(g.envoy), bb.per(bb.envoy), envoyAdded, total)
	}
	for _, lr := range r.latency {
		line(fmt.Sprintf("%s requests/s, vendor +%d ms", rate(lr.rate), lr.vendorMS), lr.gwCPU, lr.bareCPU)
	}
	if r.stream.gw != nil {
		line(fmt.Sprintf("%s streams/s (per stream)", rate(r.plan.streamRate)), r.stream.gwCPU, r.stream.bareCPU)
	}
	w("\n")
}

func (r *results) memoryTable(w func(string, ...any)) {
	m := r.memory
	w("## Memory with %s open streams\n\n", thousands(int64(m.streams)))
	w("Slow streams (the fake sends the first event, then waits ten minutes) held open at once; resident memory (VmRSS) read before opening them " +
		"and once all were open, the growth divided by the streams open. Measured first, before the load phases grow the sidecar's heap.\n\n")
	w("| figure | per open stream |\n|---|---:|\n")
	w("| sidecar RSS | %.1f KB (%.1f → %.1f MB) |\n", m.sidecarKB, float64(m.sidecarBase)/1024, float64(m.sidecarPeak)/1024)
	w("| sidecar Go heap in use | %.1f KB |\n", m.heapKB)
	w("| sidecar goroutine stacks | %.1f KB |\n", m.stackKB)
	w("| sidecar goroutines | %.1f |\n", m.goroutines)
	w("| Envoy RSS, gateway | %.1f KB |\n", m.gwEnvoyKB)
	w("| Envoy RSS, bare | %.1f KB |\n", m.bareEnvoyKB)
	w("\nOpen: gateway %d of %d (%d failed), bare %d of %d (%d failed).\n\n", m.gwOpen, m.streams, m.gwFailed, m.bareOpen, m.streams, m.bareFailed)
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
}
