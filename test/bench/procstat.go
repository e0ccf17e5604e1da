package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/test/launch"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ), 100
// per second on every Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// cpuTime is a process's user plus system CPU time so far, all threads,
// from /proc/PID/stat. Its resolution is one clock tick, so the bench only
// divides deltas over many requests.
func cpuTime(pid int) time.Duration {
	fields := statFields(pid)
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(fields[12], 10, 64) // field 15
	return time.Duration(utime+stime) * clockTick
}

// statFields are the fields of /proc/PID/stat after the command name
// (field 3, the state, first); nil if the process is gone.
func statFields(pid int) []string {
	return launch.StatFields(fmt.Sprintf("/proc/%d/stat", pid))
}

// switches is how many times a process's threads have been switched off
// their CPU so far (voluntary and not, summed over /proc/PID/task/*/status):
// each is a thread that slept and had to be woken, the cost that dominates a
// processor's profile on this machine.
func switches(pid int) int64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var n int64
	for _, t := range tasks {
		path := fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name())
		n += statusFields(path, "voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")
	}
	return n
}

// statusFields reads the numbers after the given names in a /proc status
// file (units such as " kB" dropped) and returns their sum; a missing file
// or field counts 0 (a thread that exited).
func statusFields(path string, names ...string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	var sum int64
	for line := range strings.Lines(string(b)) {
		for _, name := range names {
			if v, ok := strings.CutPrefix(line, name); ok {
				n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				sum += n
			}
		}
	}
	return sum
}

// machineCPU is the CPU time all cores have spent busy and in total since
// boot, from the first line of /proc/stat.
func machineCPU() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:] {
		n, _ := strconv.ParseInt(f, 10, 64)
		d := time.Duration(n) * clockTick
		total += d
		if i != 3 && i != 4 { // idle, iowait
			busy += d
		}
	}
	return busy, total
}

// rssKB is a process's resident memory (VmRSS) in KiB.
func rssKB(pid int) int64 {
	return statusFields(fmt.Sprintf("/proc/%d/status", pid), "VmRSS:")
}

// redisStats reads the counters the bench needs from INFO: calls and time
// per command (commandstats: a script's time includes the commands it ran,
// which are counted on their own too) and the server's CPU time (cpu
// section).
type redisStats struct {
	calls map[string]int64
	usec  map[string]int64
	cpu   time.Duration
}

func readRedisStats(rdb *redis.Client) redisStats {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st := redisStats{calls: map[string]int64{}, usec: map[string]int64{}}
	info, err := rdb.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return st
	}
	var cpu float64
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, fields, _ := strings.Cut(rest, ":")
			for f := range strings.SplitSeq(fields, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					st.calls[name], _ = strconv.ParseInt(v, 10, 64)
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					st.usec[name], _ = strconv.ParseInt(v, 10, 64)
				}
			}
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			x, _ := strconv.ParseFloat(v, 64)
			cpu += x
		}
	}
	st.cpu = time.Duration(cpu * float64(time.Second))
	return st
}

// sub returns the change from o to s. The INFO, PING and other commands
// the bench itself sends are taken out by the caller.
func (s redisStats) sub(o redisStats) redisStats {
	d := redisStats{calls: map[string]int64{}, usec: map[string]int64{}, cpu: s.cpu - o.cpu}
	for k, v := range s.calls {
		if n := v - o.calls[k]; n != 0 {
			d.calls[k] = n
		}
	}
	for k, v := range s.usec {
		if n := v - o.usec[k]; n != 0 {
			d.usec[k] = n
		}
	}
	return d
}

// sidecarStats are a few figures from the sidecar's Prometheus endpoint.
// Live heap, goroutine stacks and goroutines tell what the RSS alone
// cannot (how much is live, and what each stream holds); the store
// histograms' sums and counts tell how long the two Redis steps on every
// request's path took as the sidecar saw them.
type sidecarStats struct {
	heapInuse, stackInuse, goroutines float64
	admitSum, admitCount              float64
	settleSum, settleCount            float64
	allocBytes, gcCycles              float64
	// Admissions by where they were decided (leases on only).
	leaseAdmits, storeAdmits float64
}

func sidecarMetrics(url string) sidecarStats {
	var st sidecarStats
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	fields := map[string]*float64{
		"go_memstats_heap_inuse_bytes":           &st.heapInuse,
		"go_memstats_stack_inuse_bytes":          &st.stackInuse,
		"go_goroutines":                          &st.goroutines,
		"gateway_admission_seconds_sum":          &st.admitSum,
		"gateway_admission_seconds_count":        &st.admitCount,
		"gateway_settlement_seconds_sum":         &st.settleSum,
		"gateway_settlement_seconds_count":       &st.settleCount,
		"go_memstats_alloc_bytes_total":          &st.allocBytes,
		"go_gc_duration_seconds_count":           &st.gcCycles,
		`gateway_admissions_total{path="lease"}`: &st.leaseAdmits,
		`gateway_admissions_total{path="store"}`: &st.storeAdmits,
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if dst := fields[name]; ok && dst != nil {
			*dst, _ = strconv.ParseFloat(v, 64)
		}
	}
	return st
}
