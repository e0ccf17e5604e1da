package deploy

// Renderings for control planes that own the Envoy (issue #34): Envoy
// Gateway (deploy/envoy-gateway), Istio (deploy/istio) and the sidecar they
// both call (deploy/sidecar), and the Helm chart (deploy/helm/gateway) whose
// templates are the same renderings with chart values in place of the
// defaults. Each is written by `make deploy-render` (go run ./gen) and a test
// fails when a committed file drifts from what this file renders.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/template"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

// Directories of the control-plane renderings, relative to the repository
// root.
const (
	SidecarDir      = "deploy/sidecar"
	EnvoyGatewayDir = "deploy/envoy-gateway"
	IstioDir        = "deploy/istio"
	ChartDir        = "deploy/helm/gateway"
)

// Attachment modes of the chart (values.yaml: attach).
const (
	AttachOwn          = "own"           // the pod of deploy/k8s: Envoy and the sidecar together
	AttachEnvoyGateway = "envoy-gateway" // Envoy Gateway's Envoy calls the sidecar
	AttachIstio        = "istio"         // an Istio ingress gateway calls the sidecar
)

// Names of the objects of the control-plane renderings.
const (
	SidecarName      = "gateway-sidecar"          // StatefulSet, Service, PodDisruptionBudget
	SidecarConfigMap = "gateway-sidecar-config"   // gateway.yaml of the reduced contract
	SidecarTLSSecret = "gateway-sidecar-tls"      // ca.crt, tls.crt, tls.key: the sidecar's server certificate
	EnvoyClientTLS   = "gateway-envoy-client-tls" // Envoy's client certificate for the sidecar
	ExtProcCluster   = "gateway_extproc"          // Istio: the ext_proc cluster the EnvoyFilter adds
	ControlCluster   = "gateway_control"          // Istio: the control server's cluster the EnvoyFilter adds
)

// ReducedResponseAttributes are the ext_proc response attributes of the
// reduced contract (docs/envoy.md): within Envoy Gateway's allowed prefixes.
var ReducedResponseAttributes = []string{"response.code", "upstream.address"}

// sidecar ports in the control-plane modes (gateway.yaml of the reduced
// contract binds them beyond loopback, with mutual TLS).
const (
	sidecarExtProcPort = 50051
	sidecarControlPort = 8081
	// listeners.health: grpc.health.v1 alone, plaintext, for the kubelet.
	sidecarHealthPort = 50053
	sidecarTLSDir     = "/etc/gateway-tls"
)

// ControlPlaneParams are what the renderings take from the chart's values;
// Defaults gives the plain files, ChartParams the chart's expressions.
type ControlPlaneParams struct {
	Namespace        string // of the sidecar, the routes and the policies
	GatewayName      string // Envoy Gateway: the Gateway the routes attach to
	GatewayNamespace string
	IstioNamespace   string // Istio: the EnvoyFilter's namespace (the ingress gateway's)
	IstioSelector    string // Istio: the ingress gateway's `istio` label
	Image            string // the sidecar's image
	Replicas         string
	// ChartConfig: the sidecar's gateway.yaml is the chart's config value
	// when set.
	ChartConfig bool
}

// DefaultControlPlaneParams are the values.yaml defaults, rendered into the
// plain files.
var DefaultControlPlaneParams = ControlPlaneParams{
	Namespace:        "default",
	GatewayName:      "eg",
	GatewayNamespace: "default",
	IstioNamespace:   "istio-system",
	IstioSelector:    "ingressgateway",
	Image:            "registry.example.com/modelgateway/gateway:0.2.0",
	Replicas:         "2",
}

// chartParams are the same parameters as Helm expressions.
var chartParams = ControlPlaneParams{
	Namespace:        "{{ .Release.Namespace }}",
	GatewayName:      "{{ .Values.envoyGateway.gateway.name }}",
	GatewayNamespace: "{{ .Values.envoyGateway.gateway.namespace | default .Release.Namespace }}",
	IstioNamespace:   "{{ .Values.istio.namespace }}",
	IstioSelector:    "{{ .Values.istio.selector }}",
	Image:            `{{ include "gateway.image" . }}`,
	Replicas:         "{{ .Values.replicas }}",
	ChartConfig:      true,
}

type cpUpstream struct {
	Name, Secret, Header                    string
	Primary, Reserve                        cpEndpoint
	Retries, ConsecutiveErrors              int
	BaseEjection, FirstByte                 string
	HealthPath, HealthInterval, HealthTime  string
	Unhealthy, Healthy                      int
	RetryBudgetPercent                      float64
	RetrySent                               bool
	MaxStreamDuration, StreamIdle, MaxReqMB string
	// DropHeaders are the request headers the bootstrap's route for this
	// upstream removes on the way to the vendor (the client's address,
	// unless envoy.forward_client_address).
	DropHeaders []string
	RoutePatch  string // Istio: the MERGE onto the route named Name, YAML indented for the patch
}

type cpEndpoint struct {
	Host string
	Port int
	TLS  bool
}

type cpView struct {
	P                 ControlPlaneParams
	HealthPort        int             // the sidecar's listeners.health
	Health            healthCheckView // Envoy's active check of the ext_proc backend
	Upstreams         []cpUpstream
	MaxRequestBytes   int64
	MessageTimeout    string
	CircuitBreakers   config.CircuitBreakers
	GatewayYAML       string   // the reduced gateway.yaml, indented for a literal block
	ExtProcFilter     string   // Istio: the ext_proc filter, YAML indented for the patch
	ExtProcClusterDef string   // Istio: the ext_proc cluster, YAML indented for the patch
	ControlClusterDef string   // Istio: the control server's cluster, likewise
	ControlRoutes     []string // Istio: the control routes, last first (each INSERT_FIRST goes on top)
	FirstRoute        string   // Istio: the route name whose virtual host gets the control routes
	Grace             int
	BufferLimit       string   // limits.max_request_bytes as a Kubernetes quantity
	ReducedAttributes []string // ReducedResponseAttributes
}

// GenerateControlPlanes returns the control-plane renderings and the chart,
// keyed by path relative to root.
func GenerateControlPlanes(root string) (map[string][]byte, error) {
	cfgPath := filepath.Join(root, "gateway.yaml")
	gatewayYAML, err := os.ReadFile(cfgPath)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(cfgPath)
	if err != nil {
		return nil, err
	}
	reduced, err := ReducedGatewayYAML(gatewayYAML)
	if err != nil {
		return nil, err
	}
	plain, err := renderControlPlanes(cfg, reduced, DefaultControlPlaneParams)
	if err != nil {
		return nil, err
	}
	chart, err := renderControlPlanes(cfg, reduced, chartParams)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for name, data := range plain {
		out[name] = data
	}
	// The chart: each rendering under the mode that uses it, the own mode's
	// templates are deploy/k8s with the pod's values substituted.
	wrap := func(cond string, data []byte) []byte {
		return []byte("{{- if " + cond + " }}\n" + string(data) + "{{- end }}\n")
	}
	notOwn := `ne .Values.attach "` + AttachOwn + `"`
	for name, data := range chart {
		base := filepath.Base(name)
		t, err := chartTemplate(name, string(data))
		if err != nil {
			return nil, err
		}
		data := []byte(t)
		switch filepath.Dir(name) {
		case SidecarDir:
			out[ChartDir+"/templates/sidecar-"+base] = wrap(notOwn, data)
		case EnvoyGatewayDir:
			out[ChartDir+"/templates/envoy-gateway-"+base] = wrap(`eq .Values.attach "`+AttachEnvoyGateway+`"`, data)
		case IstioDir:
			out[ChartDir+"/templates/istio-"+base] = wrap(`eq .Values.attach "`+AttachIstio+`"`, data)
		}
	}
	own, err := ownTemplates(root, gatewayYAML)
	if err != nil {
		return nil, err
	}
	for name, data := range own {
		out[name] = data
	}
	// The monitoring toggles' contents, in the chart (templates read files
	// of the chart only).
	for _, f := range []string{"alerts.yaml", "dashboard.json"} {
		data, err := os.ReadFile(filepath.Join(root, "deploy/monitoring", f))
		if err != nil {
			return nil, err
		}
		out[ChartDir+"/files/"+f] = data
	}
	return out, nil
}

// ownTemplates are the own mode's templates: every manifest of deploy/k8s
// (not monitoring/, which needs the Prometheus Operator's CRDs) as a chart
// template (chartTemplate), but the ConfigMaps: gateway.yaml's comes from
// the config value and Envoy's bootstrap is rendered in the pod. The
// ledger sink is rendered in every mode, the HorizontalPodAutoscaler when
// autoscaling is on.
func ownTemplates(root string, gatewayYAML []byte) (map[string][]byte, error) {
	entries, err := os.ReadDir(filepath.Join(root, "deploy/k8s"))
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{ChartDir + "/templates/own-configmaps.yaml": []byte(chartConfigMap(gatewayYAML))}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".yaml" || e.Name() == filepath.Base(ConfigMapsFile) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, "deploy/k8s", e.Name()))
		if err != nil {
			return nil, err
		}
		if bytes.Contains(data, []byte("{{")) {
			return nil, fmt.Errorf("deploy/k8s/%s: holds {{, which Helm would read as a template", e.Name())
		}
		s, err := chartTemplate(e.Name(), string(data))
		if err != nil {
			return nil, fmt.Errorf("deploy/k8s/%w", err)
		}
		cond := `eq .Values.attach "` + AttachOwn + `"`
		switch e.Name() {
		case "ledger-sink.yaml":
			cond = ".Values.ledgerSink.enabled"
		case "hpa.yaml":
			cond = "and (" + cond + ") .Values.autoscaling.enabled"
		}
		out[ChartDir+"/templates/own-"+e.Name()] = []byte("{{- if " + cond + " }}\n" + s + "{{- end }}\n")
	}
	return out, nil
}

// ReducedGatewayYAML is gateway.yaml for a sidecar behind a control
// plane's Envoy: the reduced contract, ext_proc and control beyond loopback
// with mutual TLS (the sidecar refuses either beyond loopback without it).
// Comments are kept.
func ReducedGatewayYAML(gatewayYAML []byte) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(gatewayYAML, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("gateway.yaml: not a mapping")
	}
	top := doc.Content[0]
	listeners := child(top, "listeners")
	envoyNode := child(top, "envoy")
	if listeners == nil || envoyNode == nil {
		return nil, fmt.Errorf("gateway.yaml: want listeners and envoy sections")
	}
	set(listeners, "extproc", str("0.0.0.0:"+strconv.Itoa(sidecarExtProcPort)), "ext_proc for the control plane's Envoy: mutual TLS (listeners.tls)")
	set(listeners, "control", str("0.0.0.0:"+strconv.Itoa(sidecarControlPort)), "/health, /v1/usage, /console, /metrics: mutual TLS too")
	set(listeners, "health", str("0.0.0.0:"+strconv.Itoa(sidecarHealthPort)), "grpc.health.v1 alone, plaintext: the kubelet's grpc probes")
	tls := mapping(
		"ca_file", str(sidecarTLSDir+"/ca.crt"),
		"server_cert_file", str(sidecarTLSDir+"/tls.crt"),
		"server_key_file", str(sidecarTLSDir+"/tls.key"),
		// The sidecar reads only the CA and its own pair; Envoy's pair is
		// held by the control plane, but listeners.tls names all five.
		"client_cert_file", str(sidecarTLSDir+"/tls.crt"),
		"client_key_file", str(sidecarTLSDir+"/tls.key"),
	)
	set(listeners, "tls", tls, "Secret "+SidecarTLSSecret+": the sidecar's certificate and the CA that signed Envoy's client certificate.\n"+
		"The client_* entries are Envoy's and unused by the sidecar (the control plane holds them).")
	set(envoyNode, "contract", str(config.ContractReduced), "what Envoy Gateway's EnvoyExtensionPolicy and Istio's EnvoyFilter render (docs/envoy.md)")
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func child(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// set replaces the value of key in m, or appends it, with a line comment.
func set(m *yaml.Node, key string, v *yaml.Node, comment string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			m.Content[i].HeadComment = comment
			m.Content[i].LineComment = ""
			return
		}
	}
	k := str(key)
	k.HeadComment = comment
	m.Content = append(m.Content, k, v)
}

// healthCheckView is envoy.ExtProcHealthCheck as Envoy Gateway writes it.
type healthCheckView struct {
	Service, Interval, Timeout string
	Unhealthy, Healthy         int
}

func renderControlPlanes(cfg *config.Config, reduced []byte, p ControlPlaneParams) (map[string][]byte, error) {
	hc := envoy.ExtProcHealthCheck
	v := cpView{
		P:          p,
		HealthPort: sidecarHealthPort,
		Health: healthCheckView{Service: hc.Service, Interval: hc.Interval.String(), Timeout: hc.Timeout.String(),
			Unhealthy: hc.Unhealthy, Healthy: hc.Healthy},
		MaxRequestBytes: cfg.Limits.MaxRequestBytes,
		MessageTimeout:  seconds(config.ExtProcMessageTimeout.Seconds()),
		CircuitBreakers: cfg.Envoy.CircuitBreakers,
		GatewayYAML:     indent(string(reduced), 4),
	}
	if p.ChartConfig {
		v.GatewayYAML = configValue(string(reduced), 4)
	}
	v.Grace = SidecarDrainSeconds + ShutdownSlack
	v.ReducedAttributes = ReducedResponseAttributes
	v.BufferLimit = quantity(cfg.Limits.MaxRequestBytes)
	pieces, err := attachPieces(cfg, p)
	if err != nil {
		return nil, err
	}
	for _, u := range cfg.Upstreams {
		route := pieces.routes[u.Name]
		if route == nil {
			return nil, fmt.Errorf("upstream %s: the reduced bootstrap has no route of that name", u.Name)
		}
		drop, patch, err := routePieces(route)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
		}
		cu := cpUpstream{
			DropHeaders:        drop,
			RoutePatch:         indent(patch, 10),
			Name:               u.Name,
			Secret:             u.Name + "-vendor-key",
			Header:             "x-api-key",
			Retries:            u.Failover.Retries,
			ConsecutiveErrors:  u.Failover.ConsecutiveErrors,
			BaseEjection:       gwDuration(u.Failover.BaseEjectionTime.D()),
			FirstByte:          gwDuration(u.Failover.FirstByteTimeout.D()),
			HealthPath:         u.HealthCheck.Path,
			HealthInterval:     gwDuration(u.HealthCheck.Interval.D()),
			HealthTime:         gwDuration(u.HealthCheck.Timeout.D()),
			Unhealthy:          u.HealthCheck.UnhealthyThreshold,
			Healthy:            u.HealthCheck.HealthyThreshold,
			RetryBudgetPercent: u.Failover.RetryBudgetPercent,
			RetrySent:          u.Failover.RetrySentRequests,
			MaxStreamDuration:  gwDuration(cfg.Envoy.MaxStreamDuration.D()),
			StreamIdle:         gwDuration(cfg.Envoy.StreamIdleTimeout.D()),
		}
		if u.Format == config.FormatChatCompletions {
			cu.Header = "Authorization"
		}
		for i, ep := range []config.Endpoint{u.Primary, u.Reserve} {
			if ep.URL == "" {
				continue
			}
			t, err := ep.Parse()
			if err != nil {
				return nil, fmt.Errorf("upstream %s: %w", u.Name, err)
			}
			e := cpEndpoint{Host: t.Host, Port: t.Port, TLS: t.TLS}
			if i == 0 {
				cu.Primary = e
			} else {
				cu.Reserve = e
			}
		}
		v.Upstreams = append(v.Upstreams, cu)
	}
	if err := v.istio(pieces, p); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, f := range cpTemplates.Templates() {
		if !strings.HasSuffix(f.Name(), ".yaml") {
			continue
		}
		var buf bytes.Buffer
		if err := f.Execute(&buf, v); err != nil {
			return nil, err
		}
		out[f.Name()] = buf.Bytes()
	}
	return out, nil
}

// bootPieces are the parts of the pod's bootstrap, rendered for the
// reduced contract, that the control planes' renderings take over: the
// ext_proc filter, its cluster and the control server's, the routes to the
// control server and each upstream's route by name.
type bootPieces struct {
	filter, extproc, control map[string]any
	controlRoutes            []map[string]any
	routes                   map[string]map[string]any
}

// attachPieces renders the bootstrap for the reduced contract, adapted to a
// control plane's Envoy: the sidecar's Service as the address of its two
// clusters and Envoy's client certificate from files mounted into the
// ingress gateway's pod.
func attachPieces(cfg *config.Config, p ControlPlaneParams) (*bootPieces, error) {
	c := *cfg
	// The sidecar runs the reduced contract (ReducedGatewayYAML): the
	// filter is the one the bootstrap renders for it.
	c.Envoy.Contract = config.ContractReduced
	c.Listeners.TLS = config.SidecarTLS{
		CA: sidecarTLSDir + "/ca.crt", ServerCert: sidecarTLSDir + "/tls.crt", ServerKey: sidecarTLSDir + "/tls.key",
		ClientCert: "/etc/gateway-envoy-client/tls.crt", ClientKey: "/etc/gateway-envoy-client/tls.key",
	}
	opts := PodEnvoyOptions
	// The namespace may be a chart expression, which is no YAML: a
	// placeholder until the patches are marshalled.
	sidecarHost := SidecarName + "." + nsMark + ".svc.cluster.local:"
	opts.ExtProcAddr = sidecarHost + strconv.Itoa(sidecarExtProcPort)
	opts.ControlAddr = sidecarHost + strconv.Itoa(sidecarControlPort)
	boot, err := envoy.Render(&c, opts)
	if err != nil {
		return nil, err
	}
	var b struct {
		StaticResources struct {
			Listeners []struct {
				Name         string `yaml:"name"`
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							HTTPFilters []map[string]any `yaml:"http_filters"`
							RouteConfig struct {
								VirtualHosts []struct {
									Routes []map[string]any `yaml:"routes"`
								} `yaml:"virtual_hosts"`
							} `yaml:"route_config"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
			Clusters []map[string]any `yaml:"clusters"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(boot, &b); err != nil {
		return nil, err
	}
	out := &bootPieces{routes: map[string]map[string]any{}}
	for _, l := range b.StaticResources.Listeners {
		if l.Name != "public" {
			continue
		}
		for _, fc := range l.FilterChains {
			for _, nf := range fc.Filters {
				for _, hf := range nf.TypedConfig.HTTPFilters {
					if hf["name"] == "envoy.filters.http.ext_proc" {
						out.filter = hf
					}
				}
				for _, vh := range nf.TypedConfig.RouteConfig.VirtualHosts {
					for _, r := range vh.Routes {
						if name, ok := r["name"].(string); ok {
							out.routes[name] = r
						} else if to, _ := r["route"].(map[string]any); to != nil && to["cluster"] == "control" {
							out.controlRoutes = append(out.controlRoutes, r)
						}
					}
				}
			}
		}
	}
	for _, c := range b.StaticResources.Clusters {
		switch c["name"] {
		case "extproc":
			out.extproc = c
		case "control":
			out.control = c
		}
	}
	if out.filter == nil || out.extproc == nil || out.control == nil || len(out.controlRoutes) == 0 {
		return nil, fmt.Errorf("the pod's bootstrap has no ext_proc filter, extproc or control cluster, or control routes")
	}
	return out, nil
}

// nsMark stands for the sidecar's namespace in the rendered bootstrap.
const nsMark = "namespace-of-the-sidecar"

// routePieces are what the bootstrap's route for an upstream does beyond
// routing that a control plane's route must do too: the request headers it
// removes, and, for Istio, the route patch that turns ext_proc on, removes
// them and buffers bodies up to the bootstrap route's
// request_body_buffer_limit (the gateway's listener keeps its own, smaller
// buffer, as the bootstrap's does: a request refused on its headers costs
// no more of its body).
func routePieces(route map[string]any) (drop []string, istioPatch string, err error) {
	for _, h := range asList(route["request_headers_to_remove"]) {
		s, ok := h.(string)
		if !ok {
			return nil, "", fmt.Errorf("request_headers_to_remove holds %v", h)
		}
		drop = append(drop, s)
	}
	var on map[string]any
	if err := yaml.Unmarshal([]byte(envoy.ExtProcOnRoute), &on); err != nil {
		return nil, "", err
	}
	patch := map[string]any{"typed_per_filter_config": on}
	if limit, ok := route["request_body_buffer_limit"]; ok {
		patch["request_body_buffer_limit"] = limit
	}
	if len(drop) > 0 {
		patch["request_headers_to_remove"] = drop
	}
	istioPatch, err = marshalSorted(patch)
	return drop, istioPatch, err
}

func asList(v any) []any { l, _ := v.([]any); return l }

// istio fills in the EnvoyFilter's patches: the ext_proc filter off by
// default (the per-route patches turn it on, as the fragment's routes do),
// its cluster and the control server's, renamed, and the control routes
// to the latter.
func (v *cpView) istio(b *bootPieces, p ControlPlaneParams) error {
	f := b.filter
	f["disabled"] = true
	tc := f["typed_config"].(map[string]any)
	tc["grpc_service"].(map[string]any)["envoy_grpc"] = map[string]any{"cluster_name": ExtProcCluster}
	for _, c := range []struct {
		def  map[string]any
		name string
		out  *string
	}{{b.extproc, ExtProcCluster, &v.ExtProcClusterDef}, {b.control, ControlCluster, &v.ControlClusterDef}} {
		c.def["name"] = c.name
		c.def["load_assignment"].(map[string]any)["cluster_name"] = c.name
		y, err := marshalSorted(c.def)
		if err != nil {
			return err
		}
		*c.out = indent(strings.ReplaceAll(y, nsMark, p.Namespace), 10)
	}
	fy, err := marshalSorted(f)
	if err != nil {
		return err
	}
	v.ExtProcFilter = indent(fy, 10)
	for i := len(b.controlRoutes) - 1; i >= 0; i-- {
		r := b.controlRoutes[i]
		r["route"].(map[string]any)["cluster"] = ControlCluster
		y, err := marshalSorted(r)
		if err != nil {
			return err
		}
		v.ControlRoutes = append(v.ControlRoutes, indent(y, 10))
	}
	if len(v.Upstreams) == 0 {
		return fmt.Errorf("no upstreams: the control routes have no virtual host to go into")
	}
	v.FirstRoute = v.Upstreams[0].Name
	return nil
}

// marshalSorted marshals v as block YAML (yaml.v3 sorts map keys).
func marshalSorted(v any) (string, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return "", err
	}
	if err := enc.Close(); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n")
}

// gwDuration is d as a Gateway API Duration (whole seconds, else
// milliseconds: the API takes no fractions).
func gwDuration(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// quantity is n bytes as a Kubernetes quantity, in Mi when it divides.
func quantity(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + "Mi"
	}
	return strconv.FormatInt(n, 10)
}

func seconds(s float64) string { return strconv.FormatFloat(s, 'f', -1, 64) + "s" }

// SortedKeys returns the keys of a generated file set in order.
func SortedKeys(files map[string][]byte) []string {
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var cpTemplates = template.Must(template.New("cp").Delims("[[", "]]").Funcs(template.FuncMap{
	"add": func(a, b int) int { return a + b },
}).Parse(cpTemplateText))
