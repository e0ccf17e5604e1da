package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthcheckCmd probes the sidecar from inside its container, for images
// without a shell or curl and for listeners on loopback that the kubelet
// cannot reach: the control server's /readyz (or another URL), or with
// --grpc the grpc.health.v1 service of the ext_proc server. /readyz, not
// /health: a vendor outage must not mark every gateway container unhealthy.
func healthcheckCmd() *cobra.Command {
	var url, grpcAddr, grpcService string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the sidecar is ready (GET /readyz answers 200; with --grpc, its gRPC health says SERVING)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if grpcAddr != "" {
				return grpcHealth(grpcAddr, grpcService, timeout)
			}
			client := &http.Client{Timeout: timeout}
			resp, err := client.Get(url)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", url, resp.Status)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8081/readyz", "readiness URL (/readyz: processor serving and store answering; /livez: process alive; /health: the whole record, upstreams included)")
	cmd.Flags().StringVar(&grpcAddr, "grpc", "", "host:port of the ext_proc server: ask grpc.health.v1 instead")
	cmd.Flags().StringVar(&grpcService, "grpc-service", "", `gRPC health service: "" (the process serves), gateway.store (the store answers) or gateway.ready (both)`)
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "timeout")
	return cmd
}

func grpcHealth(addr, service string, timeout time.Duration) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s: %s", addr, resp.GetStatus())
	}
	return nil
}
