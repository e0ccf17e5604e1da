package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/extproc"
	"github.com/modelgateway/gateway/extproc/operations"
	"github.com/modelgateway/gateway/extproc/tokens"
	"github.com/modelgateway/gateway/extproc/wire"
	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/alerts"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/console"
	"github.com/modelgateway/gateway/internal/control"
	"github.com/modelgateway/gateway/internal/endpoints"
	"github.com/modelgateway/gateway/internal/holds"
	"github.com/modelgateway/gateway/internal/leases"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/mtls"
	"github.com/modelgateway/gateway/internal/outbox"
	"github.com/modelgateway/gateway/internal/pricing"
	"github.com/modelgateway/gateway/internal/reconcile"
	"github.com/modelgateway/gateway/internal/roles"
	"github.com/modelgateway/gateway/internal/spool"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/tracing"
	"github.com/modelgateway/gateway/internal/usage"
	"github.com/modelgateway/gateway/internal/version"
)

// sidecar is the running set of servers of `gateway serve`.
type sidecar struct {
	log     *slog.Logger
	grpc    *grpc.Server
	keyLog  *extproc.KeyLog // Envoy's upstream logs, on grpc
	health  *health.Server
	control *http.Server
	admin   *grpc.Server // nil when no admin token is configured
	console *http.Server // the operator console; nil when not served
	serving atomic.Bool
	storeUp atomic.Bool
	// stopWatch ends the route watcher and the store probe.
	stopWatch context.CancelFunc
	// spool keeps settlements the store cannot take and replays them.
	spool *spool.Spool
	// stopHolds ends the hold renewer and sweeper.
	stopHolds context.CancelFunc
	// proc is the ext_proc processor; its settlements are flushed on shutdown.
	proc *extproc.Server
	// leases admits from escrow leases; nil when limits.leases is off.
	leases *leases.Manager
	// outbox keeps queued settlements and the leases' records until Redis
	// has them; nil without a spool directory.
	outbox *outbox.Outbox
	// webhooks delivers alert events; closed last.
	webhooks *alerts.Dispatcher
	watcher  *alerts.Watcher
	// traces exports the processor's spans; flushed last on shutdown.
	traces *tracing.Provider
	// reconciler reads the vendors' usage reports for the continuous run,
	// the admin API and the operator console; nil when no upstream has an
	// admin key.
	reconciler *reconcile.Runner

	// healthOnly serves s.health alone on listeners.health; nil when not
	// served.
	healthOnly *grpc.Server

	ExtProcAddr net.Addr
	HealthAddr  net.Addr // nil when listeners.health is not served
	ControlAddr net.Addr
	AdminAddr   net.Addr       // nil when the admin API is not served
	ConsoleAddr net.Addr       // nil when the operator console is not served
	Admin       *admin.Service // the admin API in process, served or not
	Store       *store.Store
	// Prices are the upstreams' price tables, replaced in place by
	// ReloadPrices.
	Prices pricing.Book
}

// ReloadPrices reads gateway.yaml and the catalogue it names again and makes
// their prices current for every upstream at once. Requests already admitted
// keep the prices they were admitted with. A file that does not load, or
// that adds or removes an upstream (which needs a restart), changes nothing.
func (s *sidecar) ReloadPrices(cfgPath string) error {
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	book, err := pricing.NewBook(cfg, operations.All.Modes())
	if err != nil {
		return err
	}
	if len(book) != len(s.Prices) {
		return fmt.Errorf("%s: upstreams changed; restart to add or remove one", cfgPath)
	}
	for name := range s.Prices {
		if book[name] == nil {
			return fmt.Errorf("%s: upstream %s is gone; restart to add or remove one", cfgPath, name)
		}
	}
	n := 0
	for name, t := range s.Prices {
		t.Replace(book[name])
		n += len(book[name].Models())
	}
	s.log.Info("prices reloaded", "config", cfgPath, "catalogue", cfg.Catalogue, "models", n)
	return nil
}

// sidecarOptions carry what differs between `serve` and `run`.
type sidecarOptions struct {
	Config *config.Config
	Redis  redis.UniversalClient
	Logger *slog.Logger
	// RequestLogger and FlushRequestLog: extproc.Options'; nil for Logger
	// and no flush.
	RequestLogger   *slog.Logger
	FlushRequestLog func()
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
	// Only Envoy may reach the processor: beyond loopback, only with mutual
	// TLS.
	if err := c.Listeners.CheckSidecarBinds(); err != nil {
		return nil, err
	}
	var tlsSrc *mtls.Server
	if t := c.Listeners.TLS; t.Enabled() {
		var err error
		if tlsSrc, err = mtls.NewServer(mtls.Files{Cert: t.ServerCert, Key: t.ServerKey, ClientCA: t.CA}); err != nil {
			return nil, err
		}
	}
	st := store.New(o.Redis, store.Options{HoldTTL: c.Limits.HoldLease.D(), LedgerRetention: c.Store.LedgerRetention.D(),
		AuditRetention: c.Store.AuditRetention.D()})
	keys := auth.NewCache(st, o.KeyCacheTTL)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := extproc.NewMetrics(reg, c.UpstreamNames()...)
	reg.MustRegister(buildInfo())
	storeUp := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gateway_store_up", Help: "1 while the store answers the sidecar's pings (every second, 800ms timeout), else 0.",
	})
	reg.MustRegister(storeUp)

	prices, err := pricing.NewBook(c, operations.All.Modes())
	if err != nil {
		return nil, err
	}
	for _, u := range c.Upstreams {
		var models []string
		for _, m := range prices[u.Name].Models() {
			models = append(models, string(m.Name))
		}
		metrics.InitModels(u.Name, models)
	}
	var vendorRoutes []*extproc.Upstream
	for _, u := range c.Upstreams {
		r, err := extproc.NewUpstream(u, prices[u.Name], operations.All)
		if err != nil {
			return nil, err
		}
		r.MaxDuration = c.Limits.MaxRequestDuration.D()
		// A reduced contract cannot let the processor set Envoy's headers
		// (no allow_envoy): the route's own per-try timeout applies.
		r.NoPerTryHeader = c.Envoy.Reduced()
		vendorRoutes = append(vendorRoutes, r)
	}
	sp, err := spool.Open(c.Store.SpoolDir, st, spool.Options{
		Registerer: reg, Logger: o.Logger, OnStoreError: func() { metrics.StoreError("settle") },
	})
	if err != nil {
		return nil, err
	}
	eps, err := webhookEndpoints(c.Alerts.Webhooks, os.Getenv)
	if err != nil {
		return nil, err
	}
	webhooks := alerts.NewDispatcher(eps, alerts.DispatcherOptions{QueueSize: c.Alerts.QueueSize, Registerer: reg, Logger: o.Logger})
	host, _ := os.Hostname()
	watcher := alerts.NewWatcher(st, webhooks, alerts.WatcherOptions{
		Registerer: reg, Logger: o.Logger, StoreUnreachableAfter: c.Alerts.StoreUnreachableAfter.D(), Sidecar: host,
	})
	renewer := holds.NewRenewer(st, o.Logger)
	sweeper := holds.NewSweeper(st, o.Logger)
	renewer.OnStoreError = sweeper.StoreFailed
	sweeper.OnSweep = func(_ string, r ledger.SweepResult) {
		for _, ok := range r.Applied {
			if ok {
				metrics.ObserveInterrupted()
			}
		}
	}
	traces, err := tracing.New(c.Tracing, "gateway-sidecar")
	if err != nil {
		return nil, err
	}
	var tracer trace.Tracer
	if c.Tracing.Enabled() {
		tracer = traces.Tracer("github.com/modelgateway/gateway/extproc")
	}
	// Admission: from escrow leases in memory when limits.leases is on,
	// through the store's script otherwise (and for what no lease covers).
	var adm extproc.Admitter = st
	var leased *leases.Manager
	// The outbox keeps what only this process knows of its requests (the
	// leases' records, queued settlements) until Redis has it; what a
	// previous run left is sent once the sidecar is built (sendLeftovers).
	box, left, err := openOutbox(c.Store.SpoolDir, o.Logger)
	if err != nil {
		return nil, err
	}
	var settlementKeeper extproc.SettlementKeeper
	if box != nil {
		settlementKeeper = box
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_outbox_entries", Help: "Entries in the outbox: records of leased requests and queued settlements Redis does not have yet.",
		}, func() float64 { return float64(box.Kept()) }))
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "gateway_outbox_full_total", Help: "Entries the outbox had no room for: a leased request's record was then sent before the request was forwarded; a settlement went unkept.",
		}, func() float64 { return float64(box.Refused()) }))
	}
	if c.Limits.LeasesOn() {
		lo := leases.Options{
			Interval: c.Limits.LeaseRenewInterval(), Share: c.Limits.LeaseShare, MinHolds: c.Limits.LeaseMinHolds, Logger: o.Logger,
		}
		if box != nil {
			lo.Outbox = box
		}
		leased = leases.New(st, adm, lo)
		adm = leased
		for path, n := range map[string]*atomic.Int64{"lease": &leased.Local, "store": &leased.Fallback} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "gateway_admissions_total", Help: "Admissions asked for, by where they were decided: lease (in memory, from an escrow lease) or store (the admission script).",
				ConstLabels: prometheus.Labels{"path": path},
			}, func() float64 { return float64(n.Load()) }))
		}
	}
	abandoned := newAbandonedRecorder(st, o.Logger)
	proc := extproc.NewServer(extproc.Options{
		OnAbandoned:     abandoned.Record,
		Tracer:          tracer,
		Holds:           renewer,
		Owners:          st,
		InFlight:        st,
		Parking:         st,
		BackgroundPoll:  c.Limits.BackgroundPollInterval(),
		MaxRequestBytes: c.Limits.MaxRequestBytes,
		Upstreams:       vendorRoutes, Keys: keys, Admitter: adm, Settler: sp, Metrics: metrics, Logger: o.Logger,
		RequestLogger: o.RequestLogger, FlushRequestLog: o.FlushRequestLog, Outbox: settlementKeeper,
		OnRefusal: watcher.Refused,
		OnVendorKeyRefused: func(upstream, key string, status int) {
			var probe time.Duration
			if u, ok := c.Upstream(upstream); ok {
				probe = u.Pool.ProbeInterval.D()
			}
			go watcher.VendorKeyRefused(context.Background(), upstream, key, status, probe)
		},
		OnVendorKeyLimited: func(upstream, key string, status int, until time.Time) {
			var window time.Duration
			if u, ok := c.Upstream(upstream); ok {
				window = u.Pool.CorroborateWindow.D()
			}
			go watcher.VendorKeyLimited(context.Background(), upstream, key, status, until, window)
		},
		OnModelMismatch: func(upstream, accountID, keyID string, requested, priced usage.PricedModel) {
			go watcher.ModelMismatch(context.Background(), upstream, accountID, keyID, requested, priced)
		},

		ConcurrencyWaitBound:    c.ConcurrencyWaitBound(),
		ConcurrencyWaiters:      c.Limits.ConcurrencyWaiters,
		ConcurrencyWaitersShare: c.Limits.ConcurrencyWaitersShare,
	})

	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gateway_settlements_pending",
		Help: "Settlements of released replies not yet applied to the store or spooled.",
	}, func() float64 { return float64(proc.PendingSettlements()) }))

	adminURL := o.EnvoyAdminURL
	if adminURL == "" {
		adminURL = "http://" + c.Listeners.EnvoyAdmin
	}
	routes := endpoints.NewWatcher(adminURL, endpoints.Upstreams(c), reg, o.Logger)
	if !c.Envoy.Reduced() {
		routes.RequireEndpointMetadata()
	}
	for _, w := range c.Warnings() {
		o.Logger.Warn(w)
	}

	s := &sidecar{log: o.Logger, Store: st, spool: sp, Prices: prices, proc: proc, webhooks: webhooks, watcher: watcher, traces: traces, leases: leased, outbox: box}
	var holdsCtx context.Context
	holdsCtx, s.stopHolds = context.WithCancel(context.Background())
	go renewer.Run(holdsCtx)
	if len(left) > 0 {
		sendLeftovers(holdsCtx, box, left, st, sp, o.Logger)
	}
	if leased != nil {
		go leased.Run(holdsCtx)
	}
	// Sweep often enough that a dead sidecar's requests settle within about
	// one lease and a quarter.
	go sweeper.Run(holdsCtx, min(max(c.Limits.HoldLease.D()/4, 50*time.Millisecond), 5*time.Second))
	// Background responses nobody reads are settled by polling the vendor
	// through Envoy's relay listener.
	go proc.NewReconciler(c.Listeners.Relay).Run(holdsCtx, max(c.Limits.BackgroundPollInterval()/4, 50*time.Millisecond))
	// The vendors' usage reports against the ledger, a window at a time.
	s.reconciler = newReconciler(c, st, prices)
	startContinuous(holdsCtx, c, s.reconciler, st, reg, watcher, o.Logger)
	s.health = health.NewServer()
	s.health.SetServingStatus(envoy.StoreHealthService, healthpb.HealthCheckResponse_NOT_SERVING)
	s.health.SetServingStatus(envoy.ReadyHealthService, healthpb.HealthCheckResponse_NOT_SERVING)
	probe := control.NewStoreProbe(st.Ping, control.ProbeOptions{OnResult: func(up bool) {
		storeUp.Set(b2f(up))
		s.storeUp.Store(up)
		watcher.StoreResult(up)
		s.updateHealth()
	}})
	var watchCtx context.Context
	watchCtx, s.stopWatch = context.WithCancel(context.Background())
	go routes.Run(watchCtx, time.Second)
	go probe.Run(watchCtx, time.Second)
	go watcher.Run(watchCtx, c.Alerts.Interval.D())
	// Request bodies up to the configured limit arrive in one message.
	maxMsg := int(c.Limits.MaxRequestBytes) + 1<<20
	codec := wire.NewCodec()
	// Who decoded each of Envoy's messages, and who encoded each reply:
	// the codec's own code (hand) or protobuf, for what it does not know.
	for _, c := range []struct {
		name, label, help string
		counts            func() (hand, pb uint64)
	}{
		{"gateway_extproc_messages_decoded_total", "decoder", "Envoy's ext_proc messages, by who decoded them: the sidecar's own decoder (hand) or protobuf, for a message holding a field the former does not read.", codec.Decoded},
		{"gateway_extproc_replies_encoded_total", "encoder", "The sidecar's ext_proc replies to Envoy, by who encoded them: the sidecar's own encoder (hand) or protobuf, for an immediate response or a reply holding a field the former does not write.", codec.Encoded},
	} {
		for _, by := range []string{"hand", "protobuf"} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: c.name, ConstLabels: prometheus.Labels{c.label: by}, Help: c.help,
			}, func() float64 {
				hand, pb := c.counts()
				if by == "hand" {
					return float64(hand)
				}
				return float64(pb)
			}))
		}
	}
	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsg),
		grpc.MaxSendMsgSize(maxMsg),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Reuse goroutines (and their grown stacks) across ext_proc streams:
		// one stream per HTTP request makes a fresh goroutine per request
		// otherwise.
		grpc.NumStreamWorkers(uint32(4*runtime.GOMAXPROCS(0))),
		// Envoy's messages decoded without reflection (extproc/wire).
		grpc.ForceServerCodecV2(codec),
	)
	extprocv3.RegisterExternalProcessorServer(s.grpc, proc)
	// Envoy's upstream log of pooled vendor keys' failed attempts.
	s.keyLog = proc.NewKeyLog()
	accesslogv3.RegisterAccessLogServiceServer(s.grpc, s.keyLog)
	healthpb.RegisterHealthServer(s.grpc, s.health)

	ctl := control.New(control.Options{
		Region:     c.Region,
		Upstreams:  c.UpstreamNames(),
		Store:      st,
		Keys:       keys,
		Settled:    proc,
		Serving:    s.serving.Load,
		Endpoints:  routes,
		VendorKeys: proc.VendorKeys,
		// Under the reduced contract the sidecar may run in a pod of its
		// own, with no Envoy admin to read: replies name their endpoint.
		EndpointsLearned: c.Envoy.Reduced(),
		Probe:            probe,
		Metrics:          promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		Logger:           o.Logger,
	})
	// The console's data API (/v1/usage/...) and customer page (/console/)
	// share the control server; everything else is the control handler's.
	mux := http.NewServeMux()
	mux.Handle("/", ctl)
	// Exact, or the mux would redirect /v1/usage to the console's /v1/usage/.
	mux.Handle("/v1/usage", ctl)
	// The Responses API's WebSocket transport, which Envoy routes here.
	mux.Handle(extproc.SocketPrefix, proc.SocketHandler(extproc.SocketOptions{
		Relay: c.Listeners.Relay, Idle: c.Limits.SocketIdle.D(), PerKey: c.Limits.SocketsPerKey,
		PingsPerSecond: c.Limits.SocketPingsPerSecond, Disabled: c.WebSocketDisabled()}))
	sso, err := newSSO(c.SSO, c.SSO.CustomerRedirectURL, roles.Customer, c.SSO.AccountClaim)
	if err != nil {
		return nil, err
	}
	console.Mount(mux, console.APIOptions{Store: st, Keys: keys, Settled: proc, Logger: o.Logger, SSO: sso != nil})
	s.control = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	gl, err := net.Listen("tcp", c.Listeners.ExtProc)
	if err != nil {
		return nil, fmt.Errorf("extproc listener: %w", err)
	}
	hl, err := net.Listen("tcp", c.Listeners.Control)
	if err != nil {
		gl.Close()
		return nil, fmt.Errorf("control listener: %w", err)
	}
	if tlsSrc != nil {
		// Every connection, loopback or not, must then present Envoy's
		// client certificate.
		gl, hl = tls.NewListener(gl, tlsSrc.TLSConfig()), tls.NewListener(hl, tlsSrc.TLSConfig())
	}
	s.ExtProcAddr, s.ControlAddr = gl.Addr(), hl.Addr()
	if err := s.startAdmin(c, st); err != nil {
		gl.Close()
		hl.Close()
		return nil, err
	}
	if sso != nil {
		// Single sign-on to the customer console: its sessions read the
		// data API within their roles and change keys through the admin
		// service.
		cust := console.NewCustomer(console.CustomerOptions{SSO: sso, Admin: s.Admin, Store: st, SessionOptions: console.SessionOptions{Sessions: st}, Logger: o.Logger})
		cust.Mount(mux)
		s.control.Handler = cust.Wrap(mux)
	}
	if err := s.startConsole(c); err != nil {
		gl.Close()
		hl.Close()
		s.stopAdmin(context.Background())
		return nil, err
	}
	if err := s.startHealth(c); err != nil {
		gl.Close()
		hl.Close()
		s.stopAdmin(context.Background())
		s.stopConsole(context.Background())
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
	s.updateHealth()
	o.Logger.Info("sidecar serving", "extproc", s.ExtProcAddr.String(), "control", s.ControlAddr.String())
	return s, nil
}

// startHealth serves the gRPC health services alone, in plaintext, on
// listeners.health when it is set: the kubelet's grpc probe presents no
// client certificate and cannot reach a loopback listener.
func (s *sidecar) startHealth(c *config.Config) error {
	if c.Listeners.Health == "" {
		return nil
	}
	l, err := net.Listen("tcp", c.Listeners.Health)
	if err != nil {
		return fmt.Errorf("health listener: %w", err)
	}
	s.healthOnly, s.HealthAddr = grpc.NewServer(), l.Addr()
	healthpb.RegisterHealthServer(s.healthOnly, s.health)
	go func() {
		if err := s.healthOnly.Serve(l); err != nil {
			s.log.Error("health server stopped", "err", err)
		}
	}()
	return nil
}

// updateHealth sets the store and readiness services from the last probe.
func (s *sidecar) updateHealth() {
	st := func(ok bool) healthpb.HealthCheckResponse_ServingStatus {
		if ok {
			return healthpb.HealthCheckResponse_SERVING
		}
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	// After Shutdown the health server ignores updates and stays
	// NOT_SERVING.
	s.health.SetServingStatus(envoy.StoreHealthService, st(s.storeUp.Load()))
	s.health.SetServingStatus(envoy.ReadyHealthService, st(s.storeUp.Load() && s.serving.Load()))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// buildInfo is the constant gateway_build_info series: which build runs.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_build_info", Help: "Always 1; the labels say which build of the sidecar runs.",
	}, []string{"version", "revision", "goversion"})
	g.WithLabelValues(version.Release, version.Revision(), runtime.Version()).Set(1)
	return g
}

// Shutdown stops accepting new requests, lets in-flight streams finish
// within the context's deadline, then cuts the rest. Every request, finished
// or cut, is settled (or spooled) before the spool and the store close: a
// stream cut at the deadline is charged for what was delivered.
//
// It reports whether every stream ended before ctx did.
func (s *sidecar) Shutdown(ctx context.Context) (drained bool) {
	s.serving.Store(false)
	s.health.Shutdown() // probes now say NOT_SERVING
	// Envoy's upstream log streams never end of themselves: they are
	// closed once every request has ended and Envoy has sent their last
	// attempts' entries (it holds them up to envoy.AccessLogFlush), so
	// that the graceful stop ends with the requests, not at the deadline.
	go func() {
		if s.proc.Wait(ctx) {
			select {
			case <-time.After(5 * envoy.AccessLogFlush):
			case <-ctx.Done():
			}
		}
		s.keyLog.Close()
	}()
	drained = stopGRPC(ctx, s.grpc)
	if !drained {
		s.log.Warn("shutdown deadline passed; cut the remaining streams")
	}
	// Cut streams settle in their handlers after Stop returns; each
	// exchange's settlement is queued when it ends. Wait for every exchange,
	// then apply (or spool) what is queued, then close the spool: the store
	// and the spool close only after every request is settled or spooled.
	// Each wait is bounded on its own: the drain deadline may be spent.
	wctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	if !s.proc.Wait(wctx) {
		s.log.Error("shutdown: some requests did not end in time")
	}
	if err := s.proc.Flush(wctx); err != nil {
		s.log.Error("shutdown: settlements still queued", "pending", s.proc.PendingSettlements())
	}
	cancel()
	if s.leases != nil {
		// Every request has ended: record what is queued, return the rest.
		lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.leases.Close(lctx)
		cancel()
	}
	if s.outbox != nil {
		// What is still kept (a record or settlement Redis did not take)
		// stays in the file, for the next run to send.
		s.outbox.Close()
	}
	// Every stream has settled or been spooled: nothing is left to renew.
	// Holds of requests whose settlement waits in the spool are swept by
	// any sidecar after a lease unless the spool replays first (settlement
	// is idempotent).
	s.stopHolds()
	lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	s.spool.Close(lctx)
	cancel()
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	s.control.Shutdown(cctx)
	s.stopAdmin(cctx)
	s.stopConsole(cctx)
	if s.healthOnly != nil {
		s.healthOnly.Stop() // health calls are unary and short
	}
	cancel()
	s.stopWatch()
	s.webhooks.Close()
	tctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	s.traces.Shutdown(tctx)
	cancel()
	return drained
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

// webhookEndpoints are the configured webhook receivers with their signing
// secrets read from the environment.
func webhookEndpoints(ws []config.Webhook, getenv func(string) string) ([]alerts.Endpoint, error) {
	eps := make([]alerts.Endpoint, len(ws))
	for i, w := range ws {
		secret := getenv(w.SecretEnv)
		if secret == "" {
			return nil, fmt.Errorf("alerts.webhooks[%d]: the signing secret %s is not set", i, w.SecretEnv)
		}
		key, err := alerts.ParseSecret(secret)
		if err != nil {
			return nil, fmt.Errorf("alerts.webhooks[%d]: %s: %w", i, w.SecretEnv, err)
		}
		eps[i] = alerts.Endpoint{URL: w.URL, Secret: key, Events: w.Events}
	}
	return eps, nil
}

// openOutbox opens the outbox in the spool directory, with the entries a
// previous run left; none without a spool directory or where files cannot
// be mapped (a warning says what a crash then loses).
func openOutbox(dir string, log *slog.Logger) (*outbox.Outbox, []outbox.Entry, error) {
	const loses = "a sidecar killed without warning loses the settlements it had queued (their requests are swept at their last checkpoint) and, with leases, the requests it admitted from them in its last 20 ms or so (served, in no ledger)"
	if dir == "" {
		log.Warn("store.spool_dir is not set: " + loses)
		return nil, nil, nil
	}
	box, left, damaged, err := outbox.Open(filepath.Join(dir, "outbox"), outbox.DefaultSlots)
	if errors.Is(err, outbox.ErrUnsupported) {
		log.Warn(err.Error() + ": " + loses)
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if damaged > 0 {
		log.Warn("outbox: dropped entries cut short by a crash; their requests were never forwarded", "entries", damaged)
	}
	return box, left, nil
}

// sendLeftovers sends what a previous run left in the outbox: its
// settlements through the spool (applied, or kept there until Redis takes
// them), then its records of leased requests to Redis, in the background,
// retried until Redis takes them or ctx ends. Each entry is dropped once
// sent; one that cannot be read is dropped at once. A settlement or record
// that reaches Redis twice counts once (settlement is idempotent, and a
// record of a settled request does nothing).
func sendLeftovers(ctx context.Context, box *outbox.Outbox, left []outbox.Entry, st leases.Store, sp *spool.Spool, log *slog.Logger) {
	var sts []account.Settlement
	var stSlots []int32
	var recs []account.LeasedRequest
	var recSlots []int32
	for _, e := range left {
		kind, rec, settlement, err := outbox.Decode(e)
		switch {
		case err != nil:
			log.Error("outbox: an entry left by a previous run cannot be read; dropped", "err", err)
			box.Drop(e.Slot)
		case kind == outbox.KindSettlement:
			sts, stSlots = append(sts, settlement), append(stSlots, e.Slot)
		default:
			recs, recSlots = append(recs, rec), append(recSlots, e.Slot)
		}
	}
	log.Info("outbox: sending what a previous run left", "settlements", len(sts), "records", len(recs))
	if len(sts) > 0 {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		for i, r := range sp.SettleBatch(sctx, sts) {
			if r.Err != nil && !r.Spooled {
				log.Error("outbox: a settlement left by a previous run failed", "request_id", sts[i].RequestID, "account", sts[i].AccountID, "err", r.Err)
			}
			box.Drop(stSlots[i])
		}
		cancel()
	}
	if len(recs) == 0 {
		return
	}
	go func() {
		for warned := false; ; warned = true {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := st.RecordLeased(rctx, recs)
			cancel()
			if err == nil {
				for _, s := range recSlots {
					box.Drop(s)
				}
				if warned {
					log.Info("outbox: sent the records a previous run left", "records", len(recs))
				}
				return
			}
			if !warned {
				log.Warn("outbox: sending the records a previous run left failed; retrying every second", "records", len(recs), "err", err)
			}
			select {
			case <-ctx.Done():
				return // still kept, for the next run
			case <-time.After(time.Second):
			}
		}
	}()
}
