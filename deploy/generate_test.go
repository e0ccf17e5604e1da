package deploy_test

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

// The checked-in generated manifests are exactly what the generator writes.
func TestGeneratedManifestsAreCurrent(t *testing.T) {
	files, err := deploy.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{deploy.ConfigMapsFile, deploy.WorkloadFile} {
		want, ok := files[p]
		if !ok {
			t.Fatalf("generator wrote no %s", p)
		}
		if got := readRepoFile(t, p); !bytes.Equal(got, want) {
			t.Errorf("%s has drifted from gateway.yaml and the Envoy template: run `make envoy-config`", p)
		}
	}
	if len(files) != 2 {
		t.Errorf("generator writes %d files; this test knows 2", len(files))
	}
}

// The ConfigMaps, decoded as Kubernetes decodes them, hold gateway.yaml
// byte for byte and the pod's rendering of the Envoy bootstrap, which Envoy
// accepts.
func TestConfigMapsHoldTheFiles(t *testing.T) {
	maps := map[string]*corev1.ConfigMap{}
	for _, o := range decodeManifests(t) {
		if cm, ok := o.obj.(*corev1.ConfigMap); ok && o.file == deploy.ConfigMapsFile {
			maps[cm.Name] = cm
		}
	}
	gw, env := maps[deploy.GatewayConfigMap], maps[deploy.EnvoyConfigMap]
	if gw == nil || env == nil || len(maps) != 2 {
		t.Fatalf("%s: want ConfigMaps %s and %s, have %v", deploy.ConfigMapsFile, deploy.GatewayConfigMap, deploy.EnvoyConfigMap, maps)
	}
	if got, want := gw.Data[deploy.GatewayConfigKey], string(readRepoFile(t, "gateway.yaml")); got != want {
		t.Errorf("ConfigMap %s differs from gateway.yaml", gw.Name)
	}
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := envoy.Render(cfg, deploy.PodEnvoyOptions)
	if err != nil {
		t.Fatal(err)
	}
	boot := env.Data[deploy.EnvoyConfigKey]
	if boot != string(want) {
		t.Errorf("ConfigMap %s differs from the rendered bootstrap", env.Name)
	}
	envoyValidate(t, "pod-envoy.yaml", []byte(boot))

	// Generating twice from the same inputs gives the same bytes.
	a, err := deploy.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := deploy.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a[deploy.ConfigMapsFile], b[deploy.ConfigMapsFile]) {
		t.Error("generator output is not deterministic")
	}
}

// A stale checksum annotation is rewritten, not duplicated; a manifest
// without one is an error.
func TestGenerateChecksumAnnotation(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"gateway.yaml", deploy.WorkloadFile} {
		if err := os.MkdirAll(filepath.Join(dir, path.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		data := readRepoFile(t, p)
		if p == deploy.WorkloadFile {
			data = bytes.Replace(data, []byte("checksum/config: \""), []byte("checksum/config: \"stale"), 1)
		}
		if err := os.WriteFile(filepath.Join(dir, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, err := deploy.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files[deploy.WorkloadFile], readRepoFile(t, deploy.WorkloadFile)) {
		t.Error("the stale annotation was not rewritten to the current checksum")
	}
	if err := os.WriteFile(filepath.Join(dir, deploy.WorkloadFile), []byte("kind: Deployment\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := deploy.Generate(dir); err == nil {
		t.Error("a deployment without the checksum annotation was accepted")
	}
}
