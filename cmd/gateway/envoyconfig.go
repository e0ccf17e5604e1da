package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

func envoyConfigCmd() *cobra.Command {
	var (
		cfgPath, out, composeRoot string
		o                         envoy.Options
		endpoints                 []string
		fragment                  bool
		mergeInto                 string
		mo                        envoy.MergeOptions
	)
	cmd := &cobra.Command{
		Use:   "envoy-config",
		Short: "Render the Envoy bootstrap from gateway.yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			if composeRoot != "" {
				return writeCompose(cfg, composeRoot)
			}
			urls := map[string]string{}
			for _, e := range endpoints {
				name, url, _ := strings.Cut(e, "=")
				urls[name] = url
			}
			if err := envoy.PointEndpoints(cfg, urls); err != nil {
				return fmt.Errorf("--endpoint: %w", err)
			}
			if mergeInto != "" {
				return merge(cmd, cfg, o, mergeInto, mo, out)
			}
			render := envoy.Render
			if fragment {
				render = envoy.RenderFragment
			}
			b, err := render(cfg, o)
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				_, err = os.Stdout.Write(b)
				return err
			}
			return os.WriteFile(out, b, 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfgPath, "config", "gateway.yaml", "path of gateway.yaml")
	f.StringVarP(&out, "output", "o", "-", "file to write, - for stdout")
	f.StringVar(&o.ExtProcAddr, "extproc-addr", "", "host:port where Envoy reaches the sidecar's ext_proc server (default: listeners.extproc)")
	f.StringVar(&o.ControlAddr, "control-addr", "", "host:port where Envoy reaches the sidecar's control server (default: listeners.control)")
	f.StringVar(&o.PublicAddr, "public-addr", "", "Envoy's public listener (default: listeners.public)")
	f.StringVar(&o.AdminAddr, "admin-addr", "", "Envoy's admin listener (default: listeners.envoy_admin)")
	f.StringVar(&o.ProbesAddr, "probes-addr", "", "Envoy's read-only probes listener: /ready, /stats/prometheus, /metrics (default: listeners.probes)")
	f.BoolVar(&o.Bare, "bare", false, "render without the ext_proc filter (benchmark reference)")
	f.StringVar(&o.NodeID, "node-id", "", "Envoy node id")
	f.StringArrayVar(&endpoints, "endpoint", nil, "NAME=URL: point both endpoints (primary and reserve) of upstream NAME at URL; repeatable")
	f.BoolVar(&fragment, "fragment", false, "print only the pieces to merge into an Envoy of your own (filter, routes, clusters, relay listener, settings, local replies; docs/envoy.md)")
	f.StringVar(&mergeInto, "merge-into", "", "merge the gateway into your own Envoy bootstrap at this `file` (YAML or JSON) and print the result; conflicts are refused, not overwritten (docs/envoy.md)")
	f.StringVar(&mo.NamePrefix, "name-prefix", envoy.DefaultNamePrefix, "with --merge-into: put before every name the gateway adds (clusters, listener, secrets, routes, filter), but the upstreams' clusters (upstreams[].envoy_cluster)")
	f.StringVar(&mo.Listener, "listener", "", "with --merge-into: your listener the clients reach (default: the only one with an HTTP connection manager)")
	f.StringVar(&mo.VirtualHost, "virtual-host", "", `with --merge-into: the virtual host that gets the gateway's routes (default: the one serving "*")`)
	f.StringVar(&composeRoot, "compose", "", "write the docker-compose bootstraps (envoy/envoy.yaml, envoy/envoy-demo.yaml, envoy/envoy-observability.yaml) under this repository `root` instead")
	return cmd
}

// merge writes the bootstrap at path with the gateway merged in, and says
// on stderr what is left to do by hand.
func merge(cmd *cobra.Command, cfg *config.Config, o envoy.Options, path string, mo envoy.MergeOptions, out string) error {
	own, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--merge-into: %w", err)
	}
	m, err := envoy.Merge(own, cfg, o, mo)
	if err != nil {
		return fmt.Errorf("--merge-into %s: %w", path, err)
	}
	for _, n := range m.Notes {
		fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
	}
	if out == "" || out == "-" {
		_, err = cmd.OutOrStdout().Write(m.Bootstrap)
		return err
	}
	return os.WriteFile(out, m.Bootstrap, 0o644)
}

// writeCompose renders every docker-compose bootstrap under root.
func writeCompose(cfg *config.Config, root string) error {
	for _, f := range envoy.Compose {
		b, err := f.Render(cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		if err := os.WriteFile(filepath.Join(root, f.Path), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
