// Command gen writes the generated Kubernetes manifests: the ConfigMaps for
// gateway.yaml and the pod's Envoy bootstrap (deploy/k8s/configmaps.yaml) and
// the matching checksum annotation and shutdown bounds in
// deploy/k8s/statefulset.yaml; then the control-plane renderings
// (deploy/sidecar, deploy/envoy-gateway, deploy/istio) and the Helm chart's
// templates (deploy/helm/gateway/templates), which include deploy/k8s.
//
//	cd deploy && go run ./gen -root ..   (make envoy-config, make deploy-render)
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/modelgateway/gateway/deploy"
)

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	files, err := deploy.Generate(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	write(*root, files)
	// The chart's own-mode templates are read from deploy/k8s, just written.
	cp, err := deploy.GenerateControlPlanes(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	write(*root, cp)
}

func write(root string, files map[string][]byte) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, p)
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, files[p]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(full, files[p], 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		fmt.Println("wrote", p)
	}
}
