// Package envoy renders the Envoy bootstrap from the gateway's config, so that
// the data plane and the sidecar always agree on listeners, upstreams and
// endpoints. envoy.yaml beside this file is the rendering for the
// docker-compose topology; a test keeps it in step with the generator.
package envoy

import (
	"bytes"
	_ "embed"
	"fmt"
	"path"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/keypool"
	"github.com/modelgateway/gateway/internal/vendorusage"
)

//go:embed bootstrap.yaml.tmpl
var bootstrapTemplate string

// AccessLogFlush is how long Envoy holds the upstream logs' entries (the
// abandoned attempts, the pooled keys' refusals) before it sends them to
// the sidecar: a stopping sidecar keeps its log streams open this long
// (and more) after its last request ends.
const AccessLogFlush = 50 * time.Millisecond

var tmpl = template.Must(template.New("bootstrap").Funcs(template.FuncMap{
	"accessLogFlush": func() string { return seconds(AccessLogFlush) },
	"pair": func(u *upstreamView, members []string) aggregateView {
		return aggregateView{U: clusterView{Up: u, Root: u.root}, Members: members}
	},
}).Parse(bootstrapTemplate))

// aggregateView is one aggregate cluster of a pool: its upstream and its
// member clusters in order.
type aggregateView struct {
	U       clusterView
	Members []string
}

// HeadroomLua is the listener's Lua filter of a pooled configuration
// (headroomLua), indented for its block scalar.
func (v view) HeadroomLua() string { return indent(18, headroomLua()) }

// HeadroomNamespace is the dynamic metadata namespace the ext_proc filter
// forwards (keypool.HeadroomNamespace).
func (v view) HeadroomNamespace() string { return keypool.HeadroomNamespace }

// BlameLua is the aggregate's upstream filter (blameLua), indented for its
// block scalar: one request tries at most the pool's max_keys of the keys
// its aggregate holds.
func (a aggregateView) BlameLua() string {
	keys := len(a.Members)
	if n := len(a.U.Up.Endpoints); n > 0 {
		keys /= n
	}
	return indent(16, blameLua(min(keys, a.U.Up.MaxKeys)))
}

// DefaultTrustedCA is the system CA bundle on Debian-based images, including
// Envoy's official image.
const DefaultTrustedCA = "/etc/ssl/certs/ca-certificates.crt"

// Options say where Envoy finds the sidecar, which may differ from where the
// sidecar binds (a service name in docker-compose, localhost in a pod).
type Options struct {
	// ExtProcAddr and ControlAddr are host:port as Envoy reaches them; empty
	// means the config's listener addresses.
	ExtProcAddr string
	ControlAddr string
	// PublicAddr, ProbesAddr and AdminAddr override Envoy's own listeners;
	// a container binds the public and probes listeners to 0.0.0.0. The
	// admin address must be loopback.
	PublicAddr string
	ProbesAddr string
	AdminAddr  string
	// Bare renders the same listener and routes without the ext_proc filter:
	// the reference the benchmarks compare against.
	Bare bool
	// NodeID names this Envoy in its admin output.
	NodeID string
}

// The sidecar's named gRPC health services (grpc.health.v1, on the ext_proc
// listener and listeners.health). The empty name and the ext_proc service
// say the process serves (liveness); StoreHealthService follows the
// store's pings; ReadyHealthService is both, and is what Envoy's active
// check of the ext_proc cluster and the kubelet's readiness ask.
const (
	StoreHealthService = "gateway.store"
	ReadyHealthService = "gateway.ready"
)

// ExtProcHealthCheck is Envoy's active gRPC health check of the ext_proc
// cluster, in every rendering: a sidecar draining or cut off from its
// store gets no new streams while another serves. With every sidecar
// unhealthy Envoy still sends to all (panic routing), and each fails
// closed on its own. The sidecar pings its store every second.
var ExtProcHealthCheck = struct {
	Service            string
	Interval, Timeout  time.Duration
	Unhealthy, Healthy int
}{ReadyHealthService, 2 * time.Second, time.Second, 2, 1}

type view struct {
	NodeID                   string
	AdminHost                string
	AdminPort                int
	PublicHost               string
	PublicPort               int
	ProbesHost               string
	ProbesPort               int
	RelayHost                string
	RelayPort                int
	ExtProcHost, ControlHost string
	ExtProcPort, ControlPort int
	MaxRequestBytes          int64
	ReadBufferBytes          int64 // the public listener's per connection (config.ReadBufferBytes)
	StreamIdleTimeout        string
	MaxStreamDuration        string
	MessageTimeout           string
	MaxMessageTimeout        string
	CircuitBreakers          config.CircuitBreakers
	AccessLog                string
	Bare                     bool
	Reduced                  bool // envoy.contract reduced
	Upstreams                []upstreamView
	Credentials              []credentialView
	Pooled                   bool  // some upstream has a pool of keys (never Bare)
	PoolStatuses             []int // the statuses that end a key's attempt and are logged (PoolStatuses)
	AnyPool                  bool  // some upstream has a pool of keys, Bare or not

	RequestHeadersTimeout string
	MaxConnectionDuration string
	MaxRequestHeadersKB   int
	MaxHeadersCount       int
	MaxConnections        int
	ForwardClientAddress  bool
	SidecarTLS            *config.SidecarTLS // nil: the sidecar is on loopback
	ExtProcHealth         healthView
	Tracing               *tracingView // nil: no tracing
}

// healthView is ExtProcHealthCheck as the template writes it.
type healthView struct {
	Service, Interval, Timeout string
	Unhealthy, Healthy         int
}

// tracingView is the OpenTelemetry tracer: where the collector is and how
// much is sampled.
type tracingView struct {
	Host     string
	Port     int
	HTTP     bool    // OTLP/HTTP instead of gRPC
	Sampling float64 // percent
}

// credentialView is one vendor key as Envoy injects it: a generic secret
// read from Envoy's environment, a file or file-based SDS, set as header
// (with a prefix). Key is its name, the only part the sidecar sees.
type credentialView struct {
	Key                string
	Secret, Env        string
	File, SDS          string
	Header, Prefix     string
	ClusterHeaderValue string // pooled: the aggregate preferring this key
	PreferredMembers   []string
}

// clusterView is one vendor cluster as rendered: an unpooled upstream's
// cluster (its endpoints by priority, the credential injected), or a pool's
// member (one key at one endpoint, no credential of its own).
type clusterView struct {
	Name       string
	Up         *upstreamView
	Root       *view
	Endpoints  []endpointView
	Credential *credentialView
	Key        string
	AnyTLS     bool
}

// memberView is one cluster of a pool: one key at one endpoint. It injects
// no credential itself (Envoy applies the upstream filters of the route's
// cluster, the aggregate, which picks the credential by the host's key).
type memberView struct {
	Name     string
	Key      string
	Endpoint endpointView
}

type upstreamView struct {
	Name               string
	Cluster            string // upstreams[].envoy_cluster
	Format             string
	LocalErrors        []localError
	Retries            int
	RetryOn            string
	FirstByteTimeout   string
	PerTryIdleTimeout  string // empty: none
	RetryBudgetPercent float64
	RetryAfter         int // seconds, on Envoy's own 503s
	ConsecutiveErrors  int
	BaseEjectionTime   string
	HealthPath         string
	HealthInterval     string
	HealthTimeout      string
	UnhealthyThreshold int
	HealthyThreshold   int
	AnyTLS             bool
	Endpoints          []endpointView
	Credential         *credentialView // nil: forwarded without a vendor key
	Key                string          // the one key's name, unpooled
	RetriableStatuses  string

	// A pool of keys: a cluster per key and endpoint (Members), and per key
	// an aggregate of them all that tries that key first (Keys[].
	// ClusterHeaderValue), which the sidecar names in KeyClusterHeader.
	Pooled        bool
	Keys          []credentialView
	Members       []memberView
	SharedMembers []string // the aggregate named after the upstream's cluster
	// PoolRetryConcurrency is each aggregate's min_retry_concurrency: 10
	// per key.
	PoolRetryConcurrency int
	// MaxKeys bounds the keys one request tries (pool.max_keys).
	MaxKeys int

	// AdminCluster, when the upstream has an admin key, is the cluster of
	// the relay's usage-report routes (the primary endpoint, the admin key
	// injected); AdminPaths are the vendor's path prefixes of its reports.
	AdminCluster string
	AdminPaths   []string
	admin        *credentialView

	Clusters []clusterView // filled by Render once the view is complete
	root     *view
}

// AdminCluster names the cluster that adds an upstream's admin key.
func AdminCluster(cluster string) string { return cluster + "--admin" }

// UsageReportPrefixes are the path prefixes of a vendor's usage and cost
// reports, which the relay routes with the admin key: Anthropic's Usage and
// Cost Admin API, OpenAI's organization Usage and Costs APIs (the folder of
// the reports vendorusage reads, and the cost report). Nothing else of the
// admin APIs is routed.
func UsageReportPrefixes(format string) []string {
	if format == config.FormatMessages {
		return []string{path.Dir(vendorusage.AnthropicPath) + "/", vendorusage.AnthropicCostsPath}
	}
	return []string{path.Dir(vendorusage.OpenAIPath) + "/", vendorusage.OpenAICostsPath}
}

// KeyCluster and MemberCluster name a pool's clusters (config's naming,
// which the processor uses too).
var (
	KeyCluster    = config.KeyCluster
	MemberCluster = config.MemberCluster
)

type endpointView struct {
	Priority  int
	Endpoint  string // "primary" or "reserve"
	Host      string
	Port      int
	TLS       bool
	TrustedCA string
}

// Render returns the Envoy bootstrap for c.
func Render(c *config.Config, o Options) ([]byte, error) {
	v := view{
		NodeID:            o.NodeID,
		MaxRequestBytes:   c.Limits.MaxRequestBytes,
		ReadBufferBytes:   min(config.ReadBufferBytes, c.Limits.MaxRequestBytes),
		StreamIdleTimeout: seconds(c.Envoy.StreamIdleTimeout.D()),
		MaxStreamDuration: seconds(c.Envoy.MaxStreamDuration.D()),
		MessageTimeout:    seconds(config.ExtProcMessageTimeout),
		MaxMessageTimeout: seconds(config.MaxConcurrencyWait + config.ExtProcMessageTimeout),
		CircuitBreakers:   c.Envoy.CircuitBreakers,
		AccessLog:         accessLogPath(c.Envoy.AccessLog),
		Bare:              o.Bare,
		Reduced:           c.Envoy.Reduced(),

		RequestHeadersTimeout: seconds(c.Envoy.RequestHeadersTimeout.D()),
		MaxConnectionDuration: seconds(c.Envoy.MaxConnectionDuration.D()),
		MaxRequestHeadersKB:   c.Envoy.MaxRequestHeadersKB,
		MaxHeadersCount:       c.Envoy.MaxHeadersCount,
		MaxConnections:        c.Envoy.MaxConnections,
		ForwardClientAddress:  c.Envoy.ForwardClientAddress,
		ExtProcHealth: healthView{
			Service:  ExtProcHealthCheck.Service,
			Interval: seconds(ExtProcHealthCheck.Interval), Timeout: seconds(ExtProcHealthCheck.Timeout),
			Unhealthy: ExtProcHealthCheck.Unhealthy, Healthy: ExtProcHealthCheck.Healthy,
		},
	}
	if t := c.Listeners.TLS; t.Enabled() {
		v.SidecarTLS = &t
	}
	if v.NodeID == "" {
		v.NodeID = "gateway-" + c.Region
	}
	var err error
	if v.AdminHost, v.AdminPort, err = config.SplitHostPort(orDefault(o.AdminAddr, c.Listeners.EnvoyAdmin)); err != nil {
		return nil, fmt.Errorf("envoy_admin: %w", err)
	}
	if !config.IsLoopback(v.AdminHost) {
		return nil, fmt.Errorf("envoy_admin: %s is not a loopback address; Envoy's admin interface must not be reachable from outside", v.AdminHost)
	}
	if v.ProbesHost, v.ProbesPort, err = config.SplitHostPort(orDefault(o.ProbesAddr, c.Listeners.Probes)); err != nil {
		return nil, fmt.Errorf("probes: %w", err)
	}
	if v.RelayHost, v.RelayPort, err = config.SplitHostPort(c.Listeners.Relay); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if !config.IsLoopback(v.RelayHost) {
		return nil, fmt.Errorf("relay: %s is not a loopback address; the relay adds the vendor credentials and must not be reachable from outside", v.RelayHost)
	}
	if v.PublicHost, v.PublicPort, err = config.SplitHostPort(orDefault(o.PublicAddr, c.Listeners.Public)); err != nil {
		return nil, fmt.Errorf("public: %w", err)
	}
	if v.ExtProcHost, v.ExtProcPort, err = config.SplitHostPort(orDefault(o.ExtProcAddr, c.Listeners.ExtProc)); err != nil {
		return nil, fmt.Errorf("extproc: %w", err)
	}
	if v.ControlHost, v.ControlPort, err = config.SplitHostPort(orDefault(o.ControlAddr, c.Listeners.Control)); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	v.ExtProcHost, v.ControlHost = reachable(v.ExtProcHost), reachable(v.ControlHost)
	if t := c.Tracing; t.Enabled() {
		tv := tracingView{HTTP: t.Protocol == config.TracingHTTP, Sampling: t.Sampling()}
		if tv.Host, tv.Port, err = config.SplitHostPort(t.Endpoint); err != nil {
			return nil, fmt.Errorf("tracing.endpoint: %w", err)
		}
		tv.Host = reachable(tv.Host)
		v.Tracing = &tv
	}
	for _, u := range c.Upstreams {
		uv := upstreamView{
			Name:               u.Name,
			Cluster:            orDefault(u.EnvoyCluster, u.Name),
			Format:             u.Format,
			LocalErrors:        localErrors(u.Format),
			Retries:            u.Failover.Retries,
			RetryOn:            retryOn(u.Failover.RetrySentRequests),
			FirstByteTimeout:   seconds(u.Failover.FirstByteTimeout.D()),
			RetryBudgetPercent: u.Failover.RetryBudgetPercent,
			RetryAfter:         retryAfter(u.HealthCheck),
			ConsecutiveErrors:  u.Failover.ConsecutiveErrors,
			BaseEjectionTime:   seconds(u.Failover.BaseEjectionTime.D()),
			HealthPath:         u.HealthCheck.Path,
			HealthInterval:     seconds(u.HealthCheck.Interval.D()),
			HealthTimeout:      seconds(u.HealthCheck.Timeout.D()),
			UnhealthyThreshold: u.HealthCheck.UnhealthyThreshold,
			HealthyThreshold:   u.HealthCheck.HealthyThreshold,
		}
		if d := u.Failover.PerTryIdleTimeout.D(); d > 0 {
			uv.PerTryIdleTimeout = seconds(d)
		}
		uv.RetriableStatuses = "[503, 529]"
		keys := u.Keys()
		for _, k := range keys {
			if !k.HasCredential() {
				continue
			}
			cv := credentialView{Key: k.Name, Secret: u.Name + "-vendor-key", Env: k.Env, File: k.File, SDS: k.SDS, Header: "x-api-key"}
			if len(u.VendorKeys) > 0 {
				cv.Secret = u.Name + "-vendor-key-" + k.Name
			}
			if u.Format == config.FormatChatCompletions {
				cv.Header, cv.Prefix = "authorization", "Bearer "
			}
			uv.Keys = append(uv.Keys, cv)
			if cv.SDS == "" {
				v.Credentials = append(v.Credentials, cv)
			}
		}
		if u.AdminCredentialEnv != "" {
			cv := credentialView{Key: "admin", Secret: u.Name + "-admin-key", Env: u.AdminCredentialEnv, Header: "x-api-key"}
			if u.Format == config.FormatChatCompletions {
				cv.Header, cv.Prefix = "authorization", "Bearer "
			}
			v.Credentials = append(v.Credentials, cv)
			uv.admin, uv.AdminCluster, uv.AdminPaths = &cv, AdminCluster(uv.Cluster), UsageReportPrefixes(u.Format)
		}
		for i, ep := range u.Endpoints() {
			t, err := ep.Parse()
			if err != nil {
				return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
			}
			ev := endpointView{Priority: i, Endpoint: EndpointName(i), Host: t.Host, Port: t.Port, TLS: t.TLS, TrustedCA: orDefault(ep.TrustedCA, DefaultTrustedCA)}
			uv.AnyTLS = uv.AnyTLS || t.TLS
			uv.Endpoints = append(uv.Endpoints, ev)
		}
		if !u.Pooled() {
			uv.Key = keys[0].Name
			if len(uv.Keys) > 0 {
				uv.Credential = &uv.Keys[0]
			}
		} else {
			// A key's 429, 529 or refusal (401, 402, 403) comes before any
			// byte of a reply: the vendor did not start; another key may
			// serve at once.
			uv.Pooled, uv.MaxKeys = true, u.Pool.MaxKeys
			uv.RetryOn += ",retriable-headers"
			v.AnyPool = true
			uv.PoolRetryConcurrency = 10 * len(uv.Keys)
			// Each aggregate tries its key first, then the others in the
			// configured order, at the primary; then each at the reserve. A
			// 429 moves a retry to the next key at the same endpoint; a
			// hung or dead endpoint, once its health checks fail in every
			// key's cluster, to the reserve.
			group := map[string]string{} // key → its accounts, the keys it may fall back to
			for _, k := range keys {
				group[k.Name] = strings.Join(k.Accounts, ",")
			}
			for i := range uv.Keys {
				k := &uv.Keys[i]
				k.ClusterHeaderValue = KeyCluster(uv.Cluster, k.Key)
				order := []string{k.Key}
				for _, o := range uv.Keys {
					if o.Key != k.Key && group[o.Key] == group[k.Key] {
						order = append(order, o.Key)
					}
				}
				for _, ev := range uv.Endpoints {
					for _, name := range order {
						k.PreferredMembers = append(k.PreferredMembers, MemberCluster(uv.Cluster, name, ev.Endpoint))
					}
				}
				if uv.SharedMembers == nil && group[k.Key] == "" {
					uv.SharedMembers = k.PreferredMembers
				}
			}
			for _, k := range uv.Keys {
				for _, ev := range uv.Endpoints {
					ev.Priority = 0
					uv.Members = append(uv.Members, memberView{Name: MemberCluster(uv.Cluster, k.Key, ev.Endpoint), Key: k.Key, Endpoint: ev})
				}
			}
		}
		if uv.Pooled && !o.Bare {
			v.Pooled, v.PoolStatuses = true, PoolStatuses
		}
		v.Upstreams = append(v.Upstreams, uv)
	}
	for i := range v.Upstreams {
		uv := &v.Upstreams[i]
		uv.root = &v
		if uv.admin != nil {
			// The usage reports are the vendor's, whichever endpoint serves
			// them: the primary's.
			uv.Clusters = append(uv.Clusters, clusterView{Name: uv.AdminCluster, Up: uv, Root: &v, Endpoints: uv.Endpoints[:1],
				Credential: uv.admin, Key: uv.admin.Key, AnyTLS: uv.Endpoints[0].TLS})
		}
		if !uv.Pooled {
			uv.Clusters = append(uv.Clusters, clusterView{Name: uv.Cluster, Up: uv, Root: &v, Endpoints: uv.Endpoints, Credential: uv.Credential, Key: uv.Key, AnyTLS: uv.AnyTLS})
			continue
		}
		for _, m := range uv.Members {
			uv.Clusters = append(uv.Clusters, clusterView{Name: m.Name, Up: uv, Root: &v, Endpoints: []endpointView{m.Endpoint}, Key: m.Key, AnyTLS: m.Endpoint.TLS})
		}
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, v); err != nil {
		return nil, fmt.Errorf("render envoy bootstrap: %w", err)
	}
	return buf.Bytes(), nil
}

// retryOn lists the conditions an attempt is retried on. By default those
// where no byte of a reply has reached Envoy: no connection, a refused
// stream, a reset (before or after the request was sent, a per-try timeout
// included: Envoy counts one as a reset), or an explicit 503/529 (and, for
// a pool, the key's 429 and quota errors). Envoy never retries once a
// reply's headers went downstream, so a started stream is never sent
// twice. With sent set, also any 5xx, which may duplicate generations.
func retryOn(sent bool) string {
	on := "connect-failure,refused-stream,reset,retriable-status-codes"
	if sent {
		on += ",5xx"
	}
	return on
}

// retryAfter is the retry-after of Envoy's own 503s for an upstream: about
// the time a recovered endpoint needs to pass its health checks again.
func retryAfter(h config.HealthCheck) int {
	s := int((h.Interval.D()*time.Duration(h.HealthyThreshold) + time.Second - 1) / time.Second)
	return max(1, s)
}

// EndpointName names an endpoint priority: 0 is the primary, 1 the reserve.
func EndpointName(priority int) string {
	if priority == 0 {
		return "primary"
	}
	return "reserve"
}

// reachable turns a wildcard bind address into one Envoy can connect to.
func reachable(host string) string {
	if host == "0.0.0.0" || host == "::" || host == "" {
		return "127.0.0.1"
	}
	return host
}

func accessLogPath(s string) string {
	if s == "stdout" {
		return "/dev/stdout"
	}
	return s
}

func seconds(d time.Duration) string { return fmt.Sprintf("%gs", d.Seconds()) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// A ComposeFile is a bootstrap checked in for docker-compose, rendered from
// gateway.yaml.
type ComposeFile struct {
	Path    string // relative to the repository root
	Options Options
	// Endpoints point both endpoints of the named upstreams at one URL.
	Endpoints map[string]string
	// Tracing, when set, is the OTLP/gRPC collector this bootstrap traces
	// to, whatever gateway.yaml says.
	Tracing string
}

// Compose lists the docker-compose bootstraps, which `gateway envoy-config
// --compose` (make envoy-config) writes. In that topology the sidecar shares
// Envoy's network namespace (as in a Kubernetes pod) and is reached on
// loopback; only the public listener binds all interfaces of the container.
// The demo profile has its own sidecar and one fake vendor serving both wire
// formats; the observability profile another, tracing to Jaeger.
var Compose = []ComposeFile{
	{Path: "envoy/envoy.yaml", Options: Options{PublicAddr: "0.0.0.0:8080", NodeID: "gateway-compose"}},
	{Path: "envoy/envoy-demo.yaml", Options: Options{PublicAddr: "0.0.0.0:8080", NodeID: "gateway-compose-demo"},
		Endpoints: map[string]string{"alpha": "http://fakevendor:9101", "beta": "http://fakevendor:9102"}},
	{Path: "envoy/envoy-observability.yaml", Options: Options{PublicAddr: "0.0.0.0:8080", NodeID: "gateway-compose-observability"},
		Endpoints: map[string]string{"alpha": "http://fakevendor:9101", "beta": "http://fakevendor:9102"},
		Tracing:   "jaeger:4317"},
}

// Render renders f from c, which it does not change.
func (f ComposeFile) Render(c *config.Config) ([]byte, error) {
	cc := *c
	cc.Upstreams = slices.Clone(c.Upstreams)
	if err := PointEndpoints(&cc, f.Endpoints); err != nil {
		return nil, err
	}
	if f.Tracing != "" {
		cc.Tracing = config.Tracing{Endpoint: f.Tracing, Protocol: config.TracingGRPC, SamplingPercent: c.Tracing.SamplingPercent}
	}
	return Render(&cc, f.Options)
}

// PointEndpoints points both endpoints of each named upstream at its URL
// and validates the result.
func PointEndpoints(c *config.Config, urls map[string]string) error {
	for name, url := range urls {
		u, ok := c.Upstream(name)
		if !ok || url == "" {
			return fmt.Errorf("endpoint %s=%s: want NAME=URL with NAME an upstream", name, url)
		}
		u.Primary.URL = url
		if u.HasReserve() {
			u.Reserve.URL = url
		}
	}
	return c.Validate()
}

// localError is how one of Envoy's own error statuses reads in a vendor's
// error format. Status 0 is the fallback for any other status.
type localError struct {
	Status  int
	Type    string
	Code    string // the chat-completions format only
	Message string
}

func localErrors(format string) []localError {
	const (
		timeout  = "the request timed out; retry with backoff"
		tooLarge = "request body is larger than this gateway accepts"
		headers  = "request headers are too large"
		busy     = "the service is temporarily unavailable; retry with backoff"
		// Envoy refuses a connection upgrade where no route allows one:
		// every path but the Responses API's, whose socket route goes to
		// the sidecar (docs/responses.md).
		upgrade   = "the WebSocket transport is not available on this path; use HTTP"
		otherwise = "%LOCAL_REPLY_BODY%"
	)
	if format == config.FormatMessages {
		return []localError{
			{403, "permission_error", "", upgrade},
			{408, "timeout_error", "", timeout},
			{413, "request_too_large", "", tooLarge},
			{431, "invalid_request_error", "", headers},
			{503, "overloaded_error", "", busy},
			{504, "timeout_error", "", timeout},
			{0, "api_error", "", otherwise},
		}
	}
	return []localError{
		{403, "invalid_request_error", "websocket_not_supported", upgrade},
		{408, "timeout", "timeout", timeout},
		{413, "invalid_request_error", "request_too_large", tooLarge},
		{431, "invalid_request_error", "headers_too_large", headers},
		{503, "server_error", "service_unavailable", busy},
		{504, "timeout", "timeout", timeout},
		{0, "server_error", "server_error", otherwise},
	}
}

// PoolStatuses end a pooled key's attempt before the vendor started: its
// limit (429), overload (529, 503) or refusal (401, 402, 403), the statuses
// the blame table judges. Envoy logs them to the sidecar, and retries on
// another key those the table blames on the key.
var PoolStatuses = keypool.Statuses()

// PoolLogHeaders are the reply headers Envoy's upstream log of a pool's
// refused attempts carries: the evidence keypool.Judge reads.
func (view) PoolLogHeaders() string {
	hs := []string{"retry-after", keypool.ErrorHeader}
	for _, h := range keypool.CapacityHeaders {
		hs = append(hs, h[0], h[1])
	}
	return "[" + strings.Join(hs, ", ") + "]"
}

// RetryHeader and ErrorHeader name the pool's upstream filter's headers in
// the template.
func (upstreamView) RetryHeader() string { return keypool.RetryHeader }
func (upstreamView) ErrorHeader() string { return keypool.ErrorHeader }
