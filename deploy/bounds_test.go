package deploy_test

import (
	"testing"

	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"gopkg.in/yaml.v3"

	egv1a1 "github.com/envoyproxy/gateway/api/v1alpha1"

	"github.com/modelgateway/gateway/deploy"
	"github.com/modelgateway/gateway/internal/config"
)

// bootBounds are the buffer bounds of the pod's bootstrap (envoy/envoy.yaml,
// rendered from gateway.yaml): what Envoy reads of a client connection at
// once, what each upstream's route buffers of a body, and the ext_proc
// cluster's buffer and HTTP/2 windows.
type bootBounds struct {
	listener     int64
	route        map[string]int64
	extproc      int64
	stream, conn int64
}

func readBootBounds(t *testing.T) bootBounds {
	t.Helper()
	var b struct {
		StaticResources struct {
			Listeners []struct {
				Name         string `yaml:"name"`
				Buffer       int64  `yaml:"per_connection_buffer_limit_bytes"`
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							RouteConfig struct {
								VirtualHosts []struct {
									Routes []struct {
										Name  string `yaml:"name"`
										Limit int64  `yaml:"request_body_buffer_limit"`
									} `yaml:"routes"`
								} `yaml:"virtual_hosts"`
							} `yaml:"route_config"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
			Clusters []struct {
				Name    string `yaml:"name"`
				Buffer  int64  `yaml:"per_connection_buffer_limit_bytes"`
				Options map[string]struct {
					Explicit struct {
						HTTP2 struct {
							Stream int64 `yaml:"initial_stream_window_size"`
							Conn   int64 `yaml:"initial_connection_window_size"`
						} `yaml:"http2_protocol_options"`
					} `yaml:"explicit_http_config"`
				} `yaml:"typed_extension_protocol_options"`
			} `yaml:"clusters"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(readRepoFile(t, "envoy/envoy.yaml"), &b); err != nil {
		t.Fatal(err)
	}
	out := bootBounds{route: map[string]int64{}}
	for _, l := range b.StaticResources.Listeners {
		if l.Name != "public" {
			continue
		}
		out.listener = l.Buffer
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				for _, vh := range f.TypedConfig.RouteConfig.VirtualHosts {
					for _, r := range vh.Routes {
						if r.Name != "" {
							out.route[r.Name] = r.Limit
						}
					}
				}
			}
		}
	}
	for _, c := range b.StaticResources.Clusters {
		if c.Name == "extproc" {
			o := c.Options["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"].Explicit.HTTP2
			out.extproc, out.stream, out.conn = c.Buffer, o.Stream, o.Conn
		}
	}
	if out.listener == 0 || out.extproc == 0 || out.stream == 0 || out.conn == 0 {
		t.Fatalf("envoy/envoy.yaml: no public listener buffer or ext_proc cluster bounds: %+v", out)
	}
	return out
}

// The control planes' renderings buffer no more than the pod's bootstrap
// does: Istio's routes buffer a body up to the bootstrap route's
// request_body_buffer_limit and leave the ingress gateway's listener (and
// its buffer) as it is; its ext_proc cluster has the bootstrap's buffer and
// windows. Envoy Gateway's API (the version deploy/go.mod pins) has no
// route's body limit short of its buffer filter, which buffers the whole
// body before ext_proc sees the headers: its listener buffer holds the
// largest body instead, the bootstrap route's limit and no more
// (docs/security.md, Bounds).
func TestRenderingsBoundedLikeTheBootstrap(t *testing.T) {
	boot := readBootBounds(t)
	cfg, err := config.Load(repoPath("gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if boot.listener != config.ReadBufferBytes {
		t.Errorf("the bootstrap's public listener buffers %d bytes per connection, want config.ReadBufferBytes (%d)", boot.listener, config.ReadBufferBytes)
	}
	ps := istioPatches(t, istioSpec(t, decodeDir(t, deploy.IstioDir)))
	for _, u := range cfg.Upstreams {
		want := boot.route[u.Name]
		if want != cfg.Limits.MaxRequestBytes {
			t.Errorf("the bootstrap's route %s buffers %d bytes of a body, want limits.max_request_bytes (%d)", u.Name, want, cfg.Limits.MaxRequestBytes)
		}
		if r := ps.merges[u.Name]; r == nil || int64(r.GetRequestBodyBufferLimit().GetValue()) != want {
			t.Errorf("Istio's route %s: request_body_buffer_limit %v, want the bootstrap route's %d", u.Name, r.GetRequestBodyBufferLimit(), want)
		}
	}
	c := ps.clusters[deploy.ExtProcCluster]
	var po httpv3.HttpProtocolOptions
	if a := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; a == nil || a.UnmarshalTo(&po) != nil {
		t.Fatalf("Istio's %s cluster has no HTTP protocol options", deploy.ExtProcCluster)
	}
	h2 := po.GetExplicitHttpConfig().GetHttp2ProtocolOptions()
	if got := [3]int64{int64(c.GetPerConnectionBufferLimitBytes().GetValue()), int64(h2.GetInitialStreamWindowSize().GetValue()), int64(h2.GetInitialConnectionWindowSize().GetValue())}; got != [3]int64{boot.extproc, boot.stream, boot.conn} {
		t.Errorf("Istio's %s cluster: buffer, stream and connection windows %v, want the bootstrap's %v", deploy.ExtProcCluster, got, [3]int64{boot.extproc, boot.stream, boot.conn})
	}
	limits := 0
	for _, o := range decodeDir(t, deploy.EnvoyGatewayDir) {
		if p, ok := o.obj.(*egv1a1.ClientTrafficPolicy); ok {
			limits++
			got := p.Spec.Connection.BufferLimit.Value()
			for _, u := range cfg.Upstreams {
				if want := boot.route[u.Name]; got != want {
					t.Errorf("Envoy Gateway's listener buffer %d, want the bootstrap route %s's %d", got, u.Name, want)
				}
			}
		}
	}
	if limits != 1 {
		t.Errorf("%s: %d ClientTrafficPolicies, want one", deploy.EnvoyGatewayDir, limits)
	}
}
