package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/usage"
)

// syncBuffer is a log destination safe for the reload goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func loadedSidecar(t *testing.T, path string) (*sidecar, *syncBuffer) {
	t.Helper()
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	book, err := pricing.NewBook(cfg, operations.All.Modes())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	return &sidecar{log: slog.New(slog.NewTextHandler(logs, nil)), Prices: book}, logs
}

func outputPrice(t *testing.T, sc *sidecar) int64 {
	t.Helper()
	m, ok := sc.Prices["beta"].Lookup("fake-gpt-1")
	if !ok {
		t.Fatal("fake-gpt-1 not served")
	}
	return m.Price(usage.Usage{Output: 1_000_000}, "", "").Cost
}

// SIGHUP makes a changed gateway.yaml's prices current; a request that
// looked its prices up before keeps them; a bad file is refused with a log
// line and the prices in force stay.
func TestReloadOnHangup(t *testing.T) {
	path := testConfig(t, betaModels)
	sc, logs := loadedSidecar(t, path)
	if got := outputPrice(t, sc); got != 7_000_000_000 {
		t.Fatalf("output price %d", got)
	}
	inFlight, _ := sc.Prices["beta"].Lookup("fake-gpt-1")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloadOnHangup(ctx, sc, path, sc.log)

	hangup := func(want int64) {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		eventually.That(t, 10*time.Second, fmt.Sprintf("output price %d after SIGHUP", want), func() (bool, string) {
			got := outputPrice(t, sc)
			return got == want, fmt.Sprintf("%d\n%s", got, logs)
		})
	}
	os.WriteFile(path, []byte(strings.Replace(mustRead(t, path), "{output: 7}", "{output: 9}", 1)), 0o644)
	hangup(9_000_000_000)
	if got := inFlight.Price(usage.Usage{Output: 1_000_000}, "", "").Cost; got != 7_000_000_000 {
		t.Errorf("a request admitted before the reload now costs %d", got)
	}

	// A bad file: refused, logged, prices unchanged. A good one after it
	// still loads, which also shows the bad one was handled.
	good := mustRead(t, path)
	for _, bad := range []string{
		strings.Replace(good, "{output: 9}", "{output: -9}", 1),
		strings.Replace(good, "providers: [openai]", "providers: [openai]\n      aliases: {x: nothing}", 1),
		"upstreams: [\n",
	} {
		before := strings.Count(logs.String(), "prices not reloaded")
		os.WriteFile(path, []byte(bad), 0o644)
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		eventually.That(t, 10*time.Second, "a log line for a bad file", func() (bool, string) {
			return strings.Count(logs.String(), "prices not reloaded") > before, logs.String()
		})
		if got := outputPrice(t, sc); got != 9_000_000_000 {
			t.Fatalf("bad file changed prices: %d", got)
		}
	}
	os.WriteFile(path, []byte(strings.Replace(good, "{output: 9}", "{output: 11}", 1)), 0o644)
	hangup(11_000_000_000)
}

// A catalogue that does not load is refused like a bad gateway.yaml.
func TestReloadRefusesBadCatalogue(t *testing.T) {
	path := testConfig(t, betaModels)
	sc, _ := loadedSidecar(t, path)
	bad := t.TempDir() + "/catalogue.json"
	os.WriteFile(bad, []byte(`{"m": {"litellm_provider": "openai", "mode": "chat", "input_cost_per_token": "x", "output_cost_per_token": 1}}`), 0o644)
	y := mustRead(t, path)
	cat := strings.SplitN(strings.SplitN(y, "catalogue: ", 2)[1], "\n", 2)[0]
	os.WriteFile(path, []byte(strings.Replace(y, cat, bad, 1)), 0o644)
	err := sc.ReloadPrices(path)
	if err == nil || !strings.Contains(err.Error(), `model "m": input_cost_per_token`) {
		t.Fatalf("err = %v", err)
	}
	if got := outputPrice(t, sc); got != 7_000_000_000 {
		t.Fatalf("prices changed: %d", got)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
