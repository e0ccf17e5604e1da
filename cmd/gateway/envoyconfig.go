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
	f.StringVar(&composeRoot, "compose", "", "write the docker-compose bootstraps (envoy/envoy.yaml, envoy/envoy-demo.yaml, envoy/envoy-observability.yaml) under this repository `root` instead")
	return cmd
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
