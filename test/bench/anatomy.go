package main

import (
	"fmt"
	"log"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
)

// poolAnatomy splits a pool's Envoy cost into its parts, on Envoy alone (no
// ext_proc filter, so nothing else moves the figures): the same bare
// bootstrap with one key; with a pool whose aggregates inject one static
// credential (key 1's, whatever key serves: measurement only), which is
// the cost of the aggregate and its member clusters; and with the pool as
// rendered, whose upstream filters pick the serving key's credential on
// every attempt. The client names the aggregate of each request in turn,
// as the processor would.
type poolAnatomy struct {
	keys    int
	stacks  []*launch.Stack
	targets []*target
	rows    []anatomyRow
}

type anatomyRow struct {
	rate float64
	cpu  []cpuUse
	diff [][]float64 // per variant after the first: its µs/req minus the one key's, per round
}

var anatomyNames = []string{"one key", "pool, one static credential", "pool as rendered"}

func startPoolAnatomy(tb *benchTB, keys int) *poolAnatomy {
	log.Printf("starting three bare Envoy stacks for the pool's anatomy")
	a := &poolAnatomy{keys: keys}
	opts := []launch.Options{
		{Bare: true},
		{Bare: true, Pool: keys, Bootstrap: staticCredentialPool},
		{Bare: true, Pool: keys},
	}
	for i, o := range opts {
		s := up(tb, o)
		t := newTarget(anatomyNames[i], s.URL, map[string]string{
			"x-api-key": "unused", "anthropic-version": "2023-06-01", "content-type": "application/json",
		})
		if o.Pool > 0 {
			for _, k := range launch.PoolKeys(keys) {
				t.keyClusters = append(t.keyClusters, config.KeyCluster("alpha", k))
			}
		}
		if err := t.call(request{messagesPath, messagesBody(false)}); err != nil {
			tb.Fatalf("%s: %v", t.name, err)
		}
		a.stacks, a.targets = append(a.stacks, s), append(a.targets, t)
	}
	return a
}

// staticCredentialPool renders the bare bootstrap of a pool and replaces
// each aggregate's upstream filters by one static credential injector, of
// the upstream's first key.
func staticCredentialPool(cfg *config.Config) ([]byte, error) {
	boot, err := envoy.Render(cfg, envoy.Options{Bare: true, NodeID: "test"})
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := yaml.Unmarshal(boot, &doc); err != nil {
		return nil, err
	}
	clusters, _ := dig(doc, "static_resources", "clusters").([]any)
	replaced := 0
	for _, c := range clusters {
		c, _ := c.(map[string]any)
		if dig(c, "cluster_type", "name") != "envoy.clusters.aggregate" {
			continue
		}
		opts, _ := dig(c, "typed_extension_protocol_options", "envoy.extensions.upstreams.http.v3.HttpProtocolOptions").(map[string]any)
		filters, _ := opts["http_filters"].([]any)
		upstream, _, _ := strings.Cut(c["name"].(string), "--")
		header := "x-api-key"
		if upstream == "beta" {
			header = "authorization"
		}
		opts["http_filters"] = []any{map[string]any{
			"name": "envoy.filters.http.credential_injector",
			"typed_config": map[string]any{
				"@type":     "type.googleapis.com/envoy.extensions.filters.http.credential_injector.v3.CredentialInjector",
				"overwrite": true,
				"credential": map[string]any{
					"name": "envoy.http.injected_credentials.generic",
					"typed_config": map[string]any{
						"@type":      "type.googleapis.com/envoy.extensions.http.injected_credentials.generic.v3.Generic",
						"credential": map[string]any{"name": upstream + "-vendor-key-" + launch.PoolKeys(2)[0]},
						"header":     header,
					},
				},
			},
		}, filters[len(filters)-1]}
		replaced++
	}
	if replaced == 0 {
		return nil, fmt.Errorf("no aggregate cluster in the pool's bootstrap")
	}
	return yaml.Marshal(doc)
}

// dig follows keys through nested maps; nil when one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// run measures each rate: rounds of one slice per stack, the order
// reversed every other round.
func (a *poolAnatomy) run(p plan, rounds int) {
	req := request{messagesPath, messagesBody(false)}
	for _, rate := range p.rates {
		log.Printf("pool anatomy: %.0f requests/s", rate)
		row := anatomyRow{rate: rate, cpu: make([]cpuUse, len(a.stacks)), diff: make([][]float64, len(a.stacks))}
		for _, t := range a.targets {
			load(t, req, rate, p.warm)
		}
		for r := range rounds {
			perReq := make([]float64, len(a.stacks))
			for _, i := range roundOrder(r, len(a.stacks)) {
				pid := a.stacks[i].Envoy.Cmd.Process.Pid
				before := cpuTime(pid)
				l := load(a.targets[i], req, rate, p.slice)
				used := cpuTime(pid) - before
				n := l.ok + l.failed
				row.cpu[i].envoy += used
				row.cpu[i].requests += n
				if n > 0 {
					perReq[i] = float64(used.Microseconds()) / float64(n)
				}
			}
			for i := 1; i < len(perReq); i++ {
				row.diff[i] = append(row.diff[i], perReq[i]-perReq[0])
			}
		}
		a.rows = append(a.rows, row)
	}
}

func (a *poolAnatomy) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Where a pool of %d keys spends Envoy's time\n\n", a.keys)
	b.WriteString("Envoy alone (no ext_proc filter), three stacks, slices alternating: one key; a pool whose aggregates inject one " +
		"static credential whatever key serves (measurement only: the aggregate and its member clusters); the pool as rendered " +
		"(each attempt's credential picked by the serving host's key). The client names each request's aggregate in turn, as the " +
		"processor would. Differences are per round against the one key's, as in the comparison above.\n\n")
	b.WriteString("| Rate (req/s) | one key µs/req | static credential µs/req | as rendered µs/req | static − one per round | rendered − one per round |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range a.rows {
		per := func(i int) string {
			if r.cpu[i].requests == 0 {
				return "—"
			}
			return fmt.Sprint(r.cpu[i].envoy.Microseconds() / r.cpu[i].requests)
		}
		fmt.Fprintf(&b, "| %.0f | %s | %s | %s | %s | %s |\n", r.rate, per(0), per(1), per(2), pairedDiff(r.diff[1]), pairedDiff(r.diff[2]))
	}
	return b.String()
}
