package main

import (
	"fmt"
	"strings"
	"testing"
)

// Every figure of the targets table is stated once in the report: a
// second copy elsewhere would be a second place for one fact.
func TestReportStatesEachTargetOnce(t *testing.T) {
	r := &results{
		plan:          fullPlan,
		trace:         redisTrace{client: map[string]int64{"evalsha": 9}},
		traceRequests: 20,
		memory:        memoryResult{streams: 10, open: [nStacks]int{10, 10, 10}},
	}
	md := r.markdown()
	section := md[strings.Index(md, "## Against the targets"):]
	section = section[:strings.Index(section, "\n## ")]
	var targets []string
	for _, line := range strings.Split(section, "\n")[4:] { // title, blank, header, rule
		if strings.HasPrefix(line, "| ") {
			targets = append(targets, line[:strings.Index(line[2:], " | ")+2])
		}
	}
	if len(targets) < 2 {
		t.Fatalf("the report has %d target rows:\n%s", len(targets), md)
	}
	for _, name := range targets {
		if n := strings.Count(md, name+" |"); n != 1 {
			t.Errorf("%q is stated %d times", name, n)
		}
	}
}

// The store's share of admissions is stated only where leases were on: with
// leases off the sidecar exports no such counters and every admission is
// the script's, which is no finding.
func TestByStoreSaysWhenLeasesWereOff(t *testing.T) {
	for _, c := range []struct {
		u    cpuUse
		want string
	}{
		{cpuUse{}, "—"},
		{cpuUse{leaseAdmits: 1290, storeAdmits: 10}, "10 (0.8 %)"},
		{cpuUse{storeAdmits: 3}, "3 (100.0 %)"},
	} {
		if got := c.u.byStore(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.u, got, c.want)
		}
	}
}

// A sustained-rate step says how many of the gateway's admissions went to
// the store's script, the round trip that lengthens the tail near the knee;
// a step the gateway did not run says nothing of it.
func TestStepTableSaysWhatTheStoreDecided(t *testing.T) {
	ran := newLatencies()
	r := &results{plan: fullPlan, steps: []stepRow{
		{rate: 3000, l: [nStacks]*latencies{gwI: ran}, ok: [nStacks]bool{gwI: true}, cpu: [nStacks]cpuUse{gwI: {leaseAdmits: 990, storeAdmits: 10}}},
		{rate: 4000, l: [nStacks]*latencies{nullI: ran}, ok: [nStacks]bool{nullI: true}},
	}}
	var b strings.Builder
	r.stepTable(func(f string, a ...any) { fmt.Fprintf(&b, f, a...) })
	rows := map[string]string{}
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| 3,000/s |") || strings.HasPrefix(line, "| 4,000/s |") {
			rows[line[2:9]] = line
		}
	}
	if got := rows["3,000/s"]; !strings.Contains(got, "| yes | 10 (1.0 %) |") {
		t.Errorf("the step the gateway ran: %q", got)
	}
	if got := rows["4,000/s"]; !strings.HasPrefix(got, "| 4,000/s | — | — | — | — | — | 0 |") {
		t.Errorf("the step it did not run: %q", got)
	}
}
