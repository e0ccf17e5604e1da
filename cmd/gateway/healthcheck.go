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
// cannot reach: the control server's /health, or with --grpc the
// grpc.health.v1 service of the ext_proc server.
func healthcheckCmd() *cobra.Command {
	var url, grpcAddr string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the sidecar's /health says ok (or, with --grpc, its gRPC health says SERVING)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if grpcAddr != "" {
				return grpcHealth(grpcAddr, timeout)
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
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8081/health", "health URL")
	cmd.Flags().StringVar(&grpcAddr, "grpc", "", "host:port of the ext_proc server: ask grpc.health.v1 instead of /health")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "timeout")
	return cmd
}

func grpcHealth(addr string, timeout time.Duration) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		return fmt.Errorf("%s: %w", addr, err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%s: %s", addr, resp.GetStatus())
	}
	return nil
}
