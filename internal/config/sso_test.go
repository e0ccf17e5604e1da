package config

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/roles"
)

const ssoOK = "sso: {issuer: \"https://idp.example.com\", client_id: gw, client_secret_env: SSO_SECRET, " +
	"customer_redirect_url: \"https://gw.example.com/console/sso/callback\", roles: {finance: billing}}\n"

func TestSSO(t *testing.T) {
	c, err := Parse([]byte(minimal + ssoOK))
	if err != nil {
		t.Fatal(err)
	}
	if !c.SSO.Enabled() || c.SSO.RolesClaim != "groups" || c.SSO.AccountClaim != "gateway_account" ||
		strings.Join(c.SSO.Scopes, " ") != "openid profile email groups" || c.SSO.Roles["finance"] != roles.Billing {
		t.Errorf("sso with defaults: %+v", c.SSO)
	}
	if c, err := Parse([]byte(minimal)); err != nil || c.SSO.Enabled() || c.SSO.Scopes != nil {
		t.Errorf("no sso: %+v, %v", c.SSO, err)
	}
	for name, tc := range map[string]struct{ yaml, want string }{
		"no issuer":      {"sso: {client_id: gw}\n", "sso: issuer"},
		"plain http":     {strings.Replace(ssoOK, "https://idp.example.com", "http://idp.example.com", 1), "sso.issuer"},
		"no secret env":  {strings.Replace(ssoOK, "client_secret_env: SSO_SECRET, ", "", 1), "client_secret_env"},
		"no redirect":    {strings.Replace(ssoOK, "customer_redirect_url: \"https://gw.example.com/console/sso/callback\", ", "", 1), "redirect_url"},
		"unknown role":   {strings.Replace(ssoOK, "finance: billing", "finance: accountant", 1), `sso.roles["finance"]`},
		"no roles":       {strings.Replace(ssoOK, ", roles: {finance: billing}", "", 1), "sso: roles"},
		"relative url":   {strings.Replace(ssoOK, "https://gw.example.com/console/sso/callback", "/console/sso/callback", 1), "sso.customer_redirect_url"},
		"negative audit": {minimal + "store: {audit_retention: -1h}\n", "store.audit_retention"},
	} {
		_, err := Parse([]byte(minimal + tc.yaml))
		if strings.HasPrefix(tc.yaml, minimal) {
			_, err = Parse([]byte(tc.yaml))
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
	// http to loopback is allowed: a provider or console on this machine.
	if _, err := Parse([]byte(minimal + strings.Replace(ssoOK, "https://idp.example.com", "http://127.0.0.1:5556", 1))); err != nil {
		t.Errorf("a loopback issuer: %v", err)
	}
}
