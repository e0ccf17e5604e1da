package deploy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
)

// The shell snippets that talk to Envoy's admin from inside its image (which
// has bash but no curl) work against a real Envoy: the compose health check
// sees it ready, and the pod's preStop hook drains it, waits for the request
// in flight, and returns once the listener is closed.
func TestEnvoyHealthCheckAndPreStopHook(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	bin := envoyBinary(t)

	// The composed health check and the k8s hook, aimed at this test's admin
	// port instead of 9901.
	p := loadCompose(t)
	hc := p.Services["envoy"].HealthCheck.Test
	if len(hc) != 4 || hc[0] != "CMD" || hc[1] != "bash" || hc[2] != "-c" {
		t.Fatalf("envoy health check %q: want [CMD bash -c SCRIPT]", hc)
	}
	s := loadK8s(t)
	hook := s.envoy(t).Lifecycle.PreStop.Exec.Command
	if len(hook) != 3 || hook[0] != "bash" || hook[1] != "-c" {
		t.Fatalf("preStop %q: want [bash -c SCRIPT]", hook)
	}
	_, adminPort := port(t, podConfig(t, s).Listeners.EnvoyAdmin)
	target := "/dev/tcp/127.0.0.1/" + strconv.Itoa(int(adminPort))
	for _, script := range []string{hc[3], hook[2]} {
		if !strings.Contains(script, target) {
			t.Fatalf("script does not reach the admin at %s:\n%s", target, script)
		}
	}

	// A slow control server behind Envoy's /health route (no ext_proc there).
	ctl := listen(t)
	release := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Write([]byte(`{"status":"ok"}`))
	})}
	go srv.Serve(ctl)
	t.Cleanup(func() { srv.Close() })

	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Upstreams { // no DNS, nothing leaves the machine
		u := &cfg.Upstreams[i]
		u.Primary.URL, u.Reserve.URL = "http://127.0.0.1:9", "http://127.0.0.1:9"
	}
	admin, public := freeAddr(t), freeAddr(t)
	boot, err := envoy.Render(cfg, envoy.Options{
		PublicAddr: public, AdminAddr: admin, ProbesAddr: freeAddr(t), ExtProcAddr: freeAddr(t), ControlAddr: ctl.Addr().String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, boot, 0o644); err != nil {
		t.Fatal(err)
	}
	_, ap := bootAddr(t, admin)
	local := "/dev/tcp/127.0.0.1/" + strconv.Itoa(ap)
	run := func(ctx context.Context, script string) error {
		return exec.CommandContext(ctx, "bash", "-c", strings.ReplaceAll(script, target, local)).Run()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-c", path, "--disable-hot-restart", "--log-level", "error",
		"--drain-time-s", "1", "--drain-strategy", "immediate")
	cmd.Stderr = os.Stderr // the access log (stdout) is noise here
	cmd.Env = append(os.Environ(), "ALPHA_API_KEY=test-alpha", "BETA_API_KEY=test-beta")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })

	// The health check fails until Envoy is ready, then passes.
	eventually.True(t, 30*time.Second, "the compose health check passes", func() bool { return run(ctx, hc[3]) == nil })

	// A request in flight when the pod starts terminating.
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + public + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		done <- err
	}()
	eventually.True(t, 30*time.Second, "the request reaches Envoy", func() bool { return inFlight(admin) })
	hookDone := make(chan error, 1)
	start := time.Now()
	go func() { hookDone <- run(ctx, hook[2]) }()

	// The drain closes the public listener; the hook waits on for the
	// request in flight.
	eventually.That(t, 30*time.Second, "the drain closes the public listener", func() (bool, string) {
		c, err := net.DialTimeout("tcp", public, time.Second)
		if err != nil {
			return true, ""
		}
		c.Close()
		return false, "it accepts connections"
	})
	select {
	case err := <-hookDone:
		t.Fatalf("preStop returned (%v) while a request was in flight", err)
	default:
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("the request in flight failed: %v", err)
	}
	if err := <-hookDone; err != nil {
		t.Errorf("preStop: %v", err)
	}
	t.Logf("preStop returned after %v", time.Since(start).Round(time.Millisecond))
}

// inFlight tells whether Envoy's public listener has a request in flight.
func inFlight(admin string) bool {
	resp, err := http.Get("http://" + admin + "/stats?filter=^http.public.downstream_rq_active$")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), "downstream_rq_active: 1")
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// freeAddr is a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	l := listen(t)
	defer l.Close()
	return l.Addr().String()
}
