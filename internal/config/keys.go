package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// VendorKey is one vendor credential of an upstream's pool: a name (the
// only thing the sidecar, its logs, metrics, ledger and admin API ever see)
// and where Envoy reads the secret. Exactly one of Env, File and SDS.
type VendorKey struct {
	// Name identifies the key: lowercase letters, digits and '_', at most
	// 32; unique within the upstream.
	Name string `yaml:"name"`
	// Env is the environment variable Envoy reads the secret from.
	Env string `yaml:"env"`
	// File is a file Envoy reads the secret from (a mounted secret).
	File string `yaml:"file"`
	// SDS is a file-based SDS resource (a YAML or JSON DiscoveryResponse
	// holding one generic secret named after the key's secret, see
	// docs/configuration.md); Envoy reloads it when it changes.
	SDS string `yaml:"sds"`
	// Weight shares the sessions among the pool's keys (rendezvous
	// hashing); default 1.
	Weight int `yaml:"weight"`
	// Accounts pins the key to these accounts: only they use it, and they
	// use only the keys pinned to them (a pool of their own).
	Accounts []string `yaml:"accounts"`
	// VendorKeyID is the vendor's own id of the key (OpenAI's key_…,
	// Anthropic's apikey_…), by which its usage reports name the key; not
	// a secret. Empty: the key's usage is not reconciled.
	VendorKeyID string `yaml:"vendor_key_id"`
}

// Pool tunes how an upstream's keys are shared.
type Pool struct {
	// CoolDown is how long a key that answered 429, 529 or a quota error is
	// left out when the vendor's reply says no retry-after; it doubles
	// with each consecutive cool-down, at most MaxCoolDown. Default 10s.
	CoolDown Duration `yaml:"cool_down"`
	// MaxCoolDown bounds a cool-down, a vendor's retry-after included.
	// Default 5m.
	MaxCoolDown Duration `yaml:"max_cool_down"`
	// ProbeInterval is how long a key the vendor refused as invalid or out
	// of credit (401, 402, 403) stays out before one request tries it
	// again. Default 10m.
	ProbeInterval Duration `yaml:"probe_interval"`
	// MaxKeys bounds how many keys one request tries: a refusal the
	// vendor's evidence blames on the key is retried on the next key until
	// this many were tried. Default 2.
	MaxKeys int `yaml:"max_keys"`
	// CorroborateAccounts is how many accounts must draw the same refusal
	// without evidence (a 429 with room left, a 401 or 403 that names no
	// bad key) on one key within CorroborateWindow before the key is
	// blamed. Default 2.
	CorroborateAccounts int `yaml:"corroborate_accounts"`
	// CorroborateWindow is that window, and the one AccountRefusals counts
	// in. Default 1m.
	CorroborateWindow Duration `yaml:"corroborate_window"`
	// AccountRefusals is how many refusals that blame no key an account may
	// draw within CorroborateWindow; the next of its requests on the
	// upstream are refused (429) for that window. Default 5.
	AccountRefusals int `yaml:"account_refusals"`
	// ShareBelow is the vendor headroom (the lowest remaining fraction of
	// a key's rate limits its replies report) under which each account
	// gets at most an equal share of the pool's requests of the last
	// 10 s; the rest of its requests are refused (429). Default 0.2.
	ShareBelow float64 `yaml:"share_below"`
}

// DefaultKeyName names the one key of an upstream configured with
// credential_env (or with no credential at all).
const DefaultKeyName = "default"

// Keys are the upstream's vendor keys: those listed under keys, else one
// named "default" read from credential_env (no secret when that is empty).
func (u *Upstream) Keys() []VendorKey {
	if len(u.VendorKeys) > 0 {
		return u.VendorKeys
	}
	return []VendorKey{{Name: DefaultKeyName, Env: u.CredentialEnv, Weight: 1, VendorKeyID: u.VendorKeyID}}
}

// Pooled reports whether the upstream has more than one key: Envoy then has
// a cluster per key and endpoint, and the sidecar steers each request to a
// key.
func (u *Upstream) Pooled() bool { return len(u.VendorKeys) > 1 }

// HasCredential reports whether Envoy injects a vendor key.
func (k VendorKey) HasCredential() bool { return k.Env != "" || k.File != "" || k.SDS != "" }

func (p *Pool) setDefaults() {
	defDur(&p.CoolDown, 10*time.Second)
	defDur(&p.MaxCoolDown, 5*time.Minute)
	defDur(&p.ProbeInterval, 10*time.Minute)
	defDur(&p.CorroborateWindow, time.Minute)
	if p.MaxKeys == 0 {
		p.MaxKeys = 2
	}
	if p.CorroborateAccounts == 0 {
		p.CorroborateAccounts = 2
	}
	if p.AccountRefusals == 0 {
		p.AccountRefusals = 5
	}
	if p.ShareBelow == 0 {
		p.ShareBelow = 0.2
	}
}

func (u *Upstream) validateKeys(p string) error {
	if len(u.VendorKeys) > 0 && u.CredentialEnv != "" {
		return fmt.Errorf("%s: credential_env and keys: set one (credential_env is a pool of one key)", p)
	}
	if len(u.VendorKeys) > 0 && u.VendorKeyID != "" {
		return fmt.Errorf("%s: vendor_key_id and keys: name each key's id in keys[].vendor_key_id", p)
	}
	if u.VendorKeyID != "" && !validVendorKeyID(u.VendorKeyID) {
		return fmt.Errorf("%s.vendor_key_id: %q must be 1 to 128 letters, digits, '_' or '-'", p, u.VendorKeyID)
	}
	if u.AdminCredentialEnv != "" && !validEnvName(u.AdminCredentialEnv) {
		return fmt.Errorf("%s.admin_credential_env: %q is not an environment variable name", p, u.AdminCredentialEnv)
	}
	seen := map[string]bool{}
	ids := map[string]bool{}
	pinned := map[string]bool{}
	for j, k := range u.VendorKeys {
		kp := fmt.Sprintf("%s.keys[%d]", p, j)
		if !validKeyName(k.Name) {
			return fmt.Errorf("%s.name: %q must be 1 to 32 lowercase letters, digits or '_'", kp, k.Name)
		}
		if seen[k.Name] {
			return fmt.Errorf("%s.name: %q is used twice", kp, k.Name)
		}
		seen[k.Name] = true
		if k.VendorKeyID != "" {
			if !validVendorKeyID(k.VendorKeyID) {
				return fmt.Errorf("%s.vendor_key_id: %q must be 1 to 128 letters, digits, '_' or '-'", kp, k.VendorKeyID)
			}
			if ids[k.VendorKeyID] {
				return fmt.Errorf("%s.vendor_key_id: %q is used twice", kp, k.VendorKeyID)
			}
			ids[k.VendorKeyID] = true
		}
		n := 0
		for _, s := range []string{k.Env, k.File, k.SDS} {
			if s != "" {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("%s: set exactly one of env, file and sds (where Envoy reads the secret)", kp)
		}
		if k.Env != "" && !validEnvName(k.Env) {
			return fmt.Errorf("%s.env: %q is not an environment variable name", kp, k.Env)
		}
		for _, f := range []string{k.File, k.SDS} {
			if strings.ContainsAny(f, "\"'\n{}[]#") {
				return fmt.Errorf("%s: %q is not a plain file path", kp, f)
			}
		}
		if k.Weight < 1 || k.Weight > 1000 {
			return fmt.Errorf("%s.weight: must be 1 to 1000", kp)
		}
		for _, a := range k.Accounts {
			if a == "" || strings.ContainsAny(a, " \t\n\"'") {
				return fmt.Errorf("%s.accounts: %q is not an account id", kp, a)
			}
			pinned[a] = true
		}
	}
	if len(u.VendorKeys) > 0 {
		shared := slices.ContainsFunc(u.VendorKeys, func(k VendorKey) bool { return len(k.Accounts) == 0 })
		if !shared {
			return fmt.Errorf("%s.keys: every key is pinned to accounts; leave at least one for the others", p)
		}
	}
	if c := u.Pool; c.CoolDown < 0 || c.MaxCoolDown < c.CoolDown || c.ProbeInterval < 0 {
		return errors.New(p + ".pool: cool_down, max_cool_down and probe_interval must not be negative, and max_cool_down at least cool_down")
	}
	if c := u.Pool; c.ShareBelow < 0 || c.ShareBelow > 1 {
		return errors.New(p + ".pool: share_below must be a fraction, 0 to 1")
	}
	if c := u.Pool; c.MaxKeys < 1 || c.CorroborateAccounts < 1 || c.AccountRefusals < 1 || c.CorroborateWindow <= 0 {
		return errors.New(p + ".pool: max_keys, corroborate_accounts and account_refusals must be at least 1, corroborate_window positive")
	}
	return nil
}

func validVendorKeyID(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func validKeyName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// KeyClusterHeader is the request header by which the processor names the
// aggregate cluster of a pooled upstream that tries its chosen key first.
const KeyClusterHeader = "x-gateway-key-cluster"

// KeyCluster names the aggregate cluster of a pooled upstream's cluster
// that tries key first.
func KeyCluster(cluster, key string) string { return cluster + "--" + key }

// MemberCluster names the cluster of a pooled upstream's key at one
// endpoint ("primary" or "reserve").
func MemberCluster(cluster, key, endpoint string) string {
	return cluster + "--" + key + "--" + endpoint
}
