package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"

	"github.com/modelgateway/gateway/internal/roles"
)

// SSO signs people in to the consoles with an OpenID Connect provider
// (docs/console.md). Unset (no issuer), both consoles sign in with tokens
// as before.
type SSO struct {
	// Issuer is the provider's issuer URL; its discovery document is read
	// from Issuer/.well-known/openid-configuration.
	Issuer   string `yaml:"issuer"`
	ClientID string `yaml:"client_id"`
	// ClientSecretEnv names the environment variable holding the client
	// secret; the secret is never in this file.
	ClientSecretEnv string `yaml:"client_secret_env"`
	// CustomerRedirectURL is the customer console's callback as the
	// provider reaches it through Envoy (https://HOST/console/sso/callback);
	// unset, the customer console signs in with tokens only.
	CustomerRedirectURL string `yaml:"customer_redirect_url"`
	// OperatorRedirectURL is the operator console's callback
	// (http://127.0.0.1:8082/sso/callback); unset, the operator console
	// signs in with the admin token only.
	OperatorRedirectURL string `yaml:"operator_redirect_url"`
	// Scopes asked for; openid is always among them.
	Scopes []string `yaml:"scopes"`
	// RolesClaim is the ID token's claim listing the person's groups (a
	// string or a list of strings).
	RolesClaim string `yaml:"roles_claim"`
	// Roles maps a value of RolesClaim to a role: owner, admin, member,
	// billing, viewer (customer console) or operator, support (operator
	// console). Values not listed grant nothing.
	Roles map[string]roles.Role `yaml:"roles"`
	// AccountClaim is the ID token's claim naming the account a customer's
	// person belongs to.
	AccountClaim string `yaml:"account_claim"`
}

// Enabled reports whether single sign-on is configured.
func (s SSO) Enabled() bool { return s.Issuer != "" }

func (s *SSO) defaults() {
	if !s.Enabled() {
		return
	}
	if len(s.Scopes) == 0 {
		s.Scopes = []string{"openid", "profile", "email", "groups"}
	}
	def(&s.RolesClaim, "groups")
	def(&s.AccountClaim, "gateway_account")
}

func (s SSO) validate() error {
	if !s.Enabled() {
		if s.ClientID != "" || s.CustomerRedirectURL != "" || s.OperatorRedirectURL != "" || len(s.Roles) > 0 {
			return errors.New("sso: issuer is required")
		}
		return nil
	}
	if err := secureURL("sso.issuer", s.Issuer); err != nil {
		return err
	}
	if s.ClientID == "" || s.ClientSecretEnv == "" {
		return errors.New("sso: client_id and client_secret_env are required")
	}
	if s.CustomerRedirectURL == "" && s.OperatorRedirectURL == "" {
		return errors.New("sso: customer_redirect_url or operator_redirect_url is required")
	}
	for field, v := range map[string]string{"sso.customer_redirect_url": s.CustomerRedirectURL, "sso.operator_redirect_url": s.OperatorRedirectURL} {
		if v != "" {
			if err := secureURL(field, v); err != nil {
				return err
			}
		}
	}
	if len(s.Roles) == 0 {
		return errors.New("sso: roles must map at least one group to a role")
	}
	for group, r := range s.Roles {
		if !roles.Valid(r) {
			return fmt.Errorf("sso.roles[%q]: %q is not a role (owner, admin, member, billing, viewer, operator, support)", group, r)
		}
	}
	return nil
}

// secureURL checks that v is an absolute https URL, or http to a loopback
// host (a provider or console on this machine).
func secureURL(field, v string) error {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%s: %q is not an absolute URL", field, v)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		host := u.Hostname()
		if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
			return nil
		}
	}
	return fmt.Errorf("%s: %q must be https (http only to a loopback host)", field, v)
}
