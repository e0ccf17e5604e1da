package config

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// Listeners are the addresses the gateway's processes bind.
type Listeners struct {
	Public     string `yaml:"public"`      // Envoy: where clients connect
	EnvoyAdmin string `yaml:"envoy_admin"` // Envoy's admin interface; keep it on loopback
	ExtProc    string `yaml:"extproc"`     // sidecar gRPC: ext_proc and grpc.health.v1
	Control    string `yaml:"control"`     // sidecar HTTP: /health, /v1/usage, /metrics
	Admin      string `yaml:"admin"`       // sidecar admin gRPC; never routed by Envoy
	// Console is the operator console (HTTP, signed in with the admin
	// token); loopback only, like the admin API, and never routed by Envoy.
	Console string `yaml:"console"`
	// Probes is Envoy's read-only listener for readiness and metrics
	// (GET /ready, /stats/prometheus, /metrics); the only port besides the
	// public one that may listen beyond loopback.
	Probes string `yaml:"probes"`
	// Health serves grpc.health.v1 alone, in plaintext, for probes that
	// cannot present Envoy's client certificate (the kubelet's grpc probe)
	// or reach loopback; empty, the default: not served (the ext_proc
	// listener serves grpc.health.v1 too). It tells only whether the
	// sidecar serves and its store answers, so it may listen beyond
	// loopback without TLS.
	Health string `yaml:"health"`
	// Relay is Envoy's loopback listener for the sidecar's own requests to
	// the vendors (reading background responses to settle them); it adds
	// the vendor credential, so it never leaves loopback.
	Relay string `yaml:"relay"`
	// TLS is mutual TLS between Envoy and the sidecar's ext_proc and
	// control servers. The sidecar refuses to bind either beyond loopback
	// without it.
	TLS SidecarTLS `yaml:"tls"`
}

// SidecarTLS names PEM files. The sidecar reloads its own when they change;
// Envoy reads its client certificate at start.
type SidecarTLS struct {
	CA         string `yaml:"ca_file"`          // signs both certificates; each side trusts only it
	ServerCert string `yaml:"server_cert_file"` // the sidecar's
	ServerKey  string `yaml:"server_key_file"`
	ClientCert string `yaml:"client_cert_file"` // Envoy's
	ClientKey  string `yaml:"client_key_file"`
}

// Enabled reports whether mutual TLS is configured.
func (t SidecarTLS) Enabled() bool { return t != SidecarTLS{} }

// CheckSidecarBinds refuses sidecar listeners that other hosts could reach
// without mutual TLS: ext_proc answers any caller with a valid key, and the
// control server reads usage. The admin API never leaves loopback.
func (l Listeners) CheckSidecarBinds() error {
	t := l.TLS
	if t.Enabled() && (t.CA == "" || t.ServerCert == "" || t.ServerKey == "" || t.ClientCert == "" || t.ClientKey == "") {
		return errors.New("listeners.tls: ca_file, server_cert_file, server_key_file, client_cert_file and client_key_file are all required")
	}
	for field, addr := range map[string]string{"extproc": l.ExtProc, "control": l.Control, "admin": l.Admin, "console": l.Console} {
		if field == "console" && addr == "" {
			continue // not served
		}
		host, _, err := SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("listeners.%s: %w", field, err)
		}
		switch {
		case IsLoopback(host):
		case field == "console":
			return fmt.Errorf("listeners.console: %s is beyond loopback; the operator console listens on loopback only (reach it with kubectl port-forward)", addr)
		case field == "admin":
			return fmt.Errorf("listeners.admin: %s is beyond loopback; the admin API listens on loopback only (reach it with kubectl exec or port-forward)", addr)
		case !t.Enabled():
			return fmt.Errorf("listeners.%s: %s is beyond loopback; bind 127.0.0.1 (Envoy runs beside the sidecar) or configure listeners.tls for mutual TLS", field, addr)
		}
	}
	return nil
}

// IsLoopback reports whether host (an IP or "localhost") can only be reached
// from the same network namespace.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// SplitHostPort parses "host:port" with a numeric port.
func SplitHostPort(addr string) (string, int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", 0, fmt.Errorf("%q: bad port", addr)
	}
	if host == "" {
		host = "0.0.0.0"
	}
	return host, n, nil
}
