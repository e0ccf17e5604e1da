package main

import (
	"bufio"
	"bytes"
	"fmt"
	"log"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// profileSidecar samples the sidecar's stacks with perf(1) while the
// gateway alone serves a steady non-streaming load, then the null
// processor's under the same load, so that the sidecar's profile can be
// read against the floor's. The sidecar has no pprof endpoint, and perf
// needs none: Go binaries keep their symbols and frame pointers, so perf's
// report names Go functions. It writes the raw perf.data to path (the null
// processor's to path.null), text reports beside them, and a summary into
// the report.
func (b *bench) profileSidecar(path string) {
	if _, err := exec.LookPath("perf"); err != nil {
		b.res.profile = "Not taken: perf(1) is not installed (`apt-get install linux-perf`)."
		return
	}
	d, rps := 10*time.Second, 1000.0
	if !b.plan.judge && b.plan.name == "smoke" {
		d, rps = 2*time.Second, 200
	}
	b.vendor(nil)
	gw, err := b.perfRecord(b.gwT, b.gw.Sidecar.Cmd.Process.Pid, path, d, rps)
	if err != "" {
		b.res.profile = err
		return
	}
	null, err := b.perfRecord(b.nullT, b.nullPid, path+".null", d, rps)
	if err != "" {
		b.res.profile = err
		return
	}

	var s strings.Builder
	fmt.Fprintf(&s, "perf record -F %d -g on one processor at a time for %s while its stack alone served %s requests/s: "+
		"the sidecar (%s requests, %d errors), then the null processor (%s requests, %d errors). "+
		"Files: `%s` and `%s.null` (perf.data), with `.txt` (self time per function) and `.children.txt` (inclusive) beside each. "+
		"Per request: the CPU time sampled (perf's cpu-clock event count) times a row's share, divided by the requests served.\n\n",
		perfHz, d, rate(rps), thousands(gw.requests), gw.errors, thousands(null.requests), null.errors, path, path)
	fmt.Fprintf(&s, "Self time by package, µs of CPU per request:\n\n| package | sidecar | null processor | difference |\n|---|---:|---:|---:|\n")
	gp, np := map[string]float64{}, map[string]float64{}
	for _, p := range byPackage(parsePerf(gw.self)) {
		gp[p.name] = p.pct
	}
	for _, p := range byPackage(parsePerf(null.self)) {
		np[p.name] = p.pct
	}
	names := slices.Collect(maps.Keys(gp))
	for k := range np {
		if _, ok := gp[k]; !ok {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, c string) int {
		return cmpFloat(gw.perRequest(gp[c])-null.perRequest(np[c]), gw.perRequest(gp[a])-null.perRequest(np[a]))
	})
	for _, k := range names {
		g, n := gw.perRequest(gp[k]), null.perRequest(np[k])
		if g >= 1 || n >= 1 {
			fmt.Fprintf(&s, "| %s | %.0f | %.0f | %+.0f |\n", k, g, n, g-n)
		}
	}
	fmt.Fprintf(&s, "| **total** | **%.0f** | **%.0f** | **%+.0f** |\n", gw.perRequest(100), null.perRequest(100), gw.perRequest(100)-null.perRequest(100))

	entries, nullEntries := parsePerf(gw.incl), parsePerf(null.incl)
	find := func(es []perfEntry, sym string) (float64, bool) {
		for _, e := range es {
			if e.name == sym {
				return e.pct, true
			}
		}
		return 0, false
	}
	fmt.Fprintf(&s, "\nWhere the time goes, inclusive (a function and all it calls; the rows overlap), µs per request:\n\n| activity | function | sidecar | null processor |\n|---|---|---:|---:|\n")
	for _, a := range activities {
		g, gok := find(entries, a.symbol)
		n, nok := find(nullEntries, a.symbol)
		if !gok && !nok {
			continue
		}
		fmt.Fprintf(&s, "| %s | `%s` | %.0f | %.0f |\n", a.label, shortSym(a.symbol), gw.perRequest(g), null.perRequest(n))
	}
	fmt.Fprintf(&s, "\nThe gateway's own functions, inclusive, µs per request:\n\n| function | sidecar |\n|---|---:|\n")
	n := 0
	for _, e := range entries {
		if strings.Contains(e.name, "modelgateway") && n < 15 {
			fmt.Fprintf(&s, "| `%s` | %.0f |\n", shortSym(e.name), gw.perRequest(e.pct))
			n++
		}
	}
	b.res.profile = s.String()
}

// perfHz is perf's sampling frequency.
const perfHz = 999

// perfRun is one processor's recording.
type perfRun struct {
	cpuNS      int64 // CPU time sampled, ns
	requests   int64
	errors     int64
	self, incl string
}

// perRequest turns a share of the run's samples into µs of CPU per request.
func (r perfRun) perRequest(pct float64) float64 {
	if r.requests == 0 {
		return 0
	}
	return pct / 100 * float64(r.cpuNS) / 1e3 / float64(r.requests)
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// perfRecord samples process pid while t alone serves rps for d.
func (b *bench) perfRecord(t *target, pid int, path string, d time.Duration, rps float64) (perfRun, string) {
	log.Printf("profile: perf on %s (pid %d) at %.0f requests/s for %s", t.name, pid, rps, d)
	rec := exec.Command("perf", "record", "-F", strconv.Itoa(perfHz), "-g", "-p", strconv.Itoa(pid), "-o", path,
		"--", "sleep", strconv.FormatFloat(d.Seconds()+1, 'f', 0, 64))
	var stderr bytes.Buffer
	rec.Stderr = &stderr
	if err := rec.Start(); err != nil {
		return perfRun{}, "Not taken: " + err.Error()
	}
	time.Sleep(500 * time.Millisecond) // perf attaches to every thread
	l := load(t, request{messagesPath, messagesBody(false)}, rps, d)
	if err := rec.Wait(); err != nil {
		return perfRun{}, fmt.Sprintf("Not taken: perf record: %v\n\n```\n%s\n```", err, stderr.String())
	}
	r := perfRun{requests: l.ok, errors: l.errors()}
	r.self = perfReport(path, "--no-children")
	r.incl = perfReport(path, "--children")
	r.cpuNS = perfCPU(r.self)
	os.WriteFile(path+".txt", []byte(r.self), 0o644)
	os.WriteFile(path+".children.txt", []byte(r.incl), 0o644)
	return r, ""
}

// perfCPU reads the CPU time a recording sampled from its report's header:
// the cpu-clock event counts nanoseconds.
func perfCPU(report string) int64 {
	for _, line := range strings.Split(report, "\n") {
		if v, ok := strings.CutPrefix(line, "# Event count (approx.): "); ok {
			ns, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return ns
		}
	}
	return 0
}

// activities are the functions whose inclusive time says where a
// request's CPU goes: the processor's handler and what it waits on, the
// gRPC transport's read and write loops, and the Go runtime's main costs.
var activities = []struct{ label, symbol string }{
	{"ext_proc handler (all per-message work)", "github.com/modelgateway/gateway/extproc.(*Server).Process"},
	{"admission: Redis EVALSHA", "github.com/modelgateway/gateway/internal/store.(*Store).Admit"},
	{"settlement: Redis EVALSHA", "github.com/modelgateway/gateway/internal/store.(*Store).Settle"},
	{"per-request log line", "log/slog.(*Logger).log"},
	{"Prometheus metrics", "github.com/modelgateway/gateway/extproc.(*Metrics).observe"},
	{"gRPC: reading frames", "google.golang.org/grpc/internal/transport.(*http2Server).HandleStreams"},
	{"gRPC: writing frames", "google.golang.org/grpc/internal/transport.(*loopyWriter).run"},
	{"protobuf decoding", "google.golang.org/protobuf/proto.Unmarshal"},
	{"protobuf encoding", "google.golang.org/protobuf/proto.MarshalOptions.Marshal"},
	{"garbage collection (background)", "runtime.gcBgMarkWorker"},
	{"allocation", "runtime.mallocgc"},
	{"goroutine stack growth", "runtime.newstack"},
	{"scheduler (finding work, parking)", "runtime.schedule"},
	{"system calls", "internal/runtime/syscall/linux.Syscall6"},
}

// shortSym drops the module path of the gateway's own symbols.
func shortSym(sym string) string {
	return strings.TrimPrefix(sym, "github.com/modelgateway/gateway/")
}

// perfReport renders perf.data as text, one line per symbol, with no call
// graphs (the .data file keeps them for `perf report -i`).
func perfReport(path, mode string) string {
	out, err := exec.Command("perf", "report", "-i", path, "--stdio", mode, "--sort", "sym",
		"-g", "none", "--percent-limit", "0").Output()
	if err != nil {
		return "perf report: " + err.Error()
	}
	return string(out)
}

type perfEntry struct {
	name string
	pct  float64
}

// parsePerf reads "  12.34%  [.] symbol" lines, and with --children the
// "  40.00%   1.00%  [.] symbol" form, taking the first percentage.
func parsePerf(report string) []perfEntry {
	var es []perfEntry
	sc := bufio.NewScanner(strings.NewReader(report))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 || !strings.HasSuffix(fields[0], "%") {
			continue
		}
		pct, err := strconv.ParseFloat(strings.TrimSuffix(fields[0], "%"), 64)
		if err != nil {
			continue
		}
		i := strings.Index(line, "] ")
		if i < 0 {
			continue
		}
		kind := line[i-1]
		name := strings.TrimSpace(line[i+2:])
		if kind == 'k' {
			name = "[kernel] " + name
		}
		es = append(es, perfEntry{name, pct})
	}
	return es
}

// byPackage adds self time up by Go package ("runtime", "google.golang.org/grpc/...")
// and puts the kernel's share under one name.
func byPackage(es []perfEntry) []perfEntry {
	sum := map[string]float64{}
	for _, e := range es {
		sum[goPackage(e.name)] += e.pct
	}
	out := make([]perfEntry, 0, len(sum))
	for _, k := range slices.Collect(maps.Keys(sum)) {
		out = append(out, perfEntry{k, sum[k]})
	}
	slices.SortFunc(out, func(a, b perfEntry) int {
		switch {
		case a.pct > b.pct:
			return -1
		case a.pct < b.pct:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// goPackage is the package part of a Go symbol: up to the first dot after
// the last slash. Kernel symbols count as the kernel (system calls, the
// network stack, scheduling).
func goPackage(sym string) string {
	if strings.HasPrefix(sym, "[kernel]") {
		return "kernel (syscalls, TCP, scheduler)"
	}
	start := strings.LastIndexByte(sym, '/') + 1
	if i := strings.IndexByte(sym[start:], '.'); i > 0 && !strings.HasPrefix(sym, "_") {
		return sym[:start+i]
	}
	return "other (vDSO, libc, unnamed)"
}
