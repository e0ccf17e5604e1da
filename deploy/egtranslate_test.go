package deploy_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/internal/config"
	"github.com/modelgateway/gateway/internal/mtls/mtlstest"
)

// egctlBinary is $EGCTL_BIN or the egctl `make egctl` installs: Envoy
// Gateway's own translator (`egctl x translate`, standalone, no cluster), at
// the version of the API types deploy/go.mod pins.
func egctlBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs egctl: skipped by -short (make unit)")
	}
	bin := os.Getenv("EGCTL_BIN")
	if bin == "" {
		abs, err := filepath.Abs(repoPath(".venv/bin/egctl"))
		if err != nil {
			t.Fatal(err)
		}
		bin = abs
	}
	if _, err := os.Stat(bin); err != nil {
		// Built from source in about 20 minutes: make test leaves it out,
		// make egctl-check builds it and requires it.
		if os.Getenv("EGCTL_REQUIRED") != "" {
			t.Fatalf("egctl not found at %s: run `make egctl` or set EGCTL_BIN", bin)
		}
		t.Skipf("egctl not found at %s: Envoy Gateway's translation is checked by `make egctl-check`", bin)
	}
	return bin
}

// The Makefile installs the egctl of the Envoy Gateway version whose API
// types validate the renderings.
func TestEgctlVersionIsTheAPIVersion(t *testing.T) {
	mf, err := modfile.Parse("go.mod", readRepoFile(t, "deploy/go.mod"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var api string
	for _, r := range mf.Require {
		if r.Mod.Path == "github.com/envoyproxy/gateway" {
			api = r.Mod.Version
		}
	}
	m := regexp.MustCompile(`(?m)^EGCTL_VERSION\s*:=\s*(\S+)\s*$`).FindSubmatch(readRepoFile(t, "Makefile"))
	if m == nil || api == "" || string(m[1]) != api {
		t.Fatalf("Makefile EGCTL_VERSION %q, deploy/go.mod github.com/envoyproxy/gateway %q: want the same", m, api)
	}
}

// egFixtures are what a cluster would hold besides the renderings: the
// GatewayClass and Gateway, the vendor keys' Secrets, the sidecar's CA and
// Envoy's client certificate.
func egFixtures(t *testing.T, cfg *config.Config, pki mtlstest.PKI) string {
	t.Helper()
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	p := deploy.DefaultControlPlaneParams
	var s strings.Builder
	fmt.Fprintf(&s, `apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: eg}
spec: {controllerName: gateway.envoyproxy.io/gatewayclass-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: %s, namespace: %s}
spec:
  gatewayClassName: eg
  listeners: [{name: http, protocol: HTTP, port: 8080}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: gateway-sidecar-ca, namespace: %s}
data: {ca.crt: %q}
---
apiVersion: v1
kind: Secret
type: kubernetes.io/tls
metadata: {name: %s, namespace: %s}
data: {tls.crt: %s, tls.key: %s}
`, p.GatewayName, p.GatewayNamespace, p.Namespace, read(pki.CA), deploy.EnvoyClientTLS, p.Namespace, b64(read(pki.ClientCert)), b64(read(pki.ClientKey)))
	for _, u := range cfg.Upstreams {
		fmt.Fprintf(&s, "---\napiVersion: v1\nkind: Secret\nmetadata: {name: %s-vendor-key, namespace: %s}\ndata: {credential: %s}\n", u.Name, p.Namespace, b64("test-"+u.Name))
	}
	return s.String()
}

// egTranslate runs `egctl x translate` on the renderings and the fixtures.
func egTranslate(t *testing.T, to string, input []byte) map[string]any {
	t.Helper()
	in := filepath.Join(t.TempDir(), "resources.yaml")
	if err := os.WriteFile(in, input, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(egctlBinary(t), "x", "translate", "--from", "gateway-api", "--to", to, "--type", "all", "--add-missing-resources", "-f", in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("egctl x translate: %v\n%s", err, stderr.Bytes())
	}
	var m map[string]any
	if err := yaml.Unmarshal(out, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// egInput is the renderings (sidecar and Envoy Gateway), without their
// comment-only documents, and the fixtures.
func egInput(t *testing.T, cfg *config.Config, pki mtlstest.PKI) []byte {
	t.Helper()
	var docs []string
	for _, f := range []string{deploy.SidecarDir + "/sidecar.yaml", deploy.EnvoyGatewayDir + "/policies.yaml", deploy.EnvoyGatewayDir + "/routes.yaml"} {
		for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(readRepoFile(t, f)), -1) {
			if len(bytes.TrimSpace(stripComments([]byte(d)))) > 0 {
				docs = append(docs, strings.Trim(d, "\n"))
			}
		}
	}
	docs = append(docs, strings.Trim(egFixtures(t, cfg, pki), "\n"))
	return []byte(strings.Join(docs, "\n---\n") + "\n")
}

// Envoy Gateway itself (its translator, standalone, through egctl) accepts
// every rendered resource and resolves every reference, and the Envoy
// configuration it generates holds what the gateway needs: ext_proc before
// the vendor key's injection (so the sidecar never sees the key) and before
// the router, its settings, the listener's buffer limit. Envoy accepts that
// configuration (`envoy --mode validate`, its xDS made static).
func TestEnvoyGatewayTranslates(t *testing.T) {
	egctlBinary(t)
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pki := mtlstest.Write(t, t.TempDir(), "eg")
	input := egInput(t, cfg, pki)

	// Status: every condition of every resource true.
	gw := egTranslate(t, "gateway-api", input)
	var checked int
	for kind, v := range gw {
		objs, _ := v.([]any)
		for _, o := range objs {
			om, _ := o.(map[string]any)
			name := fmt.Sprint(om["metadata"].(map[string]any)["name"])
			var walk func(x any)
			walk = func(x any) {
				switch x := x.(type) {
				case map[string]any:
					if conds, ok := x["conditions"].([]any); ok {
						for _, c := range conds {
							c := c.(map[string]any)
							checked++
							if c["status"] != "True" {
								t.Errorf("%s %s: %s %s: %s", kind, name, c["type"], c["reason"], c["message"])
							}
						}
					}
					for _, y := range x {
						walk(y)
					}
				case []any:
					for _, y := range x {
						walk(y)
					}
				}
			}
			walk(om["status"])
		}
	}
	if checked == 0 {
		t.Fatal("egctl reported no status conditions")
	}

	xds := egTranslate(t, "xds", input)
	configs := xds["xds"].(map[string]any)[deploy.DefaultControlPlaneParams.GatewayNamespace+"/"+deploy.DefaultControlPlaneParams.GatewayName].(map[string]any)["configs"].([]any)
	dump := map[string]map[string]any{}
	for _, c := range configs {
		c := c.(map[string]any)
		typ := fmt.Sprint(c["@type"])
		dump[typ[strings.LastIndex(typ, ".")+1:]] = c
	}
	boot := dump["BootstrapConfigDump"]["bootstrap"].(map[string]any)
	routes := map[string]any{}
	for _, r := range dump["RoutesConfigDump"]["dynamicRouteConfigs"].([]any) {
		rc := r.(map[string]any)["routeConfig"].(map[string]any)
		delete(rc, "@type")
		routes[fmt.Sprint(rc["name"])] = rc
	}
	var listeners, clusters []any
	var public map[string]any
	for _, l := range dump["ListenersConfigDump"]["dynamicListeners"].([]any) {
		l := l.(map[string]any)["activeState"].(map[string]any)["listener"].(map[string]any)
		delete(l, "@type") // a dump's Any, not a bootstrap's field
		listeners = append(listeners, l)
		if strings.HasSuffix(fmt.Sprint(l["name"]), "/http") {
			public = l
		}
	}
	for _, c := range dump["ClustersConfigDump"]["dynamicActiveClusters"].([]any) {
		cl := c.(map[string]any)["cluster"].(map[string]any)
		delete(cl, "@type")
		clusters = append(clusters, cl)
	}
	if public == nil {
		t.Fatal("no listener for the Gateway's http listener")
	}
	if got := fmt.Sprint(public["perConnectionBufferLimitBytes"]); got != fmt.Sprint(cfg.Limits.MaxRequestBytes) {
		t.Errorf("listener buffer limit %s: want limits.max_request_bytes %d", got, cfg.Limits.MaxRequestBytes)
	}
	var filters []string
	var extproc map[string]any
	var extprocDisabled any
	for _, fc := range append(anySlice(public["filterChains"]), public["defaultFilterChain"]) {
		fcm, _ := fc.(map[string]any)
		for _, f := range anySlice(fcm["filters"]) {
			tc := f.(map[string]any)["typedConfig"].(map[string]any)
			// Routes inline, for a static bootstrap.
			if rds, ok := tc["rds"].(map[string]any); ok {
				tc["routeConfig"] = routes[fmt.Sprint(rds["routeConfigName"])]
				delete(tc, "rds")
			}
			for _, hf := range anySlice(tc["httpFilters"]) {
				hf := hf.(map[string]any)
				name := fmt.Sprint(hf["name"])
				filters = append(filters, name[:strings.IndexByte(name+"/", '/')])
				if strings.HasPrefix(name, "envoy.filters.http.ext_proc") {
					extproc = hf["typedConfig"].(map[string]any)
					extprocDisabled = hf["disabled"]
				}
			}
		}
	}
	ep, ci, router := slices.Index(filters, "envoy.filters.http.ext_proc"), slices.Index(filters, "envoy.filters.http.credential_injector"), slices.Index(filters, "envoy.filters.http.router")
	if ep < 0 || ci < 0 || router < 0 || ep > ci || ci > router {
		t.Errorf("HTTP filters %v: want ext_proc, then the credential injector, then the router", filters)
	}
	if extproc == nil {
		t.Fatal("no ext_proc filter")
	}
	mode := extproc["processingMode"].(map[string]any)
	if extproc["messageTimeout"] != "5s" || extproc["allowModeOverride"] != true || extproc["failureModeAllow"] == true ||
		mode["requestHeaderMode"] != "SEND" || mode["requestBodyMode"] != "BUFFERED" || mode["responseBodyMode"] != "STREAMED" ||
		fmt.Sprint(extproc["responseAttributes"]) != fmt.Sprint(deploy.ReducedResponseAttributes) {
		t.Errorf("ext_proc as Envoy Gateway generates it: %v", extproc)
	}

	// The policy's ext_proc is off at the listener and on for the model
	// routes only; those routes drop the client's address, the control
	// routes run without ext_proc.
	if extprocDisabled != true {
		t.Error("Envoy Gateway's ext_proc filter is not disabled at the listener: every route of the Gateway would reach the sidecar")
	}
	checkEGRoutes(t, cfg, routes)

	// A static bootstrap: the generated listeners and clusters, the routes
	// inline, the secrets Envoy Gateway would serve by SDS given here.
	sr := boot["staticResources"].(map[string]any)
	var keep []any
	for _, c := range anySlice(sr["clusters"]) {
		if c.(map[string]any)["name"] != "xds_cluster" {
			keep = append(keep, c)
		}
	}
	sr["clusters"] = append(keep, clusters...)
	sr["listeners"] = append(anySlice(sr["listeners"]), listeners...)
	delete(boot, "dynamicResources")
	// Envoy Gateway passes these as --service-node and --service-cluster.
	node, _ := boot["node"].(map[string]any)
	if node == nil {
		node = map[string]any{}
		boot["node"] = node
	}
	node["id"], node["cluster"] = "envoy-gateway-test", "default/eg"
	secrets := map[string]bool{}
	var unSDS func(x any)
	unSDS = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			if _, ok := x["sdsConfig"]; ok {
				delete(x, "sdsConfig")
				secrets[fmt.Sprint(x["name"])] = true
			}
			for _, y := range x {
				unSDS(y)
			}
		case []any:
			for _, y := range x {
				unSDS(y)
			}
		}
	}
	unSDS(boot)
	var static []any
	for name := range secrets {
		switch {
		case strings.HasPrefix(name, "credential_injector/"):
			static = append(static, map[string]any{"name": name, "genericSecret": map[string]any{"secret": map[string]any{"inlineString": "test"}}})
		case name == "system_ca_certificates":
			static = append(static, map[string]any{"name": name, "validationContext": map[string]any{"trustedCa": map[string]any{"filename": "/etc/ssl/certs/ca-certificates.crt"}}})
		case strings.HasSuffix(name, "-ca"):
			static = append(static, map[string]any{"name": name, "validationContext": map[string]any{"trustedCa": map[string]any{"filename": pki.CA}}})
		case strings.HasSuffix(name, "/"+deploy.EnvoyClientTLS):
			static = append(static, map[string]any{"name": name, "tlsCertificate": map[string]any{
				"certificateChain": map[string]any{"filename": pki.ClientCert}, "privateKey": map[string]any{"filename": pki.ClientKey}}})
		default:
			t.Errorf("secret %s: unknown to this test", name)
		}
	}
	sr["secrets"] = static
	out, err := yaml.Marshal(boot)
	if err != nil {
		t.Fatal(err)
	}
	envoyValidate(t, "envoy-gateway.yaml", out)
}

func anySlice(v any) []any { s, _ := v.([]any); return s }

// checkEGRoutes checks the routes Envoy Gateway generates (route
// configurations by name, as dumped): each upstream's HTTPRoute turns
// ext_proc on and removes the client's address; gateway-control's routes
// leave ext_proc off.
func checkEGRoutes(t *testing.T, cfg *config.Config, routes map[string]any) {
	t.Helper()
	ns := deploy.DefaultControlPlaneParams.Namespace
	seen := map[string]int{}
	for _, rc := range routes {
		for _, vh := range anySlice(rc.(map[string]any)["virtualHosts"]) {
			for _, r := range anySlice(vh.(map[string]any)["routes"]) {
				r := r.(map[string]any)
				name := fmt.Sprint(r["name"])
				on := false
				for k := range mapOf(r["typedPerFilterConfig"]) {
					on = on || strings.HasPrefix(k, "envoy.filters.http.ext_proc")
				}
				if strings.HasPrefix(name, "httproute/"+ns+"/gateway-control/") {
					seen["gateway-control"]++
					if on {
						t.Errorf("route %s: ext_proc on a control route", name)
					}
					continue
				}
				for _, u := range cfg.Upstreams {
					if !strings.HasPrefix(name, "httproute/"+ns+"/"+u.Name+"/") {
						continue
					}
					seen[u.Name]++
					if !on {
						t.Errorf("route %s: ext_proc is not on", name)
					}
					removed := fmt.Sprint(r["requestHeadersToRemove"])
					for _, h := range []string{"x-forwarded-for", "x-envoy-external-address"} {
						if !cfg.Envoy.ForwardClientAddress && !strings.Contains(removed, h) {
							t.Errorf("route %s: %s reaches the vendor (removes %s)", name, h, removed)
						}
					}
				}
			}
		}
	}
	for _, u := range append([]string{"gateway-control"}, upstreamNames(cfg)...) {
		if seen[u] == 0 {
			t.Errorf("no route generated for the HTTPRoute %s (saw %v)", u, seen)
		}
	}
}

func mapOf(v any) map[string]any { m, _ := v.(map[string]any); return m }

func upstreamNames(cfg *config.Config) []string {
	var out []string
	for _, u := range cfg.Upstreams {
		out = append(out, u.Name)
	}
	return out
}
