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
// gateway alone serves a steady non-streaming load. The sidecar has no
// pprof endpoint, and perf needs none: Go binaries keep their symbols and
// frame pointers, so perf's report names Go functions. It writes the raw
// perf.data to path, text reports beside it, and a summary into the report.
func (b *bench) profileSidecar(path string) {
	if _, err := exec.LookPath("perf"); err != nil {
		b.res.profile = "Not taken: perf(1) is not installed (`apt-get install linux-perf`)."
		return
	}
	d, rps := 10*time.Second, 1000.0
	if !b.plan.judge {
		d, rps = 2*time.Second, 200
	}
	b.vendor(nil)
	pid := b.gw.Sidecar.Cmd.Process.Pid
	log.Printf("profile: perf on the sidecar (pid %d) at %.0f requests/s for %s", pid, rps, d)
	rec := exec.Command("perf", "record", "-F", "999", "-g", "-p", strconv.Itoa(pid), "-o", path,
		"--", "sleep", strconv.FormatFloat(d.Seconds()+1, 'f', 0, 64))
	var stderr bytes.Buffer
	rec.Stderr = &stderr
	if err := rec.Start(); err != nil {
		b.res.profile = "Not taken: " + err.Error()
		return
	}
	time.Sleep(500 * time.Millisecond) // perf attaches to every thread
	l := load(b.gwT, request{messagesPath, messagesBody(false)}, rps, d)
	if err := rec.Wait(); err != nil {
		b.res.profile = fmt.Sprintf("Not taken: perf record: %v\n\n```\n%s\n```", err, stderr.String())
		return
	}

	self := perfReport(path, "--no-children")
	incl := perfReport(path, "--children")
	os.WriteFile(path+".txt", []byte(self), 0o644)
	os.WriteFile(path+".children.txt", []byte(incl), 0o644)

	var s strings.Builder
	fmt.Fprintf(&s, "perf record -F 999 -g on the sidecar for %s while the gateway alone served %s requests/s (%s completed, %d errors). "+
		"Files: `%s` (perf.data), `%s.txt` (self time per function), `%s.children.txt` (inclusive).\n\n",
		d, rate(rps), thousands(l.ok), l.errors(), path, path, path)
	fmt.Fprintf(&s, "Self time by package:\n\n| package | share of sidecar CPU |\n|---|---:|\n")
	for _, p := range byPackage(parsePerf(self)) {
		if p.pct >= 1 {
			fmt.Fprintf(&s, "| %s | %.1f%% |\n", p.name, p.pct)
		}
	}
	entries := parsePerf(incl)
	fmt.Fprintf(&s, "\nWhere the time goes, inclusive (a function and all it calls; the rows overlap):\n\n| activity | function | inclusive |\n|---|---|---:|\n")
	for _, a := range activities {
		for _, e := range entries {
			if e.name == a.symbol {
				fmt.Fprintf(&s, "| %s | `%s` | %.1f%% |\n", a.label, shortSym(e.name), e.pct)
				break
			}
		}
	}
	fmt.Fprintf(&s, "\nThe gateway's own functions, inclusive:\n\n| function | inclusive |\n|---|---:|\n")
	n := 0
	for _, e := range entries {
		if strings.Contains(e.name, "modelgateway") && n < 15 {
			fmt.Fprintf(&s, "| `%s` | %.1f%% |\n", shortSym(e.name), e.pct)
			n++
		}
	}
	b.res.profile = s.String()
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
