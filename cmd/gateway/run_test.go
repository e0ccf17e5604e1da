package main

import (
	"strings"
	"testing"
)

// A drill needs distinct primary and reserve servers: flags win over the
// per-endpoint variables, which win over the shared base URL.
func TestCustomEndpoints(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		name             string
		env, flags       map[string]string
		primary, reserve string
		err              string
	}{
		{name: "none"},
		{name: "base for both", env: map[string]string{"ALPHA_BASE_URL": "http://a:1"}, primary: "http://a:1", reserve: "http://a:1"},
		{name: "distinct from env", env: map[string]string{"ALPHA_PRIMARY_URL": "http://p:1", "ALPHA_RESERVE_URL": "http://r:2"}, primary: "http://p:1", reserve: "http://r:2"},
		{name: "reserve over base", env: map[string]string{"ALPHA_BASE_URL": "http://a:1", "ALPHA_RESERVE_URL": "http://r:2"}, primary: "http://a:1", reserve: "http://r:2"},
		{name: "flags win", env: map[string]string{"ALPHA_PRIMARY_URL": "http://p:1"}, flags: map[string]string{"alpha.primary": "http://f:1", "alpha.reserve": "http://g:2"}, primary: "http://f:1", reserve: "http://g:2"},
		{name: "reserve alone", env: map[string]string{"ALPHA_RESERVE_URL": "http://r:2"}, err: "without a primary"},
		{name: "bad url", flags: map[string]string{"alpha.primary": "ftp://x"}, err: "scheme"},
	} {
		env = tc.env
		p, r, err := customEndpoints("alpha", getenv, tc.flags)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || p != tc.primary || r != tc.reserve {
			t.Errorf("%s: %q %q %v; want %q %q", tc.name, p, r, err, tc.primary, tc.reserve)
		}
	}
}
