package deploy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	envoygateway "github.com/envoyproxy/gateway"
	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/mod/modfile"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"
	istionet "istio.io/api/networking/v1alpha3"
	istiov1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	// The typed configs the Istio patches carry, for protojson's Any.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	gwapiv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

// The committed control-plane renderings and chart templates are what the
// generator writes, and the generated directories hold nothing else.
func TestControlPlaneRenderingsAreCurrent(t *testing.T) {
	files, err := deploy.GenerateControlPlanes(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range deploy.SortedKeys(files) {
		if got := readRepoFile(t, p); !bytes.Equal(got, files[p]) {
			t.Errorf("%s has drifted from gateway.yaml, deploy/k8s and deploy/controlplanes.go: run `make deploy-render`", p)
		}
	}
	handWritten := map[string]bool{}
	for _, f := range []string{"_helpers.tpl", "validate.yaml", "serviceaccount.yaml", "monitoring.yaml"} {
		handWritten[deploy.ChartDir+"/templates/"+f] = true
	}
	for _, dir := range []string{deploy.SidecarDir, deploy.EnvoyGatewayDir, deploy.IstioDir, deploy.ChartDir + "/templates"} {
		err := filepath.WalkDir(repoPath(dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			rel = filepath.ToSlash(rel)
			if _, ok := files[rel]; !ok && !handWritten[rel] {
				t.Errorf("%s: not written by the generator (stale? remove it)", rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// scheme knows every kind the renderings and the chart hold.
func cpScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme, autoscalingv2.AddToScheme,
		egv1a1.AddToScheme, gwapiv1.Install, istiov1alpha3.AddToScheme,
	} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

type cpObject struct {
	src  string // file, and document
	gvk  schema.GroupVersionKind
	obj  runtime.Object
	json []byte // the document as JSON, for the CRD schemas
}

func (o cpObject) name() string { return o.obj.(interface{ GetName() string }).GetName() }
func (o cpObject) key() string  { return o.gvk.Kind + "/" + o.name() }

// decodeDocs decodes every document of a multi-document YAML strictly into
// the API types (an unknown or duplicate field, an unknown kind or
// apiVersion fails).
func decodeDocs(t *testing.T, src string, data []byte) []cpObject {
	t.Helper()
	dec := serializer.NewCodecFactory(cpScheme(t), serializer.EnableStrict).UniversalDeserializer()
	var out []cpObject
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		obj, gvk, err := dec.Decode(doc, nil, nil)
		if err != nil {
			t.Errorf("%s, document %d: %v", src, n, err)
			continue
		}
		j, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cpObject{fmt.Sprintf("%s, document %d", src, n), *gvk, obj, j})
	}
	return out
}

func decodeDir(t *testing.T, dir string) []cpObject {
	t.Helper()
	entries, err := os.ReadDir(repoPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []cpObject
	for _, e := range entries {
		if !e.IsDir() && filepath.Ext(e.Name()) == ".yaml" {
			out = append(out, decodeDocs(t, dir+"/"+e.Name(), readRepoFile(t, dir+"/"+e.Name()))...)
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no objects", dir)
	}
	return out
}

// crdSchemas are the CRDs' OpenAPI schemas, by group/version/kind: Envoy
// Gateway's and the Gateway API's as Envoy Gateway embeds them (the module
// version in go.mod), Istio's from the istio.io/api module.
func crdSchemas(t *testing.T) map[schema.GroupVersionKind]*jsonschema.Schema {
	t.Helper()
	out := map[schema.GroupVersionKind]*jsonschema.Schema{}
	istio := readModuleFile(t, "istio.io/api", "kubernetes/customresourcedefinitions.gen.yaml")
	for _, src := range [][]byte{envoygateway.GatewayCRDs, istio} {
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(src)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			var crd apiextv1.CustomResourceDefinition
			if err := sigsyaml.Unmarshal(doc, &crd); err != nil || crd.Kind != "CustomResourceDefinition" {
				continue
			}
			for _, v := range crd.Spec.Versions {
				if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
					continue
				}
				gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
				raw, err := json.Marshal(v.Schema.OpenAPIV3Schema)
				if err != nil {
					t.Fatal(err)
				}
				doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
				if err != nil {
					t.Fatal(err)
				}
				c := jsonschema.NewCompiler()
				c.DefaultDraft(jsonschema.Draft4) // OpenAPI 3.0's schema objects
				url := "mem://" + gvk.String()
				if err := c.AddResource(url, doc); err != nil {
					t.Fatal(err)
				}
				s, err := c.Compile(url)
				if err != nil {
					t.Fatalf("%s: %v", gvk, err)
				}
				out[gvk] = s
			}
		}
	}
	return out
}

// readModuleFile reads a file of a module in the module cache, at the
// version deploy/go.mod requires.
func readModuleFile(t *testing.T, module, file string) []byte {
	t.Helper()
	mf, err := modfile.Parse("go.mod", readRepoFile(t, "deploy/go.mod"), nil)
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	for _, r := range mf.Require {
		if r.Mod.Path == module {
			version = r.Mod.Version
		}
	}
	if version == "" {
		t.Fatalf("deploy/go.mod requires no %s", module)
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			home, _ := os.UserHomeDir()
			gopath = filepath.Join(home, "go")
		}
		cache = filepath.Join(filepath.SplitList(gopath)[0], "pkg", "mod")
	}
	p := filepath.Join(cache, filepath.FromSlash(module)+"@"+version, filepath.FromSlash(file))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run `cd deploy && go mod download`)", err)
	}
	return data
}

// validateCRDs checks every custom resource against its CRD's schema
// (types, enums, patterns, required fields, bounds; not the CEL rules).
func validateCRDs(t *testing.T, objs []cpObject, schemas map[schema.GroupVersionKind]*jsonschema.Schema) {
	t.Helper()
	for _, o := range objs {
		if o.gvk.Group == "" || o.gvk.Group == "apps" || o.gvk.Group == "policy" || o.gvk.Group == "autoscaling" || o.gvk.Group == "networking.k8s.io" {
			continue // built in: the strict decoding is the check
		}
		s, ok := schemas[o.gvk]
		if !ok {
			t.Errorf("%s: no CRD for %s", o.src, o.gvk)
			continue
		}
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(o.json))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); err != nil {
			t.Errorf("%s: %s %s does not match its CRD: %v", o.src, o.gvk.Kind, o.name(), err)
		}
	}
}

func kinds(objs []cpObject) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		out[o.gvk.Kind]++
	}
	return out
}

// Envoy Gateway's rendering: Envoy Gateway's and the Gateway API's types
// (strict) and CRD schemas, and the settings issue #34 fixed.
func TestEnvoyGatewayRendering(t *testing.T) {
	objs := decodeDir(t, deploy.EnvoyGatewayDir)
	validateCRDs(t, objs, crdSchemas(t))
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	k := kinds(objs)
	backends := 2 // the sidecar's two ports
	for _, u := range cfg.Upstreams {
		backends++
		if u.HasReserve() {
			backends++
		}
	}
	for kind, n := range map[string]int{"EnvoyExtensionPolicy": 1, "ClientTrafficPolicy": 1, "HTTPRoute": len(cfg.Upstreams) + 1, "HTTPRouteFilter": len(cfg.Upstreams), "BackendTrafficPolicy": len(cfg.Upstreams), "Backend": backends} {
		if k[kind] != n {
			t.Errorf("%s: want %d %s, have %d", deploy.EnvoyGatewayDir, n, kind, k[kind])
		}
	}
	routes := map[string]*gwapiv1.HTTPRoute{}
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *gwapiv1.HTTPRoute:
			routes[x.Name] = x
		case *egv1a1.ClientTrafficPolicy:
			if x.Spec.Connection == nil || x.Spec.Connection.BufferLimit == nil || x.Spec.Connection.BufferLimit.Value() != cfg.Limits.MaxRequestBytes {
				t.Errorf("ClientTrafficPolicy %s: connection.bufferLimit is not limits.max_request_bytes (%d): buffered bodies above it would get 413", x.Name, cfg.Limits.MaxRequestBytes)
			}
		case *egv1a1.HTTPRouteFilter:
			ci := x.Spec.CredentialInjection
			if ci == nil || ci.Overwrite == nil || !*ci.Overwrite || ci.Credential.ValueRef.Name == "" {
				t.Errorf("HTTPRouteFilter %s: the vendor key must be injected (overwriting the client's) from a Secret", x.Name)
			}
		}
	}
	for _, o := range objs {
		p, ok := o.obj.(*egv1a1.EnvoyExtensionPolicy)
		if !ok {
			continue
		}
		if len(p.Spec.ExtProc) != 1 {
			t.Fatalf("EnvoyExtensionPolicy %s: want one extProc", p.Name)
		}
		ep := p.Spec.ExtProc[0]
		if ep.MessageTimeout == nil || string(*ep.MessageTimeout) != "5s" || config.ExtProcMessageTimeout.String() != "5s" {
			t.Errorf("messageTimeout %v: want the bootstrap's message_timeout (%s), not Envoy Gateway's 200 ms default", ep.MessageTimeout, config.ExtProcMessageTimeout)
		}
		if ep.FailOpen == nil || *ep.FailOpen {
			t.Error("extProc must fail closed (failOpen: false)")
		}
		if ep.StatusOnError == nil || *ep.StatusOnError != 503 {
			t.Error("statusOnError: want 503")
		}
		m := ep.ProcessingMode
		if m == nil || !m.AllowModeOverride || m.Request == nil || m.Request.Body == nil || *m.Request.Body != egv1a1.BufferedExtProcBodyProcessingMode ||
			m.Response == nil || m.Response.Body == nil || *m.Response.Body != egv1a1.StreamedExtProcBodyProcessingMode {
			t.Errorf("processingMode %+v: want request body Buffered, response body Streamed, allowModeOverride", m)
		} else if !slices.Equal(m.Response.Attributes, deploy.ReducedResponseAttributes) {
			t.Errorf("response attributes %v: want the reduced contract's %v", m.Response.Attributes, deploy.ReducedResponseAttributes)
		}
		if len(ep.BackendRefs) != 1 || string(ep.BackendRefs[0].Name) != deploy.SidecarName+"-grpc" {
			t.Errorf("extProc backend: want the Backend %s-grpc", deploy.SidecarName)
		}
		// Envoy checks each sidecar's readiness, as the pod's bootstrap does.
		var hc *egv1a1.ActiveHealthCheck
		if bs := ep.BackendSettings; bs != nil && bs.HealthCheck != nil {
			hc = bs.HealthCheck.Active
		}
		hcWant := envoy.ExtProcHealthCheck
		if hc == nil || hc.Type != egv1a1.ActiveHealthCheckerTypeGRPC || hc.GRPC == nil || hc.GRPC.Service == nil || *hc.GRPC.Service != hcWant.Service ||
			hc.Interval == nil || string(*hc.Interval) != hcWant.Interval.String() || hc.Timeout == nil || string(*hc.Timeout) != hcWant.Timeout.String() ||
			hc.UnhealthyThreshold == nil || int(*hc.UnhealthyThreshold) != hcWant.Unhealthy || hc.HealthyThreshold == nil || int(*hc.HealthyThreshold) != hcWant.Healthy {
			t.Errorf("extProc backend health check %+v: want active gRPC %+v", hc, hcWant)
		}
		// The policy attaches to the model routes only: the control routes
		// (/health, /v1/usage, /console) run without ext_proc.
		var targets []string
		for _, r := range p.Spec.TargetRefs {
			targets = append(targets, string(r.Name))
		}
		var want []string
		for _, u := range cfg.Upstreams {
			want = append(want, u.Name)
			r := routes[u.Name]
			if r == nil || len(r.Spec.Rules) != 1 || r.Spec.Rules[0].Matches[0].Path == nil || *r.Spec.Rules[0].Matches[0].Path.Value != "/"+u.Name {
				t.Errorf("HTTPRoute %s: want one rule matching the prefix /%s", u.Name, u.Name)
				continue
			}
			// As the bootstrap's route: the client's address is not sent
			// to the vendor.
			var removed []string
			for _, f := range r.Spec.Rules[0].Filters {
				if f.Type == gwapiv1.HTTPRouteFilterRequestHeaderModifier && f.RequestHeaderModifier != nil {
					removed = append(removed, f.RequestHeaderModifier.Remove...)
				}
			}
			for _, h := range []string{"x-forwarded-for", "x-envoy-external-address", "x-real-ip", "forwarded"} {
				if !cfg.Envoy.ForwardClientAddress && !slices.Contains(removed, h) {
					t.Errorf("HTTPRoute %s: %s reaches the vendor (envoy.forward_client_address is off)", u.Name, h)
				}
			}
		}
		if !slices.Equal(targets, want) {
			t.Errorf("EnvoyExtensionPolicy targets %v, want the model routes %v", targets, want)
		}
	}
	if routes["gateway-control"] == nil {
		t.Error("no HTTPRoute gateway-control for /health, /v1/usage and /console")
	}
}

// The CRD schemas are a check that can fail: the full contract's
// xds.upstream_host_metadata attribute is outside EnvoyExtensionPolicy's
// allowed prefixes, and a misspelt enum value is refused.
func TestEnvoyGatewaySchemaRejectsTheFullContract(t *testing.T) {
	schemas := crdSchemas(t)
	data := readRepoFile(t, deploy.EnvoyGatewayDir+"/policies.yaml")
	for _, bad := range []struct{ from, to string }{
		{"- upstream.address", "- xds.upstream_host_metadata"},
		{"body: Buffered", "body: Buffer"},
	} {
		mutated := bytes.Replace(data, []byte(bad.from), []byte(bad.to), 1)
		if bytes.Equal(mutated, data) {
			t.Fatalf("policies.yaml has no %q", bad.from)
		}
		var rejected bool
		for _, o := range decodeDocs(t, "mutated policies.yaml", mutated) {
			if o.gvk.Kind != "EnvoyExtensionPolicy" {
				continue
			}
			v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(o.json))
			rejected = schemas[o.gvk].Validate(v) != nil
		}
		if !rejected {
			t.Errorf("the EnvoyExtensionPolicy schema accepted %q", bad.to)
		}
	}
}

// The sidecar alone: Kubernetes types, and gateway.yaml of the reduced
// contract, which binds beyond loopback only with mutual TLS.
func TestSidecarRendering(t *testing.T) {
	objs := decodeDir(t, deploy.SidecarDir)
	var cm *corev1.ConfigMap
	var svc *corev1.Service
	var sts *appsv1.StatefulSet
	for _, o := range objs {
		switch x := o.obj.(type) {
		case *corev1.ConfigMap:
			cm = x
		case *corev1.Service:
			svc = x
		case *appsv1.StatefulSet:
			sts = x
		}
	}
	if cm == nil || svc == nil || sts == nil {
		t.Fatalf("%s: want a ConfigMap, a Service and a StatefulSet", deploy.SidecarDir)
	}
	var ports []int32
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Port)
	}
	if !slices.Equal(ports, []int32{50051, 8081}) {
		t.Errorf("Service %s ports %v: want ext_proc 50051 and control 8081", svc.Name, ports)
	}
	c := sts.Spec.Template.Spec.Containers
	if len(c) != 1 || len(c[0].Args) == 0 || c[0].Args[0] != "serve" {
		t.Fatalf("StatefulSet %s: want one container running gateway serve", sts.Name)
	}
	for _, e := range c[0].Env {
		if strings.HasSuffix(e.Name, "_API_KEY") {
			t.Errorf("the sidecar gets %s: vendor keys are Envoy's alone", e.Name)
		}
	}
	text := cm.Data["gateway.yaml"]
	var doc struct {
		Envoy struct {
			Contract string `yaml:"contract"`
		} `yaml:"envoy"`
	}
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Envoy.Contract != "reduced" {
		t.Errorf("gateway.yaml of the sidecar: envoy.contract %q, want reduced", doc.Envoy.Contract)
	}
	// The rest is the repository's gateway.yaml with the listeners moved:
	// it loads and passes the sidecar's bind check.
	p := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatalf("gateway.yaml of the sidecar: %v", err)
	}
	if err := cfg.Listeners.CheckSidecarBinds(); err != nil {
		t.Errorf("gateway.yaml of the sidecar: %v", err)
	}
	if !cfg.Envoy.Reduced() || cfg.ConcurrencyWaitBound() != 0 {
		t.Error("gateway.yaml of the sidecar: want the reduced contract, without the concurrency wait")
	}
	if cfg.Listeners.ExtProc != "0.0.0.0:50051" || cfg.Listeners.Control != "0.0.0.0:8081" || !cfg.Listeners.TLS.Enabled() {
		t.Errorf("gateway.yaml of the sidecar: extproc %s, control %s, TLS %v: want both beyond loopback with mutual TLS", cfg.Listeners.ExtProc, cfg.Listeners.Control, cfg.Listeners.TLS.Enabled())
	}
	// The kubelet's native grpc probes, on listeners.health (plaintext: the
	// kubelet presents no client certificate): readiness follows the store,
	// startup and liveness only the process.
	_, health, err := config.SplitHostPort(cfg.Listeners.Health)
	if err != nil {
		t.Fatalf("gateway.yaml of the sidecar: listeners.health %q: %v", cfg.Listeners.Health, err)
	}
	if !slices.ContainsFunc(c[0].Ports, func(p corev1.ContainerPort) bool { return int(p.ContainerPort) == health }) {
		t.Errorf("the sidecar does not declare its health port %d", health)
	}
	for name, p := range map[string]*corev1.Probe{"startup": c[0].StartupProbe, "liveness": c[0].LivenessProbe, "readiness": c[0].ReadinessProbe} {
		want := ""
		if name == "readiness" {
			want = envoy.ReadyHealthService
		}
		if p == nil || p.GRPC == nil || int(p.GRPC.Port) != health || p.GRPC.Service == nil && want != "" || p.GRPC.Service != nil && *p.GRPC.Service != want {
			t.Errorf("sidecar %s probe %+v: want grpc on port %d, service %q", name, p, health, want)
		}
	}
}

// Istio's rendering: the EnvoyFilter against Istio's types (strict: the
// spec by protojson) and CRD schema; its patches against Envoy's own protos
// (protojson, strict, then each message's validation rules).
func TestIstioRendering(t *testing.T) {
	objs := decodeDir(t, deploy.IstioDir)
	validateCRDs(t, objs, crdSchemas(t))
	ps := istioPatches(t, istioSpec(t, objs))
	filter, cluster := ps.filter, ps.clusters[deploy.ExtProcCluster]
	if cluster == nil || ps.clusters[deploy.ControlCluster] == nil {
		t.Fatalf("the EnvoyFilter adds the clusters %v: want %s and %s", slices.Sorted(maps.Keys(ps.clusters)), deploy.ExtProcCluster, deploy.ControlCluster)
	}
	// Off by default: only the gateway's own routes turn it on, so that
	// another application's routes on the same ingress gateway never reach
	// the sidecar.
	if !filter.Disabled {
		t.Error("the ext_proc filter must be disabled: true at the listener, enabled per route")
	}
	tc := filter.GetTypedConfig()
	if tc == nil || !strings.HasSuffix(tc.TypeUrl, "ext_proc.v3.ExternalProcessor") {
		t.Fatalf("the HTTP filter patch is not ext_proc: %v", tc)
	}
	var ep extprocv3.ExternalProcessor
	if err := tc.UnmarshalTo(&ep); err != nil {
		t.Fatal(err)
	}
	if hcs := cluster.GetHealthChecks(); len(hcs) != 1 || hcs[0].GetGrpcHealthCheck().GetServiceName() != envoy.ReadyHealthService ||
		hcs[0].GetInterval().AsDuration() != envoy.ExtProcHealthCheck.Interval {
		t.Errorf("the ext_proc cluster's health checks %v: want the bootstrap's active gRPC check of %s", hcs, envoy.ReadyHealthService)
	}
	if ep.GetGrpcService().GetEnvoyGrpc().GetClusterName() != deploy.ExtProcCluster {
		t.Errorf("the ext_proc filter calls %q: want %s", ep.GetGrpcService().GetEnvoyGrpc().GetClusterName(), deploy.ExtProcCluster)
	}
	if !slices.Equal(ep.ResponseAttributes, deploy.ReducedResponseAttributes) {
		t.Errorf("response attributes %v: want the reduced contract's %v", ep.ResponseAttributes, deploy.ReducedResponseAttributes)
	}
	// The reduced contract's filter: fail closed, the bootstrap's message
	// timeout; no max_message_timeout or mutation rules, which the sidecar
	// in the reduced contract does not use.
	if ep.FailureModeAllow || ep.GetMessageTimeout().AsDuration() != config.ExtProcMessageTimeout || ep.GetMaxMessageTimeout() != nil ||
		ep.GetMutationRules() != nil || !ep.AllowModeOverride || ep.GetStatusOnError().GetCode() != 503 {
		t.Errorf("ext_proc %v: want the reduced contract's filter", &ep)
	}
	if m := ep.GetProcessingMode(); m.GetRequestHeaderMode() != extprocv3.ProcessingMode_SEND || m.GetRequestBodyMode() != extprocv3.ProcessingMode_BUFFERED || m.GetResponseHeaderMode() != extprocv3.ProcessingMode_SKIP {
		t.Errorf("processing mode %v: want the bootstrap's", m)
	}
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Each upstream's route (named after it) turns the filter on and drops
	// the client's address; nothing else is merged.
	var names []string
	for _, u := range cfg.Upstreams {
		names = append(names, u.Name)
		r := ps.merges[u.Name]
		if r == nil {
			t.Errorf("no MERGE onto the route %s", u.Name)
			continue
		}
		if !extProcOn(t, r) {
			t.Errorf("route %s: the patch does not turn ext_proc on", u.Name)
		}
		for _, h := range []string{"x-forwarded-for", "x-envoy-external-address"} {
			if !cfg.Envoy.ForwardClientAddress && !slices.Contains(r.RequestHeadersToRemove, h) {
				t.Errorf("route %s: %s reaches the vendor (envoy.forward_client_address is off)", u.Name, h)
			}
		}
	}
	if got := slices.Sorted(maps.Keys(ps.merges)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Errorf("route patches for %v: want the upstreams' routes %v only", got, names)
	}
	// The control server's routes, without the sidecar, where the first
	// upstream's route is.
	paths := map[string]bool{}
	for i, r := range ps.controls {
		if ps.controlAt[i] != cfg.Upstreams[0].Name {
			t.Errorf("control route %v goes where the route %q is: want %s", r.GetMatch(), ps.controlAt[i], cfg.Upstreams[0].Name)
		}
		if r.GetRoute().GetCluster() != deploy.ControlCluster || extProcOn(t, r) {
			t.Errorf("control route %v: want the cluster %s, without ext_proc", r.GetMatch(), deploy.ControlCluster)
		}
		paths[r.GetMatch().GetPath()+r.GetMatch().GetPrefix()] = true
	}
	for _, p := range []string{"/health", "/v1/usage", "/v1/usage/", "/console"} {
		if !paths[p] {
			t.Errorf("no control route for %s", p)
		}
	}
}

// istioSpec is the spec of the one EnvoyFilter among objs.
func istioSpec(t *testing.T, objs []cpObject) *istionet.EnvoyFilter {
	t.Helper()
	if len(objs) != 1 || objs[0].gvk.Kind != "EnvoyFilter" {
		t.Fatalf("%s: want one EnvoyFilter, have %v", deploy.IstioDir, kinds(objs))
	}
	var raw struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(objs[0].json, &raw); err != nil {
		t.Fatal(err)
	}
	var spec istionet.EnvoyFilter
	if err := protojson.Unmarshal(raw.Spec, &spec); err != nil {
		t.Fatalf("EnvoyFilter spec: %v", err)
	}
	return &spec
}

// extProcOn tells whether a route's per-filter configuration turns the
// ext_proc filter on (anything but disabled).
func extProcOn(t *testing.T, r *routev3.Route) bool {
	t.Helper()
	a := r.GetTypedPerFilterConfig()["envoy.filters.http.ext_proc"]
	if a == nil {
		return false
	}
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	switch m := m.(type) {
	case *routev3.FilterConfig:
		return !m.Disabled
	case *extprocv3.ExtProcPerRoute:
		return !m.GetDisabled()
	}
	t.Fatalf("route %s: ext_proc's per-route config is a %T", r.Name, m)
	return false
}

// istioSet is the EnvoyFilter's patches decoded as Envoy's messages.
type istioSet struct {
	filter    *hcmv3.HttpFilter             // inserted before the router
	clusters  map[string]*clusterv3.Cluster // added, by name
	merges    map[string]*routev3.Route     // merged onto the route of that name
	controls  []*routev3.Route              // INSERT_FIRST, in the patches' order
	controlAt []string                      // the route name each of those matches
}

// istioPatches returns the EnvoyFilter's patches, all in the GATEWAY
// context, decoded as Envoy's messages and validated; any other kind of
// patch fails.
func istioPatches(t *testing.T, spec *istionet.EnvoyFilter) istioSet {
	t.Helper()
	s := istioSet{clusters: map[string]*clusterv3.Cluster{}, merges: map[string]*routev3.Route{}}
	for _, p := range spec.ConfigPatches {
		if p.Match.GetContext() != istionet.EnvoyFilter_GATEWAY {
			t.Errorf("patch %s: context %s, want GATEWAY", p.ApplyTo, p.Match.GetContext())
		}
		value, err := protojson.Marshal(p.Patch.GetValue())
		if err != nil {
			t.Fatal(err)
		}
		var msg interface {
			proto.Message
			ValidateAll() error
		}
		op := p.Patch.Operation
		added := func() {}
		switch p.ApplyTo {
		case istionet.EnvoyFilter_HTTP_FILTER:
			if op != istionet.EnvoyFilter_Patch_INSERT_BEFORE || p.Match.GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName() != "envoy.filters.http.router" {
				t.Error("the ext_proc filter must be inserted before envoy.filters.http.router")
			}
			s.filter = &hcmv3.HttpFilter{}
			msg = s.filter
		case istionet.EnvoyFilter_CLUSTER:
			if op != istionet.EnvoyFilter_Patch_ADD {
				t.Error("a cluster patch must ADD")
			}
			c := &clusterv3.Cluster{}
			added = func() { s.clusters[c.Name] = c }
			msg = c
		case istionet.EnvoyFilter_HTTP_ROUTE:
			rc := p.Match.GetRouteConfiguration()
			name := rc.GetVhost().GetRoute().GetName()
			if name == "" || rc.GetName() != "" || rc.GetPortNumber() != 0 || rc.GetGateway() != "" || rc.GetVhost().GetName() != "" {
				t.Errorf("route patch %v: want a match on the route's name only", rc)
			}
			r := &routev3.Route{}
			msg = r
			switch op {
			case istionet.EnvoyFilter_Patch_MERGE:
				s.merges[name] = r
			case istionet.EnvoyFilter_Patch_INSERT_FIRST:
				s.controls = append(s.controls, r)
				s.controlAt = append(s.controlAt, name)
			default:
				t.Errorf("route patch %s: want MERGE or INSERT_FIRST", op)
			}
		default:
			t.Fatalf("unexpected patch %s", p.ApplyTo)
		}
		if err := protojson.Unmarshal(value, msg); err != nil {
			t.Fatalf("patch %s is not Envoy's %T: %v", p.ApplyTo, msg, err)
		}
		if op == istionet.EnvoyFilter_Patch_MERGE {
			// A part of a route: validated as merged onto one.
			merged := &routev3.Route{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "vendor"}}},
			}
			proto.Merge(merged, msg)
			msg = merged
		}
		if err := msg.ValidateAll(); err != nil {
			t.Errorf("patch %s: %v", p.ApplyTo, err)
		}
		added()
	}
	if s.filter == nil || len(s.clusters) == 0 {
		t.Fatal("the EnvoyFilter needs an HTTP_FILTER and CLUSTER patches")
	}
	return s
}
