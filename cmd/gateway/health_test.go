package main

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/eventually"
)

// listeners.health answers a kubelet's grpc probe (plaintext, no client
// certificate): the empty service says the process serves, whatever the
// store does; gateway.ready and gateway.store follow the store, down and
// back; shut down, nothing says SERVING. It serves nothing but health.
func TestHealthListenerFollowsTheStore(t *testing.T) {
	mr := miniredis.RunT(t)
	sc := testSidecarOn(t, mr, "", config.Listeners{Health: "127.0.0.1:0"})
	if sc.HealthAddr == nil {
		t.Fatal("listeners.health set, not served")
	}
	conn, err := grpc.NewClient(sc.HealthAddr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil {
			return healthpb.HealthCheckResponse_UNKNOWN
		}
		return r.GetStatus()
	}
	is := func(want healthpb.HealthCheckResponse_ServingStatus, services ...string) func() (bool, string) {
		return func() (bool, string) {
			saw := ""
			for _, s := range services {
				got := status(s)
				saw += s + "=" + got.String() + " "
				if got != want {
					return false, saw
				}
			}
			return true, saw
		}
	}
	serving, notServing := healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING
	eventually.That(t, 10*time.Second, "every service serving", is(serving, "", envoy.StoreHealthService, envoy.ReadyHealthService))

	mr.Close()
	eventually.That(t, 10*time.Second, "the store's services down with the store", is(notServing, envoy.StoreHealthService, envoy.ReadyHealthService))
	if got := status(""); got != serving {
		t.Errorf(`"" (liveness) is %v with the store down; a store outage must not restart the process`, got)
	}
	if err := mr.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually.That(t, 10*time.Second, "the store's services back", is(serving, envoy.StoreHealthService, envoy.ReadyHealthService))

	// Health alone: the ext_proc service is not on this port.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, "/envoy.service.ext_proc.v3.ExternalProcessor/Process", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); err == nil {
		t.Error("the health listener served ext_proc")
	}

	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	sc.Shutdown(sctx)
	if got := status(envoy.ReadyHealthService); got == serving {
		t.Error("gateway.ready SERVING after shutdown")
	}
}

// Without listeners.health, nothing more is bound.
func TestHealthListenerOffByDefault(t *testing.T) {
	if sc := testSidecar(t, ""); sc.HealthAddr != nil {
		t.Fatalf("health served on %v without listeners.health", sc.HealthAddr)
	}
}
