// Package config loads gateway.yaml: the one file that describes listeners,
// upstreams with their endpoints and prices, and default account limits. The
// Envoy bootstrap is rendered from the same Config, so the two cannot drift.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// Config is the whole of gateway.yaml.
type Config struct {
	// Region is the region code of this node, reported by GET /health.
	Region    string    `yaml:"region"`
	Listeners Listeners `yaml:"listeners"`
	Store     Store     `yaml:"store"`
	Limits    Limits    `yaml:"limits"`
	Envoy     Envoy     `yaml:"envoy"`
	// Catalogue is the price catalogue file, in LiteLLM's
	// model_prices_and_context_window.json format. Load makes a relative
	// path relative to the directory of gateway.yaml; the GATEWAY_CATALOGUE
	// environment variable overrides it (the container image sets it).
	Catalogue string     `yaml:"catalogue"`
	Upstreams []Upstream `yaml:"upstreams"`
	// LedgerSink configures `gateway ledger-sink`, which copies the ledger
	// into PostgreSQL.
	LedgerSink LedgerSink `yaml:"ledger_sink"`
	// Tracing exports OpenTelemetry traces of model requests; off unless
	// an endpoint is set.
	Tracing Tracing `yaml:"tracing"`
	// Alerts configure the webhook events.
	Alerts Alerts `yaml:"alerts"`
	// SSO signs people in to the consoles with an OpenID Connect provider.
	SSO SSO `yaml:"sso"`
	// Reconcile configures the continuous reconciliation with the vendors'
	// usage reports.
	Reconcile Reconcile `yaml:"reconcile"`
}

// CatalogueEnv names the environment variable that overrides catalogue.
const CatalogueEnv = "GATEWAY_CATALOGUE"

// Load reads, defaults and validates a config file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if env := os.Getenv(CatalogueEnv); env != "" {
		c.Catalogue = env
	}
	if !filepath.IsAbs(c.Catalogue) {
		c.Catalogue = filepath.Join(filepath.Dir(path), c.Catalogue)
	}
	return c, nil
}

// Parse decodes YAML strictly: an unknown field is an error that names it.
func Parse(data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file")
		}
		return nil, err
	}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}
