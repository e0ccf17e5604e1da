package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/test/launch"
)

func TestPairedDiff(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want string
	}{
		{nil, "—"},
		{[]float64{3, -1, 10}, "+3 (-1 to +10), higher in 2 of 3"},
		{[]float64{4, -2, 8, 0}, "+2 (-2 to +8), higher in 2 of 4"},
	} {
		if got := pairedDiff(c.in); got != c.want {
			t.Errorf("pairedDiff(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

// The anatomy's middle stack must really differ from the rendered pool in
// its aggregates' upstream filters only.
func TestStaticCredentialPool(t *testing.T) {
	root, err := launch.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(root, "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Upstreams {
		u := &cfg.Upstreams[i]
		u.CredentialEnv = ""
		for _, k := range launch.PoolKeys(3) {
			u.VendorKeys = append(u.VendorKeys, config.VendorKey{Name: k, Env: strings.ToUpper(u.Name + "_KEY_" + k), Weight: 1})
		}
	}
	boot, err := staticCredentialPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s := string(boot)
	for _, absent := range []string{"envoy.filters.http.composite", "x-gateway-serving-key"} {
		if strings.Contains(s, absent) {
			t.Errorf("bootstrap still has %s", absent)
		}
	}
	for _, present := range []string{"alpha-vendor-key-k1", "beta-vendor-key-k1", "cluster_header: x-gateway-key-cluster", "alpha--k3--reserve"} {
		if !strings.Contains(s, present) {
			t.Errorf("bootstrap lacks %s", present)
		}
	}
}

func TestRoundOrder(t *testing.T) {
	if got := fmt.Sprint(roundOrder(0, 3), roundOrder(1, 3), roundOrder(2, 2)); got != "[0 1 2] [2 1 0] [0 1]" {
		t.Errorf("round orders %s", got)
	}
}
