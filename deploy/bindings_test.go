package deploy_test

import (
	"bytes"
	"net"
	"slices"
	"strconv"
	"testing"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/internal/config"
)

// podConfig is gateway.yaml as the pod's sidecar reads it (its ConfigMap).
func podConfig(t *testing.T, s k8sSet) *config.Config {
	t.Helper()
	cm := s.configMaps[deploy.GatewayConfigMap]
	if cm == nil {
		t.Fatalf("no ConfigMap %s", deploy.GatewayConfigMap)
	}
	c, err := config.Parse([]byte(cm.Data[deploy.GatewayConfigKey]))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// socketAddresses returns every listener and admin address of an Envoy
// bootstrap, as "host:port" by name.
func socketAddresses(t *testing.T, bootstrap string) map[string]string {
	t.Helper()
	type sock struct {
		SocketAddress struct {
			Address   string `yaml:"address"`
			PortValue int    `yaml:"port_value"`
		} `yaml:"socket_address"`
		Pipe *struct{} `yaml:"pipe"`
	}
	var b struct {
		Admin struct {
			Address sock `yaml:"address"`
		} `yaml:"admin"`
		StaticResources struct {
			Listeners []struct {
				Name    string `yaml:"name"`
				Address sock   `yaml:"address"`
			} `yaml:"listeners"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal([]byte(bootstrap), &b); err != nil {
		t.Fatal(err)
	}
	addr := func(s sock) string {
		return net.JoinHostPort(s.SocketAddress.Address, strconv.Itoa(s.SocketAddress.PortValue))
	}
	out := map[string]string{"admin": addr(b.Admin.Address)}
	for _, l := range b.StaticResources.Listeners {
		out[l.Name] = addr(l.Address)
	}
	return out
}

// The pod binds nothing beyond loopback but Envoy's public listener and its
// read-only probes listener (the relay, which adds vendor credentials, is on
// loopback); the NetworkPolicy admits exactly those two, and
// no container declares another port.
func TestPodBindsOnlyDocumentedPorts(t *testing.T) {
	s := loadK8s(t)
	documented := map[string]int32{"public": 8080, "probes": 9902}

	// Envoy: every listener and the admin interface, from the rendering the
	// pod runs.
	boot := s.configMaps[deploy.EnvoyConfigMap].Data[deploy.EnvoyConfigKey]
	addrs := socketAddresses(t, boot)
	if len(addrs) != 4 {
		t.Errorf("Envoy binds %v; want admin, public, probes and relay", addrs)
	}
	if host, _ := port(t, addrs["relay"]); !config.IsLoopback(host) {
		t.Errorf("Envoy's relay listens on %s, beyond loopback", addrs["relay"])
	}
	for name, a := range addrs {
		host, p := port(t, a)
		want, ok := documented[name]
		switch {
		case config.IsLoopback(host):
		case !ok:
			t.Errorf("Envoy's %s listens on %s, beyond loopback", name, a)
		case p != want:
			t.Errorf("Envoy's %s listens on port %d, documented %d", name, p, want)
		}
	}

	// The sidecar: gateway.yaml's listeners, and no flag overriding them
	// with an address beyond loopback.
	cfg := podConfig(t, s)
	for name, a := range map[string]string{"extproc": cfg.Listeners.ExtProc, "control": cfg.Listeners.Control, "admin": cfg.Listeners.Admin, "envoy_admin": cfg.Listeners.EnvoyAdmin} {
		if host, _ := port(t, a); !config.IsLoopback(host) {
			t.Errorf("gateway.yaml listeners.%s is %s, beyond loopback", name, a)
		}
	}
	sc := s.sidecar(t)
	for _, f := range []string{"--listen-extproc", "--listen-control", "--listen-admin"} {
		if v, ok := flagValue(sc.Args, f); ok {
			if host, _ := port(t, v); !config.IsLoopback(host) {
				t.Errorf("sidecar %s %s binds beyond loopback", f, v)
			}
		}
	}

	// Declared container ports and the NetworkPolicy: the documented ones.
	var declared []int32
	all := append(append([]corev1.Container{}, s.pod().InitContainers...), s.pod().Containers...)
	for _, c := range all {
		for _, p := range c.Ports {
			declared = append(declared, p.ContainerPort)
		}
	}
	slices.Sort(declared)
	if !slices.Equal(declared, []int32{8080, 9902}) {
		t.Errorf("containers declare ports %v, want [8080 9902]", declared)
	}
	for _, np := range s.policies {
		var ports []int32
		for _, rule := range np.Spec.Ingress {
			for _, p := range rule.Ports {
				ports = append(ports, int32(p.Port.IntValue()))
			}
		}
		slices.Sort(ports)
		if !slices.Equal(ports, []int32{8080, 9902}) {
			t.Errorf("NetworkPolicy %s admits ports %v, want [8080 9902]", np.Name, ports)
		}
	}
	if s.pod().HostNetwork {
		t.Error("hostNetwork would put the loopback listeners on the node's loopback")
	}
}

// The shipped PodMonitor scrapes the probes listener: Envoy's stats and the
// sidecar's metrics, the two paths the probes listener serves.
func TestPodMonitorScrapesTheProbesListener(t *testing.T) {
	data := readRepoFile(t, "deploy/k8s/monitoring/podmonitor.yaml")
	var pm struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			PodMetricsEndpoints []struct {
				Port     string `yaml:"port"`
				Path     string `yaml:"path"`
				Interval string `yaml:"interval"`
			} `yaml:"podMetricsEndpoints"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&pm); err != nil {
		t.Fatal(err)
	}
	if pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" {
		t.Fatalf("%s %s", pm.APIVersion, pm.Kind)
	}
	if pm.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != deploy.AppLabel {
		t.Errorf("selector %v does not select the gateway pods", pm.Spec.Selector.MatchLabels)
	}
	s := loadK8s(t)
	ev := s.envoy(t)
	var paths []string
	for _, ep := range pm.Spec.PodMetricsEndpoints {
		if containerPort(ev, ep.Port) != 9902 {
			t.Errorf("endpoint %s%s: not Envoy's probes port", ep.Port, ep.Path)
		}
		paths = append(paths, ep.Path)
	}
	slices.Sort(paths)
	if !slices.Equal(paths, []string{"/metrics", "/stats/prometheus"}) {
		t.Errorf("scraped paths %v", paths)
	}
}
