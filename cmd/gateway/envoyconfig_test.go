package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --merge-into writes the merged bootstrap to --output and says on stderr
// what is left to do by hand; a conflict writes nothing.
func TestEnvoyConfigMergeInto(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "own.yaml")
	if err := os.WriteFile(own, []byte(`static_resources:
  listeners:
  - name: edge
    address: {socket_address: {address: 0.0.0.0, port_value: 10000}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: edge
          route_config: {virtual_hosts: [{name: all, domains: ["*"]}]}
          http_filters: [{name: envoy.filters.http.router}]
  clusters: [{name: llm-control}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, error) {
		cmd := envoyConfigCmd()
		var stderr bytes.Buffer
		cmd.SetErr(&stderr)
		cmd.SetArgs(append([]string{"--config", "../../gateway.yaml", "--merge-into", own}, args...))
		err := cmd.Execute()
		return stderr.String(), err
	}
	out := filepath.Join(dir, "merged.yaml")
	stderr, err := run("-o", out)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(b), "name: gateway_extproc") || !strings.Contains(string(b), "name: edge") {
		t.Errorf("merged bootstrap: %v\n%s", err, b)
	}
	if !strings.Contains(stderr, "note: your bootstrap has no admin interface") {
		t.Errorf("stderr %q, want the note on the admin interface", stderr)
	}
	conflict := filepath.Join(dir, "conflict.yaml")
	if _, err := run("--name-prefix", "llm-", "-o", conflict); err == nil || !strings.Contains(err.Error(), "cluster llm-control is already in your bootstrap") {
		t.Errorf("err %v, want the conflict", err)
	}
	if _, err := os.Stat(conflict); !os.IsNotExist(err) {
		t.Errorf("a refused merge wrote %s: %v", conflict, err)
	}
}
