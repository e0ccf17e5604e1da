package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// `gateway envoy-config --merge-into` on the three bootstraps of a platform
// team (envoy/testdata/merge: its own listener and routes, its own extproc
// and control clusters, its own routes on the same virtual host in JSON)
// writes configurations Envoy accepts, in either contract; without a
// prefix, the one whose names collide is refused and nothing is written.
func TestMergedBootstrapsPassEnvoyValidate(t *testing.T) {
	skipShort(t)
	root := launchtest.RepoRoot(t)
	bin := launchtest.Binary(t, "gateway")
	c, err := config.Load(filepath.Join(root, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c.Envoy.Contract = config.ContractReduced
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	reduced := filepath.Join(t.TempDir(), "reduced.yaml")
	if err := os.WriteFile(reduced, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"own-listener.yaml", "own-clusters.yaml", "same-vhost.json"} {
		for _, cfg := range []string{filepath.Join(root, "gateway.yaml"), reduced} {
			cmd := exec.Command(bin, "envoy-config", "--config", cfg, "--merge-into", filepath.Join(root, "envoy/testdata/merge", file))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("merge into %s: %v\n%s", file, err, stderr(err))
			}
			launchtest.EnvoyValidate(t, strings.TrimSuffix(filepath.Base(cfg), ".yaml")+"-"+file, out)
		}
	}
	cmd := exec.Command(bin, "envoy-config", "--config", filepath.Join(root, "gateway.yaml"), "--name-prefix", "",
		"--merge-into", filepath.Join(root, "envoy/testdata/merge/own-clusters.yaml"))
	out, err := cmd.Output()
	if err == nil || len(out) != 0 || !strings.Contains(stderr(err), "cluster extproc is already in your bootstrap") {
		t.Errorf("without a prefix: %v, %d bytes written\n%s", err, len(out), stderr(err))
	}
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
