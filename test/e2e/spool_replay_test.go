package e2e

import (
	"fmt"
	"net/http"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/redistest"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// replayCase is one request whose ledger entry carries evidence beyond its
// cost: it runs once with Redis up (the reference) and once settled into
// the spool during an outage, then replayed by a restarted sidecar.
type replayCase struct {
	name     string
	controls map[string]any // the fake primary's, for this request only
	path     string
	header   func(key string) map[string]string
	body     []byte
	check    func(account.Settlement) bool // the evidence the reference must carry
}

// startReplayCases starts each case's streamed request on its own account,
// one after the other: the fake reads its controls when a request starts,
// so each case's apply to its own request. It returns once every request is
// admitted (its reply has begun), with the channels of their outcomes.
func startReplayCases(t *testing.T, s *launch.Stack, cases []replayCase, accts []launch.Account) []chan clientReply {
	t.Helper()
	done := make([]chan clientReply, len(cases))
	for i, c := range cases {
		s.Primary.Control(c.controls)
		admitted := make(chan struct{})
		done[i] = make(chan clientReply, 1)
		go func() {
			done[i] <- postAndRead(http.DefaultClient, s.URL+c.path, c.header(accts[i].Key), c.body, 0, func() { close(admitted) })
		}()
		select {
		case <-admitted:
		case r := <-done[i]:
			t.Fatalf("%s: not admitted: %d %v %s", c.name, r.status, r.err, r.body)
		}
	}
	return done
}

// A settlement spooled during a Redis outage and replayed after a SIGKILL
// of its sidecar and a restart is the ledger entry the same request gets
// without an outage, field by field: its regional uplift, its capped usage
// and its unknown tier included (spool records of version 2 lost them).
func TestSpoolReplayEqualsLedgerEntry(t *testing.T) {
	rs := redistest.NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	s := launchtest.Start(t, launch.Options{RedisAddr: rs.Addr, Configure: func(c *config.Config) {
		// beta's primary processes in the EU, as the shipped reserve does,
		// so that its replies are priced with the uplift.
		for i := range c.Upstreams {
			if c.Upstreams[i].Name == "beta" {
				c.Upstreams[i].Primary.RegionalProcessing = "eu"
			}
		}
	}})
	// The streams last a few seconds (12 events 250 ms apart), long enough
	// for every case to be admitted before Redis stops.
	const words, delay = 12, 250
	cases := []replayCase{
		{
			name: "regional uplift",
			controls: map[string]any{"format": config.FormatChatCompletions, "reply_words": words, "event_delay_ms": delay,
				"cache_read_tokens": 40, "reasoning_tokens": 7},
			path: betaPath, header: chatCompletionsHeaders,
			// A model whose catalogue entry has an EU uplift.
			body: []byte(`{"model":"gpt-5.4","max_tokens":256,"stream":true,"stream_options":{"include_usage":true},` +
				`"messages":[{"role":"user","content":"Hello there, gateway"}]}`),
			check: func(st account.Settlement) bool { return st.Region == "eu" && st.Uplift > 1_000_000 },
		},
		{
			name: "capped usage",
			// The vendor claims far more output than max_tokens allows.
			controls: map[string]any{"format": config.FormatMessages, "reply_words": words, "event_delay_ms": delay,
				"output_tokens": 5000, "service_tier": ""},
			path: alphaPath, header: messagesHeaders, body: messagesBody(true, ""),
			check: func(st account.Settlement) bool { return st.Capped && st.Usage.Output == 256 },
		},
		{
			name: "unknown tier",
			// A tier the catalogue has no prices for: priced at the dearest.
			controls: map[string]any{"format": config.FormatMessages, "reply_words": words, "event_delay_ms": delay,
				"output_tokens": 0, "service_tier": "batch"},
			path: alphaPath, header: messagesHeaders, body: messagesBody(true, ""),
			check: func(st account.Settlement) bool { return st.TierUnknown && st.ServiceTier == "batch" },
		},
	}
	accts := make([]launch.Account, len(cases))
	for i := range cases {
		accts[i] = s.NewAccount(10, noLimits)
	}

	// The references, settled with Redis up.
	for i, d := range startReplayCases(t, s, cases, accts) {
		if r := <-d; r.status != 200 || !r.complete {
			t.Fatalf("%s reference: %d %v", cases[i].name, r.status, r.err)
		}
	}
	refs := make([]ledger.Entry, len(cases))
	for i, c := range cases {
		var l []ledger.Entry
		eventually.True(t, 20*time.Second, c.name+"'s reference entry", func() bool {
			l = allLedgerEntries(t, s, accts[i].ID)
			return len(l) == 1
		})
		refs[i] = l[0]
		if !c.check(refs[i].Settlement) || refs[i].Cost == 0 {
			t.Fatalf("%s: the reference entry does not show the case: %+v", c.name, refs[i])
		}
	}

	// The same requests, admitted, then Redis stops before they end: their
	// settlements go to the spool.
	done := startReplayCases(t, s, cases, accts)
	rs.Stop()
	for i, d := range done {
		if r := <-d; r.status != 200 || !r.complete {
			t.Fatalf("%s during the outage: %d %v", cases[i].name, r.status, r.err)
		}
	}
	eventually.True(t, 20*time.Second, "the settlements to be spooled", func() bool {
		return sidecarMetric(t, s, "gateway_spool_depth") == float64(len(cases))
	})
	s.Sidecar.Signal(syscall.SIGKILL)
	if !s.Sidecar.Wait(10 * time.Second) {
		t.Fatal("sidecar survived SIGKILL")
	}
	rs.Start()
	if err := s.StartSidecar(); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, 30*time.Second, "the new sidecar to replay the spool", func() bool {
		return sidecarMetric(t, s, "gateway_spool_depth") == 0
	})
	if got := sidecarMetric(t, s, "gateway_spool_replayed_total", `result="applied"`); got != float64(len(cases)) {
		t.Fatalf("replayed %v, want %d", got, len(cases))
	}

	for i, c := range cases {
		l := allLedgerEntries(t, s, accts[i].ID)
		if len(l) != 2 {
			t.Fatalf("%s: %d ledger entries, want the reference and the replayed one", c.name, len(l))
		}
		ref, got := refs[i], l[1]
		if got.RequestID == ref.RequestID || got.ID == ref.ID {
			t.Fatalf("%s: the replayed entry is the reference: %+v", c.name, got)
		}
		// What legitimately differs between two requests: their ids and
		// when they ran (the entry id is the ledger's own).
		for _, e := range []*ledger.Entry{&ref, &got} {
			e.ID, e.RequestID, e.StartedAt, e.EndedAt = "", "", time.Time{}, time.Time{}
		}
		if !reflect.DeepEqual(got, ref) {
			t.Errorf("%s: the replayed entry differs from the reference:\n%s", c.name, fieldDiff(got.Settlement, ref.Settlement))
		}
	}
}

// fieldDiff names the fields in which two settlements differ.
func fieldDiff(got, want account.Settlement) string {
	var out string
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range g.NumField() {
		if a, b := g.Field(i).Interface(), w.Field(i).Interface(); !reflect.DeepEqual(a, b) {
			out += fmt.Sprintf("  %s: got %+v, want %+v\n", g.Type().Field(i).Name, a, b)
		}
	}
	return out
}
