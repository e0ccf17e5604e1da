package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/modelgateway/gateway/test/launch"
)

// collector is an OTLP/gRPC trace receiver that counts the spans it is
// sent and keeps nothing: the far end of tracing for -trace-percent. It
// runs in a child process at the lowest CPU priority, as a stand-in for the
// collector's machine in production: decoding every span in the load
// generator's process would slow the client for every stack.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	spans atomic.Int64
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	c.spans.Add(int64(n))
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// serveCollector is the child process: it serves the collector on addr
// and, on SIGTERM, prints the number of spans received and exits.
func serveCollector(addr string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	c := &collector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, c)
	go srv.Serve(l)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	srv.Stop()
	fmt.Println(c.spans.Load())
}

// collectorProcess is the running collector.
type collectorProcess struct{ p *launch.Process }

// startCollector runs the collector as a child process at nice 19 and
// returns it once it accepts connections.
func startCollector(tb *benchTB) (*collectorProcess, string) {
	p, addr := startChild(tb, "otlp-collector", nil)
	syscall.Setpriority(syscall.PRIO_PROCESS, p.Cmd.Process.Pid, 19)
	return &collectorProcess{p}, addr
}

// stop ends the collector and returns the spans it received, the last line
// of its log (-1 if it did not say).
func (c *collectorProcess) stop() int64 {
	c.p.Stop()
	lines := strings.Split(strings.TrimSpace(c.p.Log()), "\n")
	n, err := strconv.ParseInt(lines[len(lines)-1], 10, 64)
	if err != nil {
		return -1
	}
	return n
}

// ledgerSink is `gateway ledger-sink` copying the gateway stack's ledger
// into a PostgreSQL of its own, for -sink.
type ledgerSink struct {
	metrics string
	pids    func() []int // the sink's process and PostgreSQL's
	cpu0    time.Duration
}

func startLedgerSink(tb *benchTB, gw *launch.Stack) *ledgerSink {
	pg, err := launch.StartPostgres("")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pg.Remove)
	bin, err := launch.BuildBinary("gateway")
	if err != nil {
		tb.Fatal(err)
	}
	addrs, err := launch.FreeAddrs(1)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := launch.StartProcess("ledger-sink", bin,
		[]string{"ledger-sink", "--config", gw.ConfigPath(), "--listen", addrs[0]},
		[]string{"REDIS_URL=redis://" + gw.RedisAddr, "DATABASE_URL=" + pg.URL},
		filepath.Join(gw.Dir, "ledger-sink.log"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(p.Stop)
	// Finance's database and its copier run on machines of their own in
	// production; here they share the two cores with every stack, so they
	// run at the lowest CPU priority, as a stand-in for another machine.
	// Their Redis reads are the gateway's Redis's, as in production.
	pids := func() []int { return append(family(pg.Proc.Cmd.Process.Pid), p.Cmd.Process.Pid) }
	for _, pid := range pids() {
		syscall.Setpriority(syscall.PRIO_PROCESS, pid, 19)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := launch.WaitHTTP(ctx, "http://"+addrs[0]+"/health", p); err != nil {
		tb.Fatal(err)
	}
	log.Printf("ledger sink copying into PostgreSQL at %s", pg.Addr)
	ls := &ledgerSink{metrics: "http://" + addrs[0] + "/metrics", pids: pids}
	ls.cpu0 = ls.cpu()
	return ls
}

// cpu is the CPU the sink and PostgreSQL have used so far.
func (s *ledgerSink) cpu() time.Duration {
	var d time.Duration
	for _, pid := range s.pids() {
		d += cpuTime(pid)
	}
	return d
}

// family is pid and its children (PostgreSQL's server processes are the
// postmaster's children; each backend inherits the postmaster's priority).
func family(pid int) []int {
	pids := []int{pid}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if f := statFields(child); len(f) > 1 && f[1] == strconv.Itoa(pid) { // the parent's pid
			pids = append(pids, child)
		}
	}
	return pids
}

// status reads the sink's rows inserted and its lag.
func (s *ledgerSink) status() string {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return "metrics unreadable: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var rows, lag string
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "gateway_ledger_sink_entries_total "); ok {
			rows = v
		}
		if v, ok := strings.CutPrefix(line, "gateway_ledger_sink_lag_seconds "); ok {
			lag = v
		}
	}
	return fmt.Sprintf("%s rows inserted, lag %s s at the end, %.1f s of CPU (sink and PostgreSQL, at nice 19)", rows, lag, (s.cpu() - s.cpu0).Seconds())
}
