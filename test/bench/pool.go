package main

import (
	"fmt"
	"log"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/test/launch"
)

// poolBench compares, in the same run, the gateway with one vendor key per
// upstream and the gateway with a pool of keys: the same non-streaming
// requests at each of the plan's rates, each request a session of its own
// (so the pool spreads them over its keys), alternating slices between the
// two stacks. Each stack has its own fake vendor (the pool's accepts its
// keys), Redis and sidecar; the figures are the client's latency and the
// sidecar's and Envoy's CPU per request.
type poolBench struct {
	keys     int
	one, big *launch.Stack
	oneT     *target
	bigT     *target
	rows     []poolRow
}

type poolRow struct {
	rate float64
	lat  [2]*latencies // one key, pool
	cpu  [2]cpuUse
	// envoyDiff is, per round, the pool's Envoy CPU per request minus the
	// one key's in the same round: the comparison's own spread.
	envoyDiff []float64
}

// sessionSeq numbers the pool bench's sessions.
var sessionSeq atomic.Int64

// startPoolBench starts the two stacks (-pool N).
func startPoolBench(tb *benchTB, keys int, sidecarEnv []string) *poolBench {
	log.Printf("starting the one-key and the %d-key gateway stacks", keys)
	opts := func(pool int) launch.Options {
		return launch.Options{SidecarArgs: []string{"--log-level", "info"}, SidecarEnv: sidecarEnv, Pool: pool}
	}
	pb := &poolBench{keys: keys, one: up(tb, opts(0)), big: up(tb, opts(keys))}
	newT := func(name string, s *launch.Stack) *target {
		acct := s.NewAccount(1_000_000, account.Limits{})
		return newTarget(name, s.URL, map[string]string{
			"x-api-key": acct.Key, "anthropic-version": "2023-06-01", "content-type": "application/json",
		})
	}
	pb.oneT, pb.bigT = newT("one key", pb.one), newT(fmt.Sprintf("pool of %d", keys), pb.big)
	pb.oneT.sessions, pb.bigT.sessions = true, true
	for _, t := range []*target{pb.oneT, pb.bigT} {
		if err := t.call(request{messagesPath, messagesBody(false)}); err != nil {
			tb.Fatalf("%s: %v", t.name, err)
		}
	}
	return pb
}

func (pb *poolBench) cpu(s *launch.Stack) cpuSnap {
	return cpuSnap{sidecar: cpuTime(s.Sidecar.Cmd.Process.Pid), envoy: cpuTime(s.Envoy.Cmd.Process.Pid)}
}

// run measures each rate: a warm-up slice each, then rounds of one slice
// per stack, the order reversed every other round.
func (pb *poolBench) run(p plan, rounds int) {
	req := request{messagesPath, messagesBody(false)}
	stacks := [2]*launch.Stack{pb.one, pb.big}
	targets := [2]*target{pb.oneT, pb.bigT}
	for _, rate := range p.rates {
		log.Printf("pool: %.0f requests/s, one key against %d", rate, pb.keys)
		row := poolRow{rate: rate, lat: [2]*latencies{newLatencies(), newLatencies()}}
		for _, t := range targets {
			load(t, req, rate, p.warm)
		}
		for r := range rounds {
			var perReq [2]float64
			for _, i := range roundOrder(r, len(stacks)) {
				before := pb.cpu(stacks[i])
				l := load(targets[i], req, rate, p.slice)
				after := pb.cpu(stacks[i])
				row.lat[i].merge(l)
				row.cpu[i].sidecar += after.sidecar - before.sidecar
				row.cpu[i].envoy += after.envoy - before.envoy
				n := l.ok + l.failed
				row.cpu[i].requests += n
				if n > 0 {
					perReq[i] = float64((after.envoy - before.envoy).Microseconds()) / float64(n)
				}
			}
			row.envoyDiff = append(row.envoyDiff, perReq[1]-perReq[0])
		}
		pb.rows = append(pb.rows, row)
	}
}

// markdown is the comparison's section of the report.
func (pb *poolBench) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## A pool of %d vendor keys against one key\n\n", pb.keys)
	b.WriteString("Same run, same plan, slices alternating between two gateway stacks, each request a session of its own " +
		"(the pool's are spread over its keys by rendezvous hashing, each key its own Envoy clusters and aggregate). " +
		"Latency is the client's (service time); CPU is the sidecar's and Envoy's per request.\n\n")
	b.WriteString("The last column is the pool's Envoy CPU per request minus the one key's, round by round (each round one slice of each, " +
		"back to back): the median, the range, and in how many rounds the pool's was the higher. A cost shows as a median above zero " +
		"with most rounds higher; noise as a range across zero.\n\n")
	b.WriteString("| Rate (req/s) | p50 one key | p50 pool | p99 one key | p99 pool | errors one key / pool | sidecar CPU µs/req one key / pool | Envoy CPU µs/req one key / pool | Envoy pool − one per round (µs/req) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	per := func(d time.Duration, n int64) string {
		if n == 0 {
			return "—"
		}
		return strconv.FormatInt(d.Microseconds()/n, 10)
	}
	for _, r := range pb.rows {
		q := func(i int, p float64) string {
			return fmt.Sprintf("%.2f ms", float64(r.lat[i].service.ValueAtQuantile(p))/1000)
		}
		fmt.Fprintf(&b, "| %.0f | %s | %s | %s | %s | %d / %d | %s / %s | %s / %s | %s |\n", r.rate, q(0, 50), q(1, 50), q(0, 99), q(1, 99),
			r.lat[0].errors(), r.lat[1].errors(),
			per(r.cpu[0].sidecar, r.cpu[0].requests), per(r.cpu[1].sidecar, r.cpu[1].requests),
			per(r.cpu[0].envoy, r.cpu[0].requests), per(r.cpu[1].envoy, r.cpu[1].requests), pairedDiff(r.envoyDiff))
	}
	return b.String()
}

// sessionHeader sets a fresh session marker on each request of a target
// with sessions.
func sessionHeader(h http.Header) {
	h.Set("x-claude-code-session-id", "bench-"+strconv.FormatInt(sessionSeq.Add(1), 10))
}

// roundOrder is the order of n stacks in round r: reversed every other
// round, so that what drifts during a round falls on each alike.
func roundOrder(r, n int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if r%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}

// pairedDiff summarises per-round differences: median, range, and the
// rounds in which the difference was above zero.
func pairedDiff(d []float64) string {
	if len(d) == 0 {
		return "—"
	}
	s := slices.Clone(d)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	higher := 0
	for _, x := range s {
		if x > 0 {
			higher++
		}
	}
	return fmt.Sprintf("%+.0f (%+.0f to %+.0f), higher in %d of %d", med, s[0], s[len(s)-1], higher, len(s))
}
