package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/modelgateway/gateway/extproc"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/control"
	"github.com/modelgateway/gateway/internal/endpoints"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/spool"
	"github.com/modelgateway/gateway/internal/store"
)

// sidecar is the running set of servers of `gateway serve`.
type sidecar struct {
	log     *slog.Logger
	grpc    *grpc.Server
	health  *health.Server
	control *http.Server
	admin   *grpc.Server // nil when no admin token is configured
	serving atomic.Bool
	// stopWatch ends the route watcher.
	stopWatch context.CancelFunc
	// ledger spools settlements the store cannot take and replays them.
	ledger *spool.Spool
	// stopHolds ends the hold renewer and sweeper.
	stopHolds context.CancelFunc

	ExtProcAddr net.Addr
	ControlAddr net.Addr
	AdminAddr   net.Addr       // nil when the admin API is not served
	Admin       *admin.Service // the admin API in process, served or not
	Store       *store.Store
}

// sidecarOptions carry what differs between `serve` and `run`.
type sidecarOptions struct {
	Config *config.Config
	Redis  redis.UniversalClient
	Logger *slog.Logger
	// Credentials maps upstream name to the vendor key; missing entries are
	// read from the upstream's credential_env.
	Credentials map[string]string
	// KeyCacheTTL bounds how long a revoked key keeps working.
	KeyCacheTTL time.Duration
	// EnvoyAdminURL is where the route watcher reads Envoy's clusters;
	// empty means http://listeners.envoy_admin.
	EnvoyAdminURL string
}

// startSidecar binds the listeners and starts serving.
func startSidecar(o sidecarOptions) (*sidecar, error) {
	c := o.Config
	// Load the tokenizer now rather than on the first estimate, which would
	// otherwise stall that reply for a fraction of a second.
	go func() {
		if err := tokens.Init(); err != nil {
			o.Logger.Warn("tokenizer unavailable; estimates fall back to byte counts", "err", err)
		}
	}()
	st := store.New(o.Redis, store.Options{HoldTTL: c.Limits.HoldLease.D(), LedgerRetention: c.Store.LedgerRetention.D()})
	keys := auth.NewCache(st, o.KeyCacheTTL)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := extproc.NewMetrics(reg)

	var vendorRoutes []*extproc.Upstream
	for _, u := range c.Upstreams {
		cred, ok := o.Credentials[u.Name]
		if !ok {
			cred = os.Getenv(u.CredentialEnv)
		}
		if cred == "" {
			o.Logger.Warn("no vendor credential: requests are forwarded without one", "upstream", u.Name, "env", u.CredentialEnv)
		}
		r, err := extproc.NewUpstream(u, cred)
		if err != nil {
			return nil, err
		}
		vendorRoutes = append(vendorRoutes, r)
	}
	ledger, err := spool.Open(c.Store.SpoolDir, st, spool.Options{Registerer: reg, Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	renewer := holds.NewRenewer(st, o.Logger)
	sweeper := holds.NewSweeper(st, o.Logger)
	sweeper.OnSweep = func(_ string, r store.SweepResult) {
		for _, ok := range r.Applied {
			if ok {
				metrics.ObserveInterrupted()
			}
		}
	}
	proc := extproc.NewServer(extproc.Options{
		Holds:           renewer,
		MaxRequestBytes: c.Limits.MaxRequestBytes,
		Upstreams:       vendorRoutes, Keys: keys, Accounts: ledger, Metrics: metrics, Logger: o.Logger,
	})

	adminURL := o.EnvoyAdminURL
	if adminURL == "" {
		adminURL = "http://" + c.Listeners.EnvoyAdmin
	}
	watcher := endpoints.NewWatcher(adminURL, c.UpstreamNames(), reg, o.Logger)

	s := &sidecar{log: o.Logger, Store: st, ledger: ledger}
	var holdsCtx context.Context
	holdsCtx, s.stopHolds = context.WithCancel(context.Background())
	go renewer.Run(holdsCtx)
	// Sweep often enough that a dead sidecar's requests settle within about
	// one lease and a quarter.
	go sweeper.Run(holdsCtx, min(max(c.Limits.HoldLease.D()/4, 50*time.Millisecond), 5*time.Second))
	var watchCtx context.Context
	watchCtx, s.stopWatch = context.WithCancel(context.Background())
	go watcher.Run(watchCtx, time.Second)
	// Request bodies up to the configured limit arrive in one message.
	maxMsg := int(c.Limits.MaxRequestBytes) + 1<<20
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Reuse goroutines (and their grown stacks) across ext_proc streams:
		// one stream per HTTP request makes a fresh goroutine per request
		// otherwise.
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
	)
	extprocv3.RegisterExternalProcessorServer(s.grpc, proc)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)

	ctl := control.New(control.Options{
		Region:    c.Region,
		Upstreams: c.UpstreamNames(),
		Store:     st,
		Keys:      keys,
		Serving:   s.serving.Load,
		Endpoints: watcher,
		Metrics:   promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Logger:    o.Logger,
	})
	s.control = &http.Server{Handler: ctl, ReadHeaderTimeout: 10 * time.Second}

	gl, err := net.Listen("tcp", c.Listeners.ExtProc)
	if err != nil {
		return nil, fmt.Errorf("extproc listener: %w", err)
	}
	hl, err := net.Listen("tcp", c.Listeners.Control)
	if err != nil {
		gl.Close()
		return nil, fmt.Errorf("control listener: %w", err)
	}
	s.ExtProcAddr, s.ControlAddr = gl.Addr(), hl.Addr()
	if err := s.startAdmin(c, st); err != nil {
		gl.Close()
		hl.Close()
		return nil, err
	}
	go func() {
		if err := s.grpc.Serve(gl); err != nil {
			o.Logger.Error("extproc server stopped", "err", err)
		}
	}()
	go func() {
		if err := s.control.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			o.Logger.Error("control server stopped", "err", err)
		}
	}()
	s.serving.Store(true)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	o.Logger.Info("sidecar serving", "extproc", s.ExtProcAddr.String(), "control", s.ControlAddr.String())
	return s, nil
}

// Shutdown stops accepting new requests, lets in-flight streams finish
// within the context's deadline, then stops.
func (s *sidecar) Shutdown(ctx context.Context) {
	s.serving.Store(false)
	s.health.Shutdown() // probes now say NOT_SERVING
	if !stopGRPC(ctx, s.grpc) {
		s.log.Warn("shutdown deadline passed; cut the remaining streams")
	}
	// Every stream has settled: nothing is left to renew. Holds of requests
	// whose settlement waits in the spool are swept by any sidecar after a
	// lease unless the spool replays first (settlement is idempotent).
	s.stopHolds()
	// Every settlement has been made or spooled: replay what can be, keep
	// the rest on disk for the next start.
	s.ledger.Close(ctx)
	s.control.Shutdown(ctx)
	s.stopAdmin(ctx)
	s.stopWatch()
}

// stopGRPC lets calls in progress finish until ctx ends, then cuts the rest.
// It reports whether every call finished.
func stopGRPC(ctx context.Context, srv *grpc.Server) bool {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		srv.Stop()
		return false
	}
}
