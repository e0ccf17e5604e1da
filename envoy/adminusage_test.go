package envoy_test

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/envoy"
)

// An admin key is a secret of Envoy's, injected by a cluster of its own at
// the primary endpoint, which only the relay's GET route of the vendor's
// usage reports uses; pooled or not.
func TestRenderAdminKey(t *testing.T) {
	for _, name := range []string{"pooled", "single"} {
		cfg := load(t)
		if name == "pooled" {
			cfg = pooled(t)
		}
		cfg.Upstreams[0].AdminCredentialEnv = "ALPHA_ADMIN_KEY"
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		b, err := envoy.Render(cfg, envoy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		cs := clusters(t, b)
		admin, ok := cs[envoy.AdminCluster("alpha")]
		if !ok {
			t.Fatalf("%s: no admin cluster", name)
		}
		if n := len(admin.LoadAssignment.Endpoints); n != 1 {
			t.Errorf("%s: the admin cluster has %d priorities, want the primary alone", name, n)
		}
		s := string(b)
		for _, want := range []string{
			"name: alpha-admin-key\n    generic_secret:\n      secret: {environment_variable: ALPHA_ADMIN_KEY}",
			"prefix: /alpha/v1/organizations/usage_report/",
			"prefix: /alpha/v1/organizations/cost_report",
			"cluster: " + envoy.AdminCluster("alpha") + "\n",
		} {
			if !strings.Contains(s, want) {
				t.Errorf("%s: the bootstrap lacks %q", name, want)
			}
		}
		if n := strings.Count(s, "cluster: "+envoy.AdminCluster("alpha")+"\n"); n != len(envoy.UsageReportPrefixes(cfg.Upstreams[0].Format)) {
			t.Errorf("%s: %d routes use the admin cluster; want the relay's report routes alone", name, n)
		}
		if _, ok := cs[envoy.AdminCluster("beta")]; ok {
			t.Errorf("%s: beta has an admin cluster without an admin key", name)
		}
	}
}
