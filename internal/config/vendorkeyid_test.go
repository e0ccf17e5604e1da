package config

import (
	"strings"
	"testing"
)

// The vendor's key ids: the single key's from the upstream, a pool's per
// key, each unique and plain; the admin key is named by its variable.
func TestVendorKeyIDs(t *testing.T) {
	single := strings.Replace(minimal, "credential_env: ALPHA_API_KEY", "credential_env: ALPHA_API_KEY\n    vendor_key_id: apikey_01A\n    admin_credential_env: ALPHA_ADMIN_KEY", 1)
	c, err := Parse([]byte(single))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Upstreams[0].Keys(); len(k) != 1 || k[0].VendorKeyID != "apikey_01A" || c.Upstreams[0].AdminCredentialEnv != "ALPHA_ADMIN_KEY" {
		t.Fatalf("keys %+v", k)
	}
	pool := strings.Replace(minimal, "credential_env: ALPHA_API_KEY", "keys:\n      - {name: k1, env: K1, vendor_key_id: key_a}\n      - {name: k2, env: K2, vendor_key_id: key_b}", 1)
	c, err = Parse([]byte(pool))
	if err != nil {
		t.Fatal(err)
	}
	if k := c.Upstreams[0].Keys(); k[0].VendorKeyID != "key_a" || k[1].VendorKeyID != "key_b" {
		t.Fatalf("keys %+v", k)
	}
	for name, c := range map[string]struct{ yaml, want string }{
		"twice":         {strings.Replace(pool, "vendor_key_id: key_b", "vendor_key_id: key_a", 1), "keys[1].vendor_key_id"},
		"not plain":     {strings.Replace(pool, "vendor_key_id: key_b", "vendor_key_id: \"key b\"", 1), "keys[1].vendor_key_id"},
		"pool and one":  {strings.Replace(pool, "keys:", "vendor_key_id: key_c\n    keys:", 1), "upstreams[0]: vendor_key_id and keys"},
		"bad upstream":  {strings.Replace(single, "apikey_01A", "\"a/b\"", 1), "upstreams[0].vendor_key_id"},
		"bad admin env": {strings.Replace(single, "ALPHA_ADMIN_KEY", "\"1-x\"", 1), "upstreams[0].admin_credential_env"},
	} {
		_, err := Parse([]byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
}
