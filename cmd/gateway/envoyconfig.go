package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
)

func envoyConfigCmd() *cobra.Command {
	var (
		cfgPath, out string
		o            envoy.Options
		endpoints    []string
	)
	cmd := &cobra.Command{
		Use:   "envoy-config",
		Short: "Render the Envoy bootstrap from gateway.yaml",
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			for _, e := range endpoints {
				name, url, ok := strings.Cut(e, "=")
				u, found := cfg.Upstream(name)
				if !ok || !found || url == "" {
					return fmt.Errorf("--endpoint %q: want NAME=URL with NAME an upstream of %s", e, cfgPath)
				}
				u.Primary.URL, u.Reserve.URL = url, url
			}
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("--endpoint: %w", err)
			}
			b, err := envoy.Render(cfg, o)
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
	return cmd
}
