package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// healthcheckCmd probes the control server's /readyz (or another URL): a
// health check for containers whose image has no shell or curl. /readyz,
// not /health: a vendor outage must not mark every gateway container
// unhealthy.
func healthcheckCmd() *cobra.Command {
	var url string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "healthcheck",
		Short: "Exit 0 when the sidecar is ready (GET /readyz answers 200)",
		RunE: func(cmd *cobra.Command, args []string) error {
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
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Second, "timeout")
	return cmd
}
