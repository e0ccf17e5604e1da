package config

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestShippedConfigLoads(t *testing.T) {
	c, err := Load(filepath.Join("..", "..", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.UpstreamNames(), ","); got != "alpha,beta" {
		t.Fatalf("upstreams = %s, want alpha,beta", got)
	}
	for _, u := range c.Upstreams {
		if len(u.Models.Providers) == 0 || u.Models.UnknownModel != UnknownReject || u.Primary.URL == "" || u.Reserve.URL == "" {
			t.Errorf("upstream %s is incomplete: %+v", u.Name, u)
		}
	}
}

const minimal = `
catalogue: prices.json
upstreams:
  - name: alpha
    format: messages
    credential_env: ALPHA_API_KEY
    primary: {url: "http://127.0.0.1:9001"}
    reserve: {url: "http://127.0.0.1:9002"}
    models:
      providers: [anthropic]
      aliases: {m1: claude-x}
      overrides:
        m2: {input: 1, output: 2, max_output: 100}
`

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.MaxRequestBytes != 32<<20 || c.Listeners.Public != "127.0.0.1:8080" || c.Upstreams[0].HealthCheck.Path != "/v1/models" ||
		c.Upstreams[0].Models.UnknownModel != UnknownReject {
		t.Fatalf("defaults not applied: %+v", c)
	}
	// One key's (and account's) share of the waiting room: a tenth of it,
	// following the room's size, at least one.
	for _, tc := range []struct {
		yaml       string
		room, want int
	}{
		{"", 500, 50},
		{"limits: {concurrency_waiters: 2000}\n", 2000, 200},
		{"limits: {concurrency_waiters: 5}\n", 5, 1},
		{"limits: {concurrency_waiters_share: 7}\n", 500, 7},
	} {
		c, err := Parse([]byte(minimal + tc.yaml))
		if err != nil {
			t.Fatal(err)
		}
		if c.Limits.ConcurrencyWaiters != tc.room || c.Limits.ConcurrencyWaitersShare != tc.want {
			t.Fatalf("%q: room %d, share %d; want %d and %d", tc.yaml, c.Limits.ConcurrencyWaiters, c.Limits.ConcurrencyWaitersShare, tc.room, tc.want)
		}
	}
}

// A price names each built-in tool's fee by the usage kind it prices.
func TestToolPrices(t *testing.T) {
	tools := strings.Replace(minimal, "max_output: 100", "max_output: 100, web_search: 0.01, file_search: 0.0025, code_interpreter_session: 0.03, image_generation: 0.04", 1)
	c, err := Parse([]byte(tools))
	if err != nil {
		t.Fatal(err)
	}
	got := c.Upstreams[0].Models.Overrides["m2"].Fields()
	want := map[string]float64{"input": 1, "output": 2, "web_searches": 0.01, "file_searches": 0.0025, "code_interpreter_sessions": 0.03, "image_generations": 0.04}
	if !maps.Equal(got, want) {
		t.Fatalf("fields %v, want %v", got, want)
	}
}

// Bad configuration fails with a message naming the field.
func TestBadConfigNamesTheField(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top-level field", minimal + "colour: blue\n", "colour"},
		{"unknown nested field", strings.Replace(minimal, "format: messages", "format: messages\n    colour: blue", 1), "colour"},
		{"malformed yaml", "upstreams: [\n", "yaml"},
		{"empty", "", "empty"},
		{"no upstreams", "region: x\n", "upstreams"},
		{"missing primary", strings.Replace(minimal, `primary: {url: "http://127.0.0.1:9001"}`, "", 1), "upstreams[0].primary.url"},
		{"bad format", strings.Replace(minimal, "format: messages", "format: soap", 1), "upstreams[0].format"},
		{"bad scheme", strings.Replace(minimal, "http://127.0.0.1:9002", "ftp://x", 1), "upstreams[0].reserve.url"},
		{"no catalogue", strings.Replace(minimal, "catalogue: prices.json", "", 1), "catalogue"},
		{"no providers", strings.Replace(strings.Replace(minimal, "      providers: [anthropic]\n", "", 1), "      overrides:\n        m2: {input: 1, output: 2, max_output: 100}\n", "", 1), "upstreams[0].models.providers"},
		{"negative price", strings.Replace(minimal, "input: 1", "input: -1", 1), "upstreams[0].models.overrides[m2]: input"},
		{"negative max_output", strings.Replace(minimal, "max_output: 100", "max_output: -1", 1), "overrides[m2].max_output"},
		{"negative tool price", strings.Replace(minimal, "max_output: 100", "max_output: 100, code_interpreter_session: -1", 1), "overrides[m2]: code_interpreter_sessions"},
		{"unknown price field", strings.Replace(minimal, "input: 1,", "inputs: 1,", 1), "inputs"},
		{"bad policy", strings.Replace(minimal, "providers: [anthropic]", "providers: [anthropic]\n      unknown_model: guess", 1), "upstreams[0].models.unknown_model"},
		{"fallback without price", strings.Replace(minimal, "providers: [anthropic]", "providers: [anthropic]\n      unknown_model: fallback", 1), "upstreams[0].models.fallback"},
		{"incomplete fallback", strings.Replace(minimal, "providers: [anthropic]", "providers: [anthropic]\n      unknown_model: fallback\n      fallback: {input: 1}", 1), "upstreams[0].models.fallback"},
		{"bad duration", minimal + "limits: {max_request_duration: forever}\n", "duration"},
		{"bad listener", minimal + "listeners: {public: nowhere}\n", "listeners.public"},
		{"waiters share above the room", minimal + "limits: {concurrency_waiters: 10, concurrency_waiters_share: 11}\n", "limits.concurrency_waiters_share"},
		{"negative waiters share", minimal + "limits: {concurrency_waiters_share: -1}\n", "limits.concurrency_waiters_share"},
		{"bad contract", minimal + "envoy: {contract: partial}\n", "envoy.contract"},
		{"bad cluster name", strings.Replace(minimal, "format: messages", "format: messages\n    envoy_cluster: \"a b\"", 1), "upstreams[0].envoy_cluster"},
		{"reserve without url", strings.Replace(minimal, `reserve: {url: "http://127.0.0.1:9002"}`, "reserve: {region: eu}", 1), "upstreams[0].reserve.url"},
		{"bad free path", strings.Replace(minimal, "format: messages", "format: messages\n    free_paths: [\"/v1/models\"]", 1), "free_paths[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("config accepted; want an error naming %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not name %q", err, tt.want)
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(p, []byte("nope: 1\n"), 0o644)
	_, err := Load(p)
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("err = %v", err)
	}
}

func TestCheckSidecarBinds(t *testing.T) {
	loop := Listeners{ExtProc: "127.0.0.1:50051", Control: "localhost:8081", Admin: "[::1]:50052"}
	if err := loop.CheckSidecarBinds(); err != nil {
		t.Fatalf("loopback refused: %v", err)
	}
	tlsOn := SidecarTLS{CA: "ca", ServerCert: "c", ServerKey: "k", ClientCert: "cc", ClientKey: "ck"}
	for _, tc := range []struct {
		l  Listeners
		ok bool
	}{
		{Listeners{ExtProc: "0.0.0.0:1", Control: "127.0.0.1:2", Admin: "127.0.0.1:3"}, false},
		{Listeners{ExtProc: "127.0.0.1:1", Control: "10.1.2.3:2", Admin: "127.0.0.1:3"}, false},
		{Listeners{ExtProc: "0.0.0.0:1", Control: "0.0.0.0:2", Admin: "127.0.0.1:3", TLS: tlsOn}, true},
		{Listeners{ExtProc: "127.0.0.1:1", Control: "127.0.0.1:2", Admin: "0.0.0.0:3", TLS: tlsOn}, false},
		{Listeners{ExtProc: "0.0.0.0:1", Control: "127.0.0.1:2", Admin: "127.0.0.1:3", TLS: SidecarTLS{CA: "ca"}}, false},
	} {
		if err := tc.l.CheckSidecarBinds(); (err == nil) != tc.ok {
			t.Errorf("%+v: %v", tc.l, err)
		}
	}
}

func TestListenerHardeningAndCredentialEnv(t *testing.T) {
	c, err := Parse([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	e := c.Envoy
	if e.RequestHeadersTimeout.D() != 10*time.Second || e.MaxRequestHeadersKB != 60 || e.MaxHeadersCount != 100 ||
		e.MaxConnectionDuration.D() != time.Hour || e.MaxConnections != 10000 || e.ForwardClientAddress || c.Listeners.Probes != "127.0.0.1:9902" {
		t.Fatalf("defaults: %+v, probes %s", e, c.Listeners.Probes)
	}
	for _, bad := range []string{
		"envoy: {max_request_headers_kb: 9000}",
		"envoy: {max_headers_count: -1}",
		"envoy: {request_headers_timeout: -1s}",
		"listeners: {probes: nowhere}",
	} {
		if _, err := Parse([]byte(minimal + bad + "\n")); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	for env, ok := range map[string]bool{"ALPHA_API_KEY": true, "": true, "alpha key": false, "1KEY": false, "A-B": false} {
		_, err := Parse([]byte(strings.Replace(minimal, "credential_env: ALPHA_API_KEY", "credential_env: '"+env+"'", 1)))
		if (err == nil) != ok {
			t.Errorf("credential_env %q: %v", env, err)
		}
	}
	// The per-endpoint credential is gone: Envoy injects one key per upstream.
	if _, err := Parse([]byte(strings.Replace(minimal, `primary: {url: "http://127.0.0.1:9001"}`, `primary: {url: "http://127.0.0.1:9001", credential_env: X}`, 1))); err == nil {
		t.Error("endpoint credential_env accepted")
	}
}

// A relative catalogue path is relative to gateway.yaml, wherever the
// process runs.
func TestCatalogueIsRelativeToTheConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "gw.yaml")
	os.WriteFile(p, []byte(minimal), 0o644)
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Catalogue != filepath.Join(dir, "prices.json") {
		t.Fatalf("catalogue = %s", c.Catalogue)
	}
}

func TestCatalogueEnvOverrides(t *testing.T) {
	p := filepath.Join(t.TempDir(), "gw.yaml")
	os.WriteFile(p, []byte(minimal), 0o644)
	t.Setenv(CatalogueEnv, "/usr/share/gateway/prices.json")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Catalogue != "/usr/share/gateway/prices.json" {
		t.Fatalf("catalogue = %s", c.Catalogue)
	}
}

// Validate only reads: a config with an RPM limit and no window is given
// its one-minute window by Parse, and validating it again changes nothing.
func TestValidateChangesNothing(t *testing.T) {
	c, err := Parse([]byte(minimal + "limits: {rpm: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Limits.WindowMinutes != 1 || c.Limits.HoldLease.D() != DefaultHoldLease {
		t.Fatalf("defaults: %+v", c.Limits)
	}
	c.Limits.WindowMinutes = 0
	before := fmt.Sprintf("%+v", *c)
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if after := fmt.Sprintf("%+v", *c); after != before {
		t.Fatalf("Validate changed the config:\n%s\n%s", before, after)
	}
}

// The reserve is optional; the Envoy cluster defaults to the upstream's
// name; the reduced contract turns the concurrency wait off and says so.
func TestReserveOptionalClusterAndContract(t *testing.T) {
	c, err := Parse([]byte(strings.Replace(minimal, `reserve: {url: "http://127.0.0.1:9002"}`, "", 1)))
	if err != nil {
		t.Fatalf("no reserve: %v", err)
	}
	u := c.Upstreams[0]
	if u.HasReserve() || len(u.Endpoints()) != 1 || u.EnvoyCluster != "alpha" || c.Envoy.Contract != ContractFull {
		t.Fatalf("reserve %v, endpoints %d, cluster %q, contract %q", u.HasReserve(), len(u.Endpoints()), u.EnvoyCluster, c.Envoy.Contract)
	}
	if c.ConcurrencyWaitBound() != MaxConcurrencyWait || len(c.Warnings()) != 0 {
		t.Fatalf("full contract: wait bound %v, warnings %q", c.ConcurrencyWaitBound(), c.Warnings())
	}
	same := strings.Replace(minimal, "http://127.0.0.1:9002", "http://127.0.0.1:9001", 1)
	r, err := Parse([]byte(same + "envoy: {contract: reduced}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r.ConcurrencyWaitBound() != 0 {
		t.Errorf("reduced: concurrency wait bound %v, want 0", r.ConcurrencyWaitBound())
	}
	ws := strings.Join(r.Warnings(), "\n")
	if !strings.Contains(ws, "concurrency wait is off") || !strings.Contains(ws, "upstream alpha: primary and reserve have the same address") {
		t.Errorf("reduced warnings: %s", ws)
	}
	d, err := Parse([]byte(strings.Replace(minimal, "format: messages", "format: messages\n    envoy_cluster: vendor-a.primary_1", 1)))
	if err != nil || d.Upstreams[0].EnvoyCluster != "vendor-a.primary_1" {
		t.Fatalf("envoy_cluster: %v", err)
	}
}
