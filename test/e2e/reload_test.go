package e2e

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/test/launch"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// A SIGHUP to the sidecar makes a changed gateway.yaml's prices current
// without dropping the stream in flight, which is billed at the prices it
// started with; a bad file is refused with a log line and prices stay.
func TestPriceReloadOnSIGHUP(t *testing.T) {
	price := func(usd float64) config.Price { return config.Price{Input: &usd, Output: &usd} }
	s := launchtest.Start(t, launch.Options{Configure: func(c *config.Config) {
		for i := range c.Upstreams {
			if c.Upstreams[i].Name == "alpha" {
				c.Upstreams[i].Models.Overrides = map[string]config.Price{alphaModel: price(1)}
			}
		}
	}})
	acct := s.NewAccount(100, noLimits)
	cfgPath := filepath.Join(s.Dir, "gateway.yaml")
	rewrite := func(usd float64) {
		t.Helper()
		cfg, err := config.Load(cfgPath)
		if err != nil {
			t.Fatal(err)
		}
		for i := range cfg.Upstreams {
			if cfg.Upstreams[i].Name == "alpha" {
				cfg.Upstreams[i].Models.Overrides = map[string]config.Price{alphaModel: price(usd)}
			}
		}
		b, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hangup := func(logLine string) {
		t.Helper()
		before := strings.Count(s.Sidecar.Log(), logLine)
		s.Sidecar.Signal(syscall.SIGHUP)
		eventually.That(t, 20*time.Second, "\""+logLine+"\" in the sidecar log after SIGHUP", func() (bool, string) {
			return strings.Count(s.Sidecar.Log(), logLine) > before, s.Sidecar.Tail(20)
		})
	}

	// A slow stream is admitted at $1 per million tokens.
	s.Primary.Control(map[string]any{"format": config.FormatMessages, "event_delay_ms": 200})
	resp := open(t, context.Background(), s, alphaPath, messagesHeaders(acct.Key), messagesBody(true, ""))
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	r := bufio.NewReader(resp.Body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	rewrite(2)
	hangup("prices reloaded")
	reloaded := time.Now()
	evs := readEvents(t, r)
	if len(evs) == 0 || evs[len(evs)-1].Name != "message_stop" {
		t.Fatalf("the stream in flight did not finish: %+v", evs)
	}
	if !evs[len(evs)-1].At.After(reloaded) {
		t.Fatal("the stream ended before the reload: nothing was in flight")
	}
	s.Primary.Control(map[string]any{"format": config.FormatMessages, "event_delay_ms": 0})
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, "")); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}

	// A bad file: refused, and the $2 prices stay.
	if err := os.WriteFile(cfgPath, []byte("upstreams: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hangup("prices not reloaded")
	if resp, b := s.Do("POST", alphaPath, messagesHeaders(acct.Key), messagesBody(false, "")); resp.StatusCode != 200 {
		t.Fatalf("after a bad file: %d %s", resp.StatusCode, b)
	}

	entries, _, err := s.Store.Ledger(context.Background(), acct.ID, "", 10)
	if err != nil || len(entries) != 3 {
		t.Fatalf("ledger %+v, %v", entries, err)
	}
	for i, want := range []int64{1_000_000_000, 2_000_000_000, 2_000_000_000} { // nano-USD per million
		e := entries[i]
		tokens := e.Usage.Input + e.Usage.Output
		if e.Rates.Input != want || e.Rates.Output != want || e.Cost != (tokens*want+999_999)/1_000_000 || e.Estimated {
			t.Errorf("request %d: rates %d/%d cost %d for %d tokens; want %d per million", i, e.Rates.Input, e.Rates.Output, e.Cost, tokens, want)
		}
	}
}
