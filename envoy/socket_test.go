package envoy_test

import (
	"slices"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/modelgateway/gateway/envoy"
	"github.com/modelgateway/gateway/extproc"
	"github.com/modelgateway/gateway/extproc/operations"
)

// socketRoute is a route that matches a WebSocket upgrade: its path and
// where it sends it.
type socketRoute struct{ path, rewrite string }

// socketRoutes walks a rendering for every route matching an upgrade.
func socketRoutes(v any, out *[]socketRoute) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			socketRoutes(e, out)
		}
	case map[string]any:
		if m, ok := v["match"].(map[string]any); ok {
			hs, _ := m["headers"].([]any)
			for _, h := range hs {
				if h, _ := h.(map[string]any); h["name"] == "upgrade" {
					r, _ := v["route"].(map[string]any)
					p, _ := m["path"].(string)
					rw, _ := r["prefix_rewrite"].(string)
					*out = append(*out, socketRoute{p, rw})
				}
			}
		}
		for _, e := range v {
			socketRoutes(e, out)
		}
	}
}

// The template writes the WebSocket routes by hand; this pins them to the
// operations' own socket paths and the sidecar's SocketPrefix, so that a
// socket path changed (or added) in the operation fails here rather than
// at a client: for every upstream and every operation with a socket, the
// client's upgrade goes to the sidecar under SocketPrefix, and the relay
// sends the sidecar's upgrade to the vendor's path; no other upgrade is
// routed. With one key and with a pool.
func TestSocketRoutesFollowTheOperations(t *testing.T) {
	var paths []string
	for _, op := range operations.All {
		if op.Socket != nil {
			paths = append(paths, op.Socket.Path)
		}
	}
	if len(paths) == 0 {
		t.Fatal("no operation has a socket: the test shows nothing")
	}
	for name, c := range map[string]func() []byte{
		"one key": func() []byte { return must(envoy.Render(load(t), envoy.Options{})) },
		"pool":    func() []byte { return must(envoy.Render(pooled(t), envoy.Options{})) },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := load(t)
			var doc any
			if err := yaml.Unmarshal(c(), &doc); err != nil {
				t.Fatal(err)
			}
			var got []socketRoute
			socketRoutes(doc, &got)
			want := map[socketRoute]bool{}
			for _, u := range cfg.Upstreams {
				for _, p := range paths {
					want[socketRoute{"/" + u.Name + p, extproc.SocketPrefix + u.Name + p}] = true
					want[socketRoute{"/" + u.Name + p, p}] = true
				}
			}
			for _, r := range got {
				if !want[r] {
					t.Errorf("upgrade route %s → %s is no operation's socket", r.path, r.rewrite)
				}
			}
			for w := range want {
				if !slices.Contains(got, w) {
					t.Errorf("no upgrade route %s → %s", w.path, w.rewrite)
				}
			}
		})
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
