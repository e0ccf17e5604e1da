package readme

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/config"
)

// `gateway-local --port-offset N` (make run RUN_ARGS=--port-offset=N)
// moves every listener with the config file untouched: the gateway serves
// on the shifted public port, nothing listens on the configured one.
func TestRunOnOtherPorts(t *testing.T) {
	c := newCheckout(t, nil)
	cfgPath := filepath.Join(c.dir, "gateway.yaml")
	before, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	bound := maps.Clone(c.addrs)
	bound["relay"] = cfg.Listeners.Relay // the default: gateway.yaml leaves it out
	offset := freeOffset(t, bound)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd, stdout, stderr := c.runWith(ctx, t, "--config", "gateway.yaml", "--port-offset", strconv.Itoa(offset))
	defer func() {
		cancel()
		cmd.Wait()
		if t.Failed() {
			t.Logf("gateway-local stderr:\n%s", stderr)
		}
	}()
	if banner := waitBanner(stdout); !strings.Contains(banner, "Press Ctrl-C to stop.") {
		t.Fatalf("gateway-local ended before serving:\n%s", banner)
	}
	go io.Copy(io.Discard, stdout)

	public := shifted(t, c.addrs["public"], offset)
	resp, err := http.Get("http://" + public + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /health on %s: %d", public, resp.StatusCode)
	}
	for k, addr := range c.addrs {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			t.Errorf("listeners.%s: something listens on the configured %s", k, addr)
		}
	}
	after, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Error("the run changed gateway.yaml")
	}
}

// A config copied outside the checkout, whose relative catalogue is not
// beside it, stops the run at once, in one line that names the fix, before
// anything starts (no state directory, no Envoy or fake vendor log).
func TestCatalogueCheckedBeforeStart(t *testing.T) {
	c := newCheckout(t, nil)
	yaml, err := os.ReadFile(filepath.Join(c.dir, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(c.dir, "elsewhere")
	if err := os.Mkdir(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(elsewhere, "mine.yaml"), yaml, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	state := filepath.Join(elsewhere, "state")
	cmd, stdout, stderr := c.runWith(ctx, t, "--config", "elsewhere/mine.yaml", "--state-dir", state)
	io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatal("gateway-local did not stop on a missing catalogue")
	}
	if err == nil {
		t.Fatal("gateway-local succeeded without a catalogue")
	}
	msg := strings.TrimSpace(stderr.String())
	if strings.Contains(msg, "\n") || !strings.Contains(msg, "catalogue") || !strings.Contains(msg, "GATEWAY_CATALOGUE") {
		t.Fatalf("want one line naming the catalogue and GATEWAY_CATALOGUE; got:\n%s", msg)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("the state directory exists (%v): something started before the check", err)
	}
}

// waitBanner reads stdout up to the banner's last line, or its end.
func waitBanner(stdout io.Reader) string {
	var banner strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		banner.WriteString(sc.Text() + "\n")
		if sc.Text() == "Press Ctrl-C to stop." {
			break
		}
	}
	return banner.String()
}

// freeOffset returns a port offset at which every address of addrs is free.
func freeOffset(t *testing.T, addrs map[string]string) int {
	t.Helper()
	for range 50 {
		offset := 1000 + rand.IntN(20000)
		free := true
		for _, a := range addrs {
			l, err := net.Listen("tcp", shifted(t, a, offset))
			if err != nil {
				free = false
				break
			}
			l.Close()
		}
		if free {
			return offset
		}
	}
	t.Fatal("no free port offset found")
	return 0
}

func shifted(t *testing.T, addr string, offset int) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return net.JoinHostPort(host, strconv.Itoa(p+offset))
}
