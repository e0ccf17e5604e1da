package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	sigsyaml "sigs.k8s.io/yaml"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

// plainRelease is the release whose names are the plain files'.
const plainRelease = "gateway"

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(repoPath(deploy.ChartDir))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// renderRelease renders deploy/helm/gateway as `helm template RELEASE`
// does in namespace "default", the values checked against the schema.
func renderRelease(t *testing.T, release string, values map[string]any) (map[string]string, error) {
	t.Helper()
	ch := loadChart(t)
	caps := chartutil.DefaultCapabilities.Copy()
	if ch.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		t.Fatalf("Chart.yaml kubeVersion %s excludes helm's default %s", ch.Metadata.KubeVersion, caps.KubeVersion)
	}
	vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: release, Namespace: "default", IsInstall: true}, caps)
	if err != nil {
		return nil, err
	}
	return engine.Render(ch, vals)
}

func renderChart(t *testing.T, values map[string]any) (map[string]string, error) {
	t.Helper()
	return renderRelease(t, plainRelease, values)
}

// monObject is a Prometheus Operator object, decoded strictly into the
// fields the chart writes (the operator's Go types are no dependency).
type monObject struct {
	src, kind, name string
	labels          map[string]string
	spec            map[string]any
}

// release is one rendering: the Kubernetes objects, strictly decoded
// against the API types, and the Prometheus Operator's.
type release struct {
	objs []cpObject
	mon  []monObject
}

func releaseObjects(t *testing.T, name string, values map[string]any) release {
	t.Helper()
	out, err := renderRelease(t, name, values)
	if err != nil {
		t.Fatalf("helm template %s %v: %v", name, values, err)
	}
	var r release
	for _, file := range slices.Sorted(maps.Keys(out)) {
		var kube bytes.Buffer
		for i, doc := range strings.Split(out[file], "\n---") {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := sigsyaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if head.APIVersion != "monitoring.coreos.com/v1" {
				kube.WriteString("\n---" + doc)
				continue
			}
			var m struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name   string            `json:"name"`
					Labels map[string]string `json:"labels"`
				} `json:"metadata"`
				Spec map[string]any `json:"spec"`
			}
			if err := sigsyaml.UnmarshalStrict([]byte(doc), &m); err != nil {
				t.Fatalf("%s, document %d: %v", file, i+1, err)
			}
			if m.Kind != "ServiceMonitor" && m.Kind != "PrometheusRule" {
				t.Fatalf("%s: unexpected %s", file, m.Kind)
			}
			r.mon = append(r.mon, monObject{src: file, kind: m.Kind, name: m.Metadata.Name, labels: m.Metadata.Labels, spec: m.Spec})
		}
		r.objs = append(r.objs, decodeDocs(t, file, kube.Bytes())...)
	}
	return r
}

func chartObjects(t *testing.T, values map[string]any) []cpObject {
	t.Helper()
	return releaseObjects(t, plainRelease, values).objs
}

// chartOnlyLabels are the labels the chart adds to the plain files': the
// release, its version and Helm's.
var chartOnlyLabels = []string{"app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"}

// plainForm is an object's JSON with what only the chart writes removed:
// its labels (wherever they are, selectors too) and the checksum/config
// annotation (a hash of what each renders); the own pod's Envoy bootstrap
// goes back from the init container's volume to the plain files'
// ConfigMap (TestChartEnvoyBootstrapAtPodStart checks the init container
// renders that bootstrap).
func plainForm(t *testing.T, o cpObject) []byte {
	t.Helper()
	if s, ok := o.obj.(*appsv1.StatefulSet); ok {
		s = s.DeepCopy()
		ps := &s.Spec.Template.Spec
		ps.InitContainers = slices.DeleteFunc(ps.InitContainers, func(c corev1.Container) bool { return c.Name == deploy.EnvoyConfigMap })
		for i, v := range ps.Volumes {
			if v.Name == deploy.EnvoyConfigMap && v.EmptyDir != nil {
				ps.Volumes[i].VolumeSource = corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: deploy.EnvoyConfigMap}}}
			}
		}
		o.obj = s
	}
	j, err := json.Marshal(o.obj)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(j, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range chartOnlyLabels {
				delete(x, k)
			}
			if a, ok := x["annotations"].(map[string]any); ok {
				delete(a, "checksum/config")
				if len(a) == 0 {
					delete(x, "annotations")
				}
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	walk(v)
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameObjects compares two object sets by kind and name, field by field
// in their plain form.
func sameObjects(t *testing.T, what string, got, want []cpObject) {
	t.Helper()
	g := map[string]cpObject{}
	for _, o := range got {
		g[o.key()] = o
	}
	for _, w := range want {
		o, ok := g[w.key()]
		if !ok {
			t.Errorf("%s: the chart renders no %s (%s)", what, w.key(), w.src)
			continue
		}
		delete(g, w.key())
		if gj, wj := plainForm(t, o), plainForm(t, w); !bytes.Equal(gj, wj) {
			t.Errorf("%s: %s differs from %s:\n%s\n%s", what, o.src, w.src, gj, wj)
		}
	}
	for k, o := range g {
		t.Errorf("%s: the chart renders %s (%s), which the plain files lack", what, k, o.src)
	}
}

// sinkOn turns the ledger sink on, as deploy/k8s has it.
var sinkOn = map[string]any{"ledgerSink": map[string]any{"enabled": true}}

func isSink(o cpObject) bool { return o.gvk.Kind == "Deployment" && o.name() == "gateway-ledger-sink" }

// The chart's defaults render deploy/k8s, object for object but the Envoy
// ConfigMap (rendered in the pod) and the ledger sink (off); each
// attachment mode renders the plain files of that mode and the sidecar's;
// an unknown mode fails.
func TestHelmChart(t *testing.T) {
	ch := loadChart(t)
	if err := ch.Validate(); err != nil || ch.Metadata.APIVersion != "v2" || ch.Metadata.Version == "" {
		t.Fatalf("Chart.yaml: %v (apiVersion %s, version %q): helm package and helm push to an OCI registry need a valid v2 chart", err, ch.Metadata.APIVersion, ch.Metadata.Version)
	}
	var k8s []cpObject
	for _, m := range decodeManifests(t) {
		o := cpObject{src: m.file, gvk: m.obj.GetObjectKind().GroupVersionKind(), obj: m.obj}
		if o.key() != "ConfigMap/"+deploy.EnvoyConfigMap {
			k8s = append(k8s, o)
		}
	}
	sameObjects(t, "attach: own, ledger sink on", chartObjects(t, sinkOn), k8s)
	if slices.ContainsFunc(chartObjects(t, nil), isSink) {
		t.Error("the ledger sink is on by default (it needs DATABASE_URL)")
	}

	sidecar := decodeDir(t, deploy.SidecarDir)
	schemas := crdSchemas(t)
	for mode, dir := range map[string]string{deploy.AttachEnvoyGateway: deploy.EnvoyGatewayDir, deploy.AttachIstio: deploy.IstioDir} {
		got := chartObjects(t, map[string]any{"attach": mode})
		validateCRDs(t, got, schemas)
		sameObjects(t, "attach: "+mode, got, append(decodeDir(t, dir), sidecar...))
	}
	if _, err := renderChart(t, map[string]any{"attach": "linkerd"}); err == nil || !strings.Contains(err.Error(), "attach") {
		t.Errorf("attach: linkerd rendered: %v", err)
	}
}

// lintChart is `helm lint --strict` with the given values: a warning
// fails as an error does.
func lintChart(t *testing.T, values map[string]any) []support.Message {
	t.Helper()
	l := lint.All(repoPath(deploy.ChartDir), values, "default", true)
	var bad []support.Message
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			bad = append(bad, m)
		}
	}
	return bad
}

// valueSets are the value sets the chart is linted and rendered with.
func valueSets(t *testing.T) map[string]map[string]any {
	return map[string]map[string]any{
		"defaults":      nil,
		"envoy-gateway": {"attach": deploy.AttachEnvoyGateway},
		"istio":         {"attach": deploy.AttachIstio, "ledgerSink": map[string]any{"enabled": true}},
		"everything": {
			"config":           customConfig(t),
			"fullnameOverride": "edge",
			"image":            map[string]any{"repository": "r.example/gw", "tag": "9", "pullPolicy": "Always"},
			"envoy":            map[string]any{"image": map[string]any{"repository": "r.example/envoy", "tag": "v9"}},
			"existingSecret":   "vault-synced",
			"imagePullSecrets": []any{map[string]any{"name": "pull"}},
			"autoscaling":      map[string]any{"enabled": false},
			"nodeSelector":     map[string]any{"pool": "gateway"},
			"tolerations":      []any{map[string]any{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}},
			"affinity":         map[string]any{"nodeAffinity": map[string]any{}},
			"podAnnotations":   map[string]any{"a": "b"},
			"podLabels":        map[string]any{"team": "platform"},
			"serviceAccount":   map[string]any{"create": true, "annotations": map[string]any{"iam": "role"}},
			"storage":          map[string]any{"size": "5Gi", "storageClassName": "fast"},
			"ledgerSink":       map[string]any{"enabled": true},
			"monitoring": map[string]any{
				"serviceMonitor": map[string]any{"enabled": true},
				"prometheusRule": map[string]any{"enabled": true},
				"dashboard":      map[string]any{"enabled": true},
			},
		},
	}
}

// `helm lint --strict` passes and `helm template` renders objects that
// decode strictly, with each value set.
func TestChartLintAndTemplate(t *testing.T) {
	for name, values := range valueSets(t) {
		if bad := lintChart(t, values); len(bad) > 0 {
			t.Errorf("helm lint --strict (%s): %v", name, bad)
		}
		if r := releaseObjects(t, "prod", values); len(r.objs) == 0 {
			t.Errorf("%s: nothing rendered", name)
		}
	}
	// The linter fails on what it should: a value the schema refuses.
	if bad := lintChart(t, map[string]any{"replica": 3}); len(bad) == 0 {
		t.Error("helm lint passed a value the schema refuses")
	}
}

// Unknown values are refused, at the top and nested, as are wrong types.
func TestChartSchemaRefusesUnknownValues(t *testing.T) {
	for _, v := range []map[string]any{
		{"replica": 3},
		{"image": map[string]any{"tga": "9"}},
		{"serviceAccount": map[string]any{"created": true}},
		{"monitoring": map[string]any{"serviceMonitor": map[string]any{"enable": true}}},
		{"image": "r.example/gw:9"}, // 0.1.0's form
		{"maxReplicas": 4},          // 0.1.0's, now autoscaling.maxReplicas
		{"replicas": "two"},
	} {
		if _, err := renderChart(t, v); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%v: rendered (%v)", v, err)
		}
	}
}

// Two releases in one namespace share no object name, and no selector of
// one selects the other's pods; each refers to its own ConfigMaps and
// Secret.
func TestChartTwoReleasesInOneNamespace(t *testing.T) {
	all := valueSets(t)["everything"]
	delete(all, "fullnameOverride")
	delete(all, "existingSecret")
	for mode, values := range map[string]map[string]any{deploy.AttachOwn: all, deploy.AttachEnvoyGateway: {"attach": deploy.AttachEnvoyGateway}} {
		a, b := releaseObjects(t, "blue", values), releaseObjects(t, "green", values)
		names := func(r release) map[string]bool {
			m := map[string]bool{}
			for _, o := range r.objs {
				if !sharedByDesign(o) {
					m[o.gvk.Kind+"/"+o.obj.(metav1.Object).GetNamespace()+"/"+o.name()] = true
				}
			}
			for _, o := range r.mon {
				m[o.kind+"/"+o.name] = true
			}
			return m
		}
		na, nb := names(a), names(b)
		for k := range na {
			if nb[k] {
				t.Errorf("%s: both releases render %s", mode, k)
			}
		}
		for _, pair := range [][2]release{{a, b}, {b, a}} {
			own, other := pair[0], pair[1]
			for _, sel := range selectors(t, own) {
				for _, pod := range podLabels(other) {
					if sel.Matches(labels.Set(pod)) {
						t.Errorf("%s: selector %s selects the other release's pods %v", mode, sel, pod)
					}
				}
			}
			refs(t, own)
			sidecarDNS(t, own)
		}
	}
}

// sidecarDNS: the control plane reaches the release's own sidecar, by its
// Service's name and the certificate name it checks.
func sidecarDNS(t *testing.T, r release) {
	t.Helper()
	var svc string
	for _, s := range findObj[*corev1.Service](r.objs) {
		if strings.HasSuffix(s.Name, "-sidecar") {
			svc = s.Name
		}
	}
	for _, b := range findObj[*egv1a1.Backend](r.objs) {
		if !strings.Contains(b.Name, "-sidecar-") {
			continue
		}
		if h := b.Spec.Endpoints[0].FQDN.Hostname; h != svc+".default.svc.cluster.local" || b.Spec.TLS == nil || b.Spec.TLS.SNI == nil || string(*b.Spec.TLS.SNI) != svc {
			t.Errorf("Backend %s reaches %s, not the release's sidecar Service %s", b.Name, h, svc)
		}
	}
}

// sharedByDesign: the Envoy Gateway objects named after an upstream (its
// HTTPRoute at /NAME on the Gateway, its Backends and vendor key) are one
// per upstream and Gateway: a second release on the same Gateway would
// route the same paths (docs/deployment.md).
func sharedByDesign(o cpObject) bool {
	return o.gvk.Group == "gateway.networking.k8s.io" && o.name() != "" && !strings.Contains(o.name(), "control") ||
		o.gvk.Group == "gateway.envoyproxy.io" && (strings.HasSuffix(o.name(), "-primary") || strings.HasSuffix(o.name(), "-reserve") ||
			strings.HasSuffix(o.name(), "-vendor") || o.gvk.Kind == "BackendTrafficPolicy")
}

func selectors(t *testing.T, r release) []labels.Selector {
	t.Helper()
	var out []labels.Selector
	add := func(ls *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	for _, o := range r.objs {
		switch x := o.obj.(type) {
		case *appsv1.StatefulSet:
			add(x.Spec.Selector)
		case *appsv1.Deployment:
			add(x.Spec.Selector)
		case *corev1.Service:
			add(&metav1.LabelSelector{MatchLabels: x.Spec.Selector})
		default:
			if v := fieldSelector(o); v != nil {
				add(v)
			}
		}
	}
	return out
}

// fieldSelector is a PodDisruptionBudget's or NetworkPolicy's selector.
func fieldSelector(o cpObject) *metav1.LabelSelector {
	j, _ := json.Marshal(o.obj)
	var v struct {
		Spec struct {
			Selector    *metav1.LabelSelector `json:"selector"`
			PodSelector *metav1.LabelSelector `json:"podSelector"`
		} `json:"spec"`
	}
	_ = json.Unmarshal(j, &v)
	if v.Spec.Selector != nil {
		return v.Spec.Selector
	}
	return v.Spec.PodSelector
}

func podLabels(r release) []map[string]string {
	var out []map[string]string
	for _, o := range r.objs {
		switch x := o.obj.(type) {
		case *appsv1.StatefulSet:
			out = append(out, x.Spec.Template.Labels)
		case *appsv1.Deployment:
			out = append(out, x.Spec.Template.Labels)
		}
	}
	return out
}

// refs checks that every ConfigMap a pod mounts is the release's, and that
// every Secret it reads is the release's Secret or a control plane's.
func refs(t *testing.T, r release) {
	t.Helper()
	cms := map[string]bool{}
	var pods []corev1.PodTemplateSpec
	var secretName string
	for _, o := range r.objs {
		switch x := o.obj.(type) {
		case *corev1.ConfigMap:
			cms[x.Name] = true
		case *appsv1.StatefulSet:
			pods = append(pods, x.Spec.Template)
			secretName = strings.TrimSuffix(x.Name, "-sidecar") + "-secrets"
		case *appsv1.Deployment:
			pods = append(pods, x.Spec.Template)
		}
	}
	for _, p := range pods {
		for _, v := range p.Spec.Volumes {
			if v.ConfigMap != nil && !cms[v.ConfigMap.Name] {
				t.Errorf("a pod mounts ConfigMap %s, which the release lacks", v.ConfigMap.Name)
			}
		}
		for _, c := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != secretName {
					t.Errorf("%s reads Secret %s, not the release's %s", c.Name, e.ValueFrom.SecretKeyRef.Name, secretName)
				}
			}
		}
	}
}

// customConfig is gateway.yaml with the first upstream's primary moved to
// another host: a change that must reach the sidecar's config and Envoy's
// clusters.
func customConfig(t *testing.T) string {
	t.Helper()
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	old := cfg.Upstreams[0].Primary.URL
	data := string(readRepoFile(t, "gateway.yaml"))
	if strings.Count(data, old) != 1 {
		t.Fatalf("gateway.yaml: want one %s", old)
	}
	return strings.Replace(data, old, "https://"+customHost+"/v1", 1)
}

const customHost = "moved.example.internal"

func findObj[T any](objs []cpObject) []T {
	var out []T
	for _, o := range objs {
		if x, ok := o.obj.(T); ok {
			out = append(out, x)
		}
	}
	return out
}

// The config value is the sidecar's gateway.yaml, in every mode, and rolls
// the pods; in the own mode, the init container renders Envoy's bootstrap
// from it at pod start: with the defaults, exactly deploy/k8s's bootstrap;
// with a config of one's own, its clusters.
func TestChartEnvoyBootstrapAtPodStart(t *testing.T) {
	custom := customConfig(t)
	want := string(readRepoFile(t, "gateway.yaml"))
	for _, mode := range []string{deploy.AttachOwn, deploy.AttachEnvoyGateway, deploy.AttachIstio} {
		objs := chartObjects(t, map[string]any{"attach": mode, "config": custom})
		cms := findObj[*corev1.ConfigMap](objs)
		if len(cms) != 1 || cms[0].Data[deploy.GatewayConfigKey] != custom {
			t.Errorf("attach: %s: the config value is not the sidecar's gateway.yaml", mode)
		}
		before := findObj[*appsv1.StatefulSet](chartObjects(t, map[string]any{"attach": mode}))[0]
		after := findObj[*appsv1.StatefulSet](objs)[0]
		if a, b := before.Spec.Template.Annotations["checksum/config"], after.Spec.Template.Annotations["checksum/config"]; a == "" || a == b {
			t.Errorf("attach: %s: checksum/config %q does not follow the config value (%q)", mode, a, b)
		}
	}
	k8s := loadK8s(t)
	for _, tc := range []struct{ config, want string }{{"", k8s.configMaps[deploy.EnvoyConfigMap].Data[deploy.EnvoyConfigKey]}, {custom, ""}} {
		objs := chartObjects(t, map[string]any{"config": tc.config})
		gw := findObj[*corev1.ConfigMap](objs)[0]
		if tc.config == "" && gw.Data[deploy.GatewayConfigKey] != want {
			t.Error("the default config is not gateway.yaml")
		}
		boot := initBootstrap(t, findObj[*appsv1.StatefulSet](objs)[0], gw)
		if tc.want != "" && boot != tc.want {
			t.Error("the init container's bootstrap differs from deploy/k8s's envoy-config ConfigMap")
		}
		if tc.config != "" && !strings.Contains(boot, "address: "+customHost) {
			t.Errorf("the config value's upstream host %s is not in Envoy's bootstrap", customHost)
		}
	}
}

// initBootstrap runs what the own pod's init container runs, `gateway
// envoy-config` with its arguments (the flags of cmd/gateway/envoyconfig.go,
// parsed here into envoy.Options), on the ConfigMap it mounts; and checks
// that the file it writes is what Envoy reads.
func initBootstrap(t *testing.T, s *appsv1.StatefulSet, gw *corev1.ConfigMap) string {
	t.Helper()
	ps := s.Spec.Template.Spec
	var init *corev1.Container
	for i, c := range ps.InitContainers {
		if c.Name == deploy.EnvoyConfigMap {
			init = &ps.InitContainers[i]
		}
	}
	if init == nil || ps.InitContainers[0].Name != init.Name {
		t.Fatal("the own pod's first init container is not envoy-config")
	}
	if init.Image != ps.InitContainers[1].Image || len(init.Command) != 0 || init.Args[0] != "envoy-config" {
		t.Fatalf("envoy-config: want the gateway's image and its envoy-config subcommand: %s %v", init.Image, init.Args)
	}
	src := string(readRepoFile(t, "cmd/gateway/envoyconfig.go"))
	fs := flag.NewFlagSet("envoy-config", flag.ContinueOnError)
	var o envoy.Options
	var cfgPath, out string
	for name, p := range map[string]*string{
		"config": &cfgPath, "output": &out, "extproc-addr": &o.ExtProcAddr, "control-addr": &o.ControlAddr,
		"public-addr": &o.PublicAddr, "admin-addr": &o.AdminAddr, "probes-addr": &o.ProbesAddr, "node-id": &o.NodeID,
	} {
		if !strings.Contains(src, `"`+name+`"`) {
			t.Fatalf("gateway envoy-config has no --%s", name)
		}
		fs.StringVar(p, name, "", "")
	}
	if err := fs.Parse(init.Args[1:]); err != nil || fs.NArg() != 0 {
		t.Fatalf("envoy-config %v: %v", init.Args, err)
	}
	if o != deploy.PodEnvoyOptions {
		t.Errorf("envoy-config renders with %+v, not deploy.PodEnvoyOptions %+v", o, deploy.PodEnvoyOptions)
	}
	mounted := func(c corev1.Container, path string) string {
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(path, m.MountPath+"/") {
				return m.Name + ":" + strings.TrimPrefix(path, m.MountPath+"/")
			}
		}
		return ""
	}
	envoyC := ps.Containers[0]
	if got, want := mounted(*init, out), mounted(envoyC, envoyC.Args[slices.Index(envoyC.Args, "-c")+1]); got == "" || got != want {
		t.Errorf("envoy-config writes %s (%s), Envoy reads %s", out, got, want)
	}
	if got := mounted(*init, cfgPath); got != "gateway-config:"+deploy.GatewayConfigKey {
		t.Errorf("envoy-config reads %s (%s), not the gateway ConfigMap's %s", cfgPath, got, deploy.GatewayConfigKey)
	}
	// The catalogue path is relative to gateway.yaml's directory: the
	// repository root's, as in the image.
	path := filepath.Join(t.TempDir(), deploy.GatewayConfigKey)
	data := strings.ReplaceAll(gw.Data[deploy.GatewayConfigKey], "catalogue: .cache/", "catalogue: "+filepath.Join(mustAbs(t, root), ".cache")+"/")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := envoy.Render(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// valueCase is a value and what it changes in the rendering.
type valueCase struct {
	path   string // the value's path in values.yaml
	values map[string]any
	check  func(r release) error
}

func gatewayPod(r release) *corev1.PodSpec {
	for _, s := range findObj[*appsv1.StatefulSet](r.objs) {
		return &s.Spec.Template.Spec
	}
	return nil
}

func container(ps *corev1.PodSpec, name string) *corev1.Container {
	for i := range ps.InitContainers {
		if ps.InitContainers[i].Name == name {
			return &ps.InitContainers[i]
		}
	}
	for i := range ps.Containers {
		if ps.Containers[i].Name == name {
			return &ps.Containers[i]
		}
	}
	return &corev1.Container{}
}

func expect(ok bool, format string, args ...any) error {
	if ok {
		return nil
	}
	return fmt.Errorf(format, args...)
}

func valueCases(t *testing.T) []valueCase {
	sinkPod := func(r release) *corev1.PodSpec {
		for _, d := range findObj[*appsv1.Deployment](r.objs) {
			return &d.Spec.Template.Spec
		}
		return &corev1.PodSpec{}
	}
	eachPod := func(f func(*corev1.PodSpec, metav1.ObjectMeta) bool) func(r release) error {
		return func(r release) error {
			n := 0
			for _, s := range findObj[*appsv1.StatefulSet](r.objs) {
				n++
				if !f(&s.Spec.Template.Spec, s.Spec.Template.ObjectMeta) {
					return fmt.Errorf("StatefulSet %s", s.Name)
				}
			}
			for _, d := range findObj[*appsv1.Deployment](r.objs) {
				n++
				if !f(&d.Spec.Template.Spec, d.Spec.Template.ObjectMeta) {
					return fmt.Errorf("Deployment %s", d.Name)
				}
			}
			return expect(n == 2, "%d pods", n)
		}
	}
	withSink := func(v map[string]any) map[string]any {
		v["ledgerSink"] = map[string]any{"enabled": true}
		return v
	}
	res := map[string]any{"requests": map[string]any{"cpu": "1"}}
	mon := func(k string) map[string]any {
		return map[string]any{"monitoring": map[string]any{k: map[string]any{"enabled": true, "labels": map[string]any{"release": "kp"}}}}
	}
	return []valueCase{
		{"attach", map[string]any{"attach": "istio"}, func(r release) error {
			return expect(len(findObj[*egv1a1.Backend](r.objs)) == 0 && len(findObj[*corev1.Service](r.objs)) == 1 && findObj[*corev1.Service](r.objs)[0].Name == "gateway-sidecar", "no sidecar")
		}},
		{"fullnameOverride", map[string]any{"fullnameOverride": "edge"}, func(r release) error {
			return expect(findObj[*appsv1.StatefulSet](r.objs)[0].Name == "edge" && findObj[*corev1.ConfigMap](r.objs)[0].Name == "edge-config", "names")
		}},
		{"config", map[string]any{"config": "region: x\n"}, func(r release) error {
			return expect(findObj[*corev1.ConfigMap](r.objs)[0].Data["gateway.yaml"] == "region: x\n", "data")
		}},
		{"image.repository", map[string]any{"image": map[string]any{"repository": "r.example/gw"}}, func(r release) error {
			return expect(strings.HasPrefix(container(gatewayPod(r), "gateway").Image, "r.example/gw:"), "%s", container(gatewayPod(r), "gateway").Image)
		}},
		{"image.tag", map[string]any{"image": map[string]any{"tag": "9"}}, func(r release) error {
			return expect(strings.HasSuffix(container(gatewayPod(r), "envoy-config").Image, ":9"), "init image")
		}},
		{"image.pullPolicy", map[string]any{"image": map[string]any{"pullPolicy": "Always"}}, func(r release) error {
			return expect(container(gatewayPod(r), "gateway").ImagePullPolicy == corev1.PullAlways, "pull policy")
		}},
		{"envoy.image.repository", map[string]any{"envoy": map[string]any{"image": map[string]any{"repository": "r.example/envoy"}}}, func(r release) error {
			return expect(strings.HasPrefix(container(gatewayPod(r), "envoy").Image, "r.example/envoy:"), "envoy image")
		}},
		{"envoy.image.tag", map[string]any{"envoy": map[string]any{"image": map[string]any{"tag": "v9"}}}, func(r release) error {
			return expect(strings.HasSuffix(container(gatewayPod(r), "envoy").Image, ":v9"), "envoy tag")
		}},
		{"envoy.image.pullPolicy", map[string]any{"envoy": map[string]any{"image": map[string]any{"pullPolicy": "Always"}}}, func(r release) error {
			return expect(container(gatewayPod(r), "envoy").ImagePullPolicy == corev1.PullAlways, "envoy pull policy")
		}},
		{"envoy.resources", map[string]any{"envoy": map[string]any{"resources": res}}, func(r release) error {
			return expect(container(gatewayPod(r), "envoy").Resources.Requests.Cpu().String() == "1", "envoy resources")
		}},
		{"existingSecret", withSink(map[string]any{"existingSecret": "vault"}), func(r release) error {
			return expect(container(gatewayPod(r), "envoy").Env[0].ValueFrom.SecretKeyRef.Name == "vault" && sinkPod(r).Containers[0].Env[1].ValueFrom.SecretKeyRef.Name == "vault", "secret")
		}},
		{"imagePullSecrets", withSink(map[string]any{"imagePullSecrets": []any{map[string]any{"name": "pull"}}}), eachPod(func(ps *corev1.PodSpec, _ metav1.ObjectMeta) bool {
			return len(ps.ImagePullSecrets) == 1 && ps.ImagePullSecrets[0].Name == "pull"
		})},
		{"replicas", map[string]any{"replicas": 3}, func(r release) error {
			return expect(*findObj[*appsv1.StatefulSet](r.objs)[0].Spec.Replicas == 3 && findObj[*autoscalingv2.HorizontalPodAutoscaler](r.objs)[0].Spec.MinReplicas != nil && *findObj[*autoscalingv2.HorizontalPodAutoscaler](r.objs)[0].Spec.MinReplicas == 3, "replicas")
		}},
		{"autoscaling.enabled", map[string]any{"autoscaling": map[string]any{"enabled": false}}, func(r release) error {
			return expect(len(findObj[*autoscalingv2.HorizontalPodAutoscaler](r.objs)) == 0, "HPA rendered")
		}},
		{"autoscaling.maxReplicas", map[string]any{"autoscaling": map[string]any{"maxReplicas": 20}}, func(r release) error {
			return expect(findObj[*autoscalingv2.HorizontalPodAutoscaler](r.objs)[0].Spec.MaxReplicas == 20, "max")
		}},
		{"resources", map[string]any{"resources": res}, func(r release) error {
			c := container(gatewayPod(r), "gateway")
			return expect(c.Resources.Requests.Cpu().String() == "1" && container(gatewayPod(r), "envoy-config").Resources.Requests.Cpu().String() == "1", "resources")
		}},
		{"nodeSelector", withSink(map[string]any{"nodeSelector": map[string]any{"pool": "gw"}}), eachPod(func(ps *corev1.PodSpec, _ metav1.ObjectMeta) bool { return ps.NodeSelector["pool"] == "gw" })},
		{"tolerations", withSink(map[string]any{"tolerations": []any{map[string]any{"key": "k", "operator": "Exists"}}}), eachPod(func(ps *corev1.PodSpec, _ metav1.ObjectMeta) bool {
			return len(ps.Tolerations) == 1 && ps.Tolerations[0].Key == "k"
		})},
		{"affinity", withSink(map[string]any{"affinity": map[string]any{"nodeAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{"weight": 1, "preference": map[string]any{}}}}}}), eachPod(func(ps *corev1.PodSpec, _ metav1.ObjectMeta) bool {
			return ps.Affinity != nil && ps.Affinity.NodeAffinity != nil && len(ps.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 1
		})},
		{"podAnnotations", withSink(map[string]any{"podAnnotations": map[string]any{"a": "b"}}), eachPod(func(_ *corev1.PodSpec, m metav1.ObjectMeta) bool { return m.Annotations["a"] == "b" })},
		{"podLabels", withSink(map[string]any{"podLabels": map[string]any{"team": "p"}}), eachPod(func(_ *corev1.PodSpec, m metav1.ObjectMeta) bool { return m.Labels["team"] == "p" })},
		{"serviceAccount.create", withSink(map[string]any{"serviceAccount": map[string]any{"create": true}}), func(r release) error {
			sas := findObj[*corev1.ServiceAccount](r.objs)
			if len(sas) != 1 || sas[0].Name != "gateway" {
				return fmt.Errorf("no ServiceAccount gateway")
			}
			return eachPod(func(ps *corev1.PodSpec, _ metav1.ObjectMeta) bool { return ps.ServiceAccountName == "gateway" })(r)
		}},
		{"serviceAccount.name", withSink(map[string]any{"serviceAccount": map[string]any{"name": "existing"}}), eachPod(func(ps *corev1.PodSpec, _ metav1.ObjectMeta) bool { return ps.ServiceAccountName == "existing" })},
		{"serviceAccount.annotations", map[string]any{"serviceAccount": map[string]any{"create": true, "annotations": map[string]any{"iam": "r"}}}, func(r release) error {
			return expect(findObj[*corev1.ServiceAccount](r.objs)[0].Annotations["iam"] == "r", "annotations")
		}},
		{"storage.size", map[string]any{"storage": map[string]any{"size": "5Gi"}}, func(r release) error {
			q := findObj[*appsv1.StatefulSet](r.objs)[0].Spec.VolumeClaimTemplates[0].Spec.Resources.Requests[corev1.ResourceStorage]
			return expect(q.String() == "5Gi", "%s", q.String())
		}},
		{"storage.storageClassName", map[string]any{"storage": map[string]any{"storageClassName": "fast"}}, func(r release) error {
			c := findObj[*appsv1.StatefulSet](r.objs)[0].Spec.VolumeClaimTemplates[0].Spec.StorageClassName
			return expect(c != nil && *c == "fast", "class")
		}},
		{"ledgerSink.enabled", sinkOn, func(r release) error {
			return expect(slices.ContainsFunc(r.objs, isSink), "no sink")
		}},
		{"ledgerSink.resources", map[string]any{"ledgerSink": map[string]any{"enabled": true, "resources": res}}, func(r release) error {
			return expect(sinkPod(r).Containers[0].Resources.Requests.Cpu().String() == "1", "sink resources")
		}},
		{"monitoring.serviceMonitor.enabled", mon("serviceMonitor"), func(r release) error { return monitorCheck(r, "ServiceMonitor") }},
		{"monitoring.serviceMonitor.interval", map[string]any{"monitoring": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "7s"}}}, func(r release) error {
			return expect(len(r.mon) == 1 && strings.Contains(fmt.Sprint(r.mon[0].spec["endpoints"]), "interval:7s"), "interval")
		}},
		{"monitoring.serviceMonitor.labels", mon("serviceMonitor"), func(r release) error {
			return expect(len(r.mon) == 1 && r.mon[0].labels["release"] == "kp", "labels")
		}},
		{"monitoring.prometheusRule.enabled", mon("prometheusRule"), func(r release) error { return monitorCheck(r, "PrometheusRule") }},
		{"monitoring.prometheusRule.labels", mon("prometheusRule"), func(r release) error {
			return expect(len(r.mon) == 1 && r.mon[0].labels["release"] == "kp", "labels")
		}},
		{"monitoring.dashboard.enabled", map[string]any{"monitoring": map[string]any{"dashboard": map[string]any{"enabled": true}}}, func(r release) error {
			return dashboardCheck(t, r, "grafana_dashboard")
		}},
		{"monitoring.dashboard.labels", map[string]any{"monitoring": map[string]any{"dashboard": map[string]any{"enabled": true, "labels": map[string]any{"dash": "yes"}}}}, func(r release) error {
			return dashboardCheck(t, r, "dash")
		}},
		{"envoyGateway.gateway.name", map[string]any{"attach": "envoy-gateway", "envoyGateway": map[string]any{"gateway": map[string]any{"name": "edge"}}}, func(r release) error {
			return expect(findObj[*egv1a1.ClientTrafficPolicy](r.objs)[0].Spec.TargetRefs[0].Name == "edge", "gateway name")
		}},
		{"envoyGateway.gateway.namespace", map[string]any{"attach": "envoy-gateway", "envoyGateway": map[string]any{"gateway": map[string]any{"namespace": "infra"}}}, func(r release) error {
			return expect(findObj[*egv1a1.ClientTrafficPolicy](r.objs)[0].Namespace == "infra", "gateway namespace")
		}},
		{"istio.namespace", map[string]any{"attach": "istio", "istio": map[string]any{"namespace": "mesh"}}, func(r release) error {
			return expect(istioFilter(r).GetNamespace() == "mesh", "namespace")
		}},
		{"istio.selector", map[string]any{"attach": "istio", "istio": map[string]any{"selector": "edge"}}, func(r release) error {
			j, _ := json.Marshal(istioFilter(r))
			return expect(strings.Contains(string(j), `"istio":"edge"`), "selector")
		}},
		{"sso.config", map[string]any{"sso": ssoValues()}, func(r release) error {
			return ssoRendered(r, "gateway-secrets", "GATEWAY_SSO_CLIENT_SECRET")
		}},
		{"sso.clientSecret.secret", map[string]any{"sso": ssoValues("secret", "idp")}, func(r release) error {
			return ssoRendered(r, "idp", "GATEWAY_SSO_CLIENT_SECRET")
		}},
		{"sso.clientSecret.key", map[string]any{"sso": ssoValues("key", "oidc")}, func(r release) error {
			return ssoRendered(r, "gateway-secrets", "oidc")
		}},
	}
}

// ssoValues is an sso value with the client secret's fields given in
// pairs (name, value).
func ssoValues(secret ...string) map[string]any {
	cs := map[string]any{}
	for i := 0; i+1 < len(secret); i += 2 {
		cs[secret[i]] = secret[i+1]
	}
	return map[string]any{
		"config": map[string]any{
			"issuer":                "https://login.example.com",
			"client_id":             "gateway",
			"client_secret_env":     "SSO_SECRET",
			"customer_redirect_url": "https://gateway.example.com/console/sso/callback",
			"roles":                 map[string]any{"gw-admins": "admin", "gw-support": "support"},
		},
		"clientSecret": cs,
	}
}

// ssoRendered checks that the rendered gateway.yaml loads with ssoValues'
// block and that the gateway container reads the client secret from the
// Secret's key into the variable the block names.
func ssoRendered(r release, secret, key string) error {
	var cm *corev1.ConfigMap
	for _, c := range findObj[*corev1.ConfigMap](r.objs) {
		if _, ok := c.Data[deploy.GatewayConfigKey]; ok {
			cm = c
		}
	}
	if cm == nil {
		return fmt.Errorf("no ConfigMap of %s", deploy.GatewayConfigKey)
	}
	cfg, err := config.Parse([]byte(cm.Data[deploy.GatewayConfigKey]))
	if err != nil {
		return err
	}
	if cfg.SSO.Issuer != "https://login.example.com" || cfg.SSO.ClientSecretEnv != "SSO_SECRET" || cfg.SSO.Roles["gw-support"] != "support" {
		return fmt.Errorf("sso block: %+v", cfg.SSO)
	}
	for _, e := range container(gatewayPod(r), "gateway").Env {
		if e.Name == "SSO_SECRET" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			return expect(ref.Name == secret && ref.Key == key, "SSO_SECRET from %s/%s", ref.Name, ref.Key)
		}
	}
	return errors.New("no SSO_SECRET in the gateway container's environment")
}

// The sso value renders into each mode's gateway.yaml and the sidecar's
// environment, and rolls the sidecar's pods; an sso block in the config
// value itself, or one without its client secret's variable, is refused.
func TestChartSSO(t *testing.T) {
	for _, mode := range []string{deploy.AttachOwn, deploy.AttachEnvoyGateway, deploy.AttachIstio} {
		r := releaseObjects(t, plainRelease, map[string]any{"attach": mode, "sso": ssoValues()})
		if err := ssoRendered(r, "gateway-secrets", "GATEWAY_SSO_CLIENT_SECRET"); err != nil {
			t.Errorf("attach: %s: %v", mode, err)
		}
		if bad := lintChart(t, map[string]any{"attach": mode, "sso": ssoValues()}); len(bad) > 0 {
			t.Errorf("attach: %s: helm lint --strict: %v", mode, bad)
		}
	}
	sums := map[string]bool{}
	for _, v := range []map[string]any{{"attach": deploy.AttachIstio}, {"attach": deploy.AttachIstio, "sso": ssoValues()}} {
		for _, s := range findObj[*appsv1.StatefulSet](releaseObjects(t, plainRelease, v).objs) {
			sums[s.Spec.Template.Annotations["checksum/config"]] = true
		}
	}
	if len(sums) != 2 {
		t.Errorf("the sidecar's checksum/config does not follow the sso value: %v", sums)
	}
	if _, err := renderChart(t, map[string]any{"config": customConfig(t) + "sso:\n  issuer: https://login.example.com\n", "sso": ssoValues()}); err == nil || !strings.Contains(err.Error(), "sso.config") {
		t.Errorf("an sso block in the config value rendered: %v", err)
	}
	noEnv := ssoValues()
	delete(noEnv["config"].(map[string]any), "client_secret_env")
	if _, err := renderChart(t, map[string]any{"sso": noEnv}); err == nil || !strings.Contains(err.Error(), "client_secret_env") {
		t.Errorf("an sso block without client_secret_env rendered: %v", err)
	}
	if _, err := renderChart(t, map[string]any{"sso": map[string]any{"config": map[string]any{"issuer": "https://x", "clientId": "g"}}}); err == nil || !strings.Contains(err.Error(), "schema") {
		t.Errorf("an unknown field of sso.config rendered: %v", err)
	}
}

// The chart's schema names exactly the fields of gateway.yaml's sso block
// (config.SSO) under sso.config: a field added to the block is one the
// chart accepts, and the schema refuses no field the gateway reads.
func TestChartSSOSchemaIsTheConfigsBlock(t *testing.T) {
	data, err := os.ReadFile(repoPath("deploy/helm/gateway/values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			SSO struct {
				Properties struct {
					Config struct {
						Properties map[string]any `json:"properties"`
					} `json:"config"`
				} `json:"properties"`
			} `json:"sso"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var fields []string
	typ := reflect.TypeFor[config.SSO]()
	for i := range typ.NumField() {
		if name, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			fields = append(fields, name)
		}
	}
	slices.Sort(fields)
	if got := slices.Sorted(maps.Keys(schema.Properties.SSO.Properties.Config.Properties)); !slices.Equal(got, fields) {
		t.Errorf("values.schema.json's sso.config names %v; config.SSO's fields are %v", got, fields)
	}
}

func istioFilter(r release) metav1.Object {
	for _, o := range r.objs {
		if o.gvk.Kind == "EnvoyFilter" {
			return o.obj.(metav1.Object)
		}
	}
	return &metav1.ObjectMeta{}
}

// monitorCheck: the ServiceMonitor scrapes the probes port of a Service
// that selects the gateway's pods; the PrometheusRule holds
// deploy/monitoring/alerts.yaml's groups.
func monitorCheck(r release, kind string) error {
	if len(r.mon) != 1 || r.mon[0].kind != kind {
		return fmt.Errorf("want one %s, got %v", kind, r.mon)
	}
	m := r.mon[0]
	switch kind {
	case "PrometheusRule":
		var want map[string]any
		data, _ := os.ReadFile(repoPath("deploy/monitoring/alerts.yaml"))
		if err := yaml.Unmarshal(data, &want); err != nil {
			return err
		}
		gj, _ := json.Marshal(m.spec)
		wj, _ := json.Marshal(want)
		return expect(bytes.Equal(gj, wj), "the PrometheusRule is not alerts.yaml:\n%s\n%s", gj, wj)
	default:
		var sel struct {
			Selector metav1.LabelSelector `json:"selector"`
		}
		j, _ := json.Marshal(m.spec)
		_ = json.Unmarshal(j, &sel)
		s, err := metav1.LabelSelectorAsSelector(&sel.Selector)
		if err != nil {
			return err
		}
		pod := findObj[*appsv1.StatefulSet](r.objs)[0].Spec.Template
		for _, svc := range findObj[*corev1.Service](r.objs) {
			if s.Matches(labels.Set(svc.Labels)) && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) &&
				len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Name == "probes" && svc.Spec.Ports[0].TargetPort.StrVal == "probes" &&
				container(&pod.Spec, "envoy").Ports[1].Name == "probes" {
				return nil
			}
		}
		return fmt.Errorf("no Service of the probes port selected by the ServiceMonitor")
	}
}

func dashboardCheck(t *testing.T, r release, label string) error {
	want := string(readRepoFile(t, "deploy/monitoring/dashboard.json"))
	for _, cm := range findObj[*corev1.ConfigMap](r.objs) {
		if cm.Name == "gateway-dashboard" {
			return expect(cm.Data["model-gateway.json"] == want && cm.Labels[label] != "", "dashboard ConfigMap")
		}
	}
	return fmt.Errorf("no dashboard ConfigMap")
}

// leaves are the paths of values.yaml's values: its scalars and lists,
// and its maps that are values whole (empty ones, labels, resources).
func leaves(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 || strings.HasSuffix(prefix, "labels") || strings.HasSuffix(prefix, "resources") {
		return []string{prefix}
	}
	var out []string
	for k, c := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, leaves(p, c)...)
	}
	return out
}

// Every value of values.yaml changes the rendering as documented (a case
// per value, and no value without one); the defaults' rendering is the
// one each case changes.
func TestChartEveryValueIsUsed(t *testing.T) {
	var vals map[string]any
	if err := yaml.Unmarshal(readRepoFile(t, deploy.ChartDir+"/values.yaml"), &vals); err != nil {
		t.Fatal(err)
	}
	cases := valueCases(t)
	byPath := map[string]bool{}
	for _, c := range cases {
		byPath[c.path] = true
	}
	for _, p := range leaves("", vals) {
		if !byPath[p] {
			t.Errorf("values.yaml %s: no test that it changes the rendering", p)
		}
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			base := map[string]any{}
			if a, ok := c.values["attach"]; ok && c.path != "attach" {
				base["attach"] = a
			}
			if _, ok := c.values["ledgerSink"]; ok {
				base["ledgerSink"] = sinkOn["ledgerSink"]
			}
			if c.path == "ledgerSink.enabled" {
				delete(base, "ledgerSink")
			}
			if err := safeCheck(c.check, releaseObjects(t, plainRelease, base)); err == nil {
				t.Errorf("already so without the value")
			}
			if err := safeCheck(c.check, releaseObjects(t, plainRelease, c.values)); err != nil {
				t.Errorf("%v: %v", c.values, err)
			}
		})
	}
}

// safeCheck runs a check, an object it looks for and does not find (an
// index out of range) an error.
func safeCheck(check func(release) error, r release) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%v", p)
		}
	}()
	return check(r)
}

// docs/deployment.md's values table names every value of values.yaml.
func TestChartValuesDocumented(t *testing.T) {
	var vals map[string]any
	if err := yaml.Unmarshal(readRepoFile(t, deploy.ChartDir+"/values.yaml"), &vals); err != nil {
		t.Fatal(err)
	}
	doc := string(readRepoFile(t, "docs/deployment.md"))
	for _, p := range leaves("", vals) {
		if !strings.Contains(doc, "| `"+p+"` |") {
			t.Errorf("docs/deployment.md: the values table has no row for %s", p)
		}
	}
}
