package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// reduced runs the stack against an Envoy configured with only what Envoy
// Gateway's EnvoyExtensionPolicy can express for the ext_proc filter
// (envoy.contract reduced, docs/envoy.md): the attributes response.code
// and upstream.address, no max_message_timeout, no mutation of x-envoy-*
// headers, a message timeout of 5 s (EnvoyExtensionPolicy's
// messageTimeout, set as docs/envoy.md says), and no gateway metadata on
// the hosts.
var reduced = launch.Options{
	Configure: func(c *config.Config) { c.Envoy.Contract = config.ContractReduced },
	Bootstrap: reducedBootstrap,
}

// reducedBootstrap is the rendering of the reduced contract, refused
// unless it is what docs/envoy.md says, so that these tests cannot pass on
// the full contract.
func reducedBootstrap(c *config.Config) ([]byte, error) {
	b, err := envoy.Render(c, envoy.Options{NodeID: "test"})
	if err != nil {
		return nil, err
	}
	boot := string(b)
	for _, absent := range []string{"xds.upstream_host_metadata", "max_message_timeout", "allow_envoy", "gateway: {endpoint", "UPSTREAM_METADATA"} {
		if strings.Contains(boot, absent) {
			return nil, fmt.Errorf("the reduced Envoy has %s", absent)
		}
	}
	if !strings.Contains(boot, `response_attributes: ["response.code", "upstream.address"]`) || !strings.Contains(boot, "message_timeout: 5s") {
		return nil, errors.New("the reduced Envoy's filter is not as docs/envoy.md says")
	}
	return b, nil
}

// The metering test, on the reduced contract: every reply billed exactly
// as the vendor reported it.
func TestReducedMeteringMatchesVendorUsage(t *testing.T) {
	meteringMatchesVendorUsage(t, reduced)
}

// Holds on the reduced contract: concurrent requests against a small
// balance, each admitted one settled once, no hold left, no overdraft.
func TestReducedConcurrentRequestsAgainstSmallBalance(t *testing.T) {
	concurrentRequestsAgainstSmallBalance(t, reduced)
}

// Failover on the reduced contract: with the primary answering 503, Envoy
// retries on the reserve and the ledger, told only the address Envoy
// connected to, names the reserve and prices its regional processing; the
// primary's replies name the primary.
func TestReducedFailoverBillsTheReserve(t *testing.T) {
	s := launchtest.Start(t, reduced)
	acct := s.NewAccount(10, noLimits)
	bu, _ := s.Config.Upstream("beta")
	bp := priceOf(t, s, "beta", betaModel)
	send := func() {
		resp, body := s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))
		if resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	send()
	s.Primary.Control(map[string]any{"status": 503})
	// Until Envoy has moved to the reserve, requests are retried there.
	eventually.That(t, 30*time.Second, "requests served by the reserve", func() (bool, string) {
		before := s.Reserve.APIRequests()
		send()
		return s.Reserve.APIRequests() > before, ""
	})
	resp, body := s.Do("POST", betaPath, chatCompletionsHeaders(acct.Key), chatCompletionsBody(false, false, ""))
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	u := chatCompletionsUsage(t, body, nil)
	s.WaitSettled()
	entries, _, err := s.Store.Ledger(t.Context(), acct.ID, "", 100)
	if err != nil || len(entries) < 3 {
		t.Fatalf("ledger %d entries, %v", len(entries), err)
	}
	if e := entries[0]; e.Endpoint != "primary" {
		t.Errorf("before the fault: endpoint %q, want primary", e.Endpoint)
	}
	last := entries[len(entries)-1]
	want := bp.Price(usage.Usage{Input: u.Input, Output: u.Output, CacheWrite5m: u.CacheWrite, CacheRead: u.CacheRead}, "", bu.Reserve.RegionalProcessing).Cost
	if last.Endpoint != "reserve" || last.Cost != want || want == 0 {
		t.Errorf("on the reserve: endpoint %q cost %d; want reserve, %d (regional processing %q)", last.Endpoint, last.Cost, want, bu.Reserve.RegionalProcessing)
	}
}
