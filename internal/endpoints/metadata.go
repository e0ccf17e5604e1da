package endpoints

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// MetadataKey is where the bootstrap puts each vendor host's endpoint name
// (filter_metadata gateway: {endpoint: primary|reserve}); the full
// contract reads it for the x-gateway-endpoint header and the ledger.
const MetadataKey = "gateway.endpoint"

// RequireEndpointMetadata makes the watcher warn, once per cluster as it
// first finds it, when an upstream's cluster has hosts without their
// endpoint metadata: an Envoy of one's own whose vendor cluster kept its
// own endpoints sends an empty x-gateway-endpoint header, and the ledger
// falls back to the address Envoy connected to. For the full contract
// only; call it before Run.
func (w *Watcher) RequireEndpointMetadata() {
	w.metadataChecked = map[string]bool{}
}

// checkMetadata reads the endpoints of the clusters in cs not checked yet
// from Envoy's config dump and warns for each whose hosts lack metadata.
func (w *Watcher) checkMetadata(ctx context.Context, cs *clusters) error {
	var todo []string
	for _, c := range cs.ClusterStatuses {
		if slices.Contains(w.hostClusters(), c.Name) && !w.metadataChecked[c.Name] {
			todo = append(todo, c.Name)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, "GET", w.adminURL+"/config_dump?include_eds&mask=static_endpoint_configs,dynamic_endpoint_configs", nil)
	if err != nil {
		return err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("envoy admin: %w", err)
	}
	defer resp.Body.Close()
	var dump endpointsDump
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("envoy admin: config_dump: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&dump); err != nil {
		return fmt.Errorf("envoy admin: decode config_dump: %w", err)
	}
	missing := dump.withoutMetadata()
	for _, c := range todo {
		n, found := missing[c]
		if !found {
			continue // not in the dump yet: next poll
		}
		w.metadataChecked[c] = true
		if n > 0 {
			w.log.Warn(fmt.Sprintf("Envoy cluster %s has %d host(s) without their %s metadata: the x-gateway-endpoint header is empty and the ledger's endpoint comes from the address Envoy connected to; use the gateway's cluster (gateway envoy-config --merge-into) or give each host filter_metadata gateway: {endpoint: primary} (reserve for the reserve's)", c, n, MetadataKey),
				"cluster", c, "upstream", w.upstreamOf(c))
		}
	}
	return nil
}

// hostClusters are the clusters whose hosts serve the upstreams: each
// upstream's, or for a pool its members (the aggregate has no hosts).
func (w *Watcher) hostClusters() []string {
	var out []string
	for _, u := range w.upstreams {
		c := w.clusters[u]
		if ms, ok := w.members[c]; ok {
			for m := range ms {
				out = append(out, m)
			}
			continue
		}
		out = append(out, c)
	}
	return out
}

func (w *Watcher) upstreamOf(cluster string) string {
	for _, u := range w.upstreams {
		if c := w.clusters[u]; c == cluster {
			return u
		} else if _, ok := w.members[c][cluster]; ok {
			return u
		}
	}
	return ""
}

// endpointsDump is the part of Envoy's /config_dump?include_eds we read:
// every cluster's hosts as Envoy holds them, static or from EDS.
type endpointsDump struct {
	Configs []struct {
		Static  []endpointConfig `json:"static_endpoint_configs"`
		Dynamic []endpointConfig `json:"dynamic_endpoint_configs"`
	} `json:"configs"`
}

type endpointConfig struct {
	EndpointConfig struct {
		ClusterName string `json:"cluster_name"`
		Endpoints   []struct {
			LbEndpoints []struct {
				Metadata struct {
					FilterMetadata struct {
						Gateway struct {
							Endpoint string `json:"endpoint"`
						} `json:"gateway"`
					} `json:"filter_metadata"`
				} `json:"metadata"`
			} `json:"lb_endpoints"`
		} `json:"endpoints"`
	} `json:"endpoint_config"`
}

// withoutMetadata counts, for each cluster in d, the hosts without an
// endpoint name.
func (d endpointsDump) withoutMetadata() map[string]int {
	out := map[string]int{}
	for _, c := range d.Configs {
		for _, ec := range slices.Concat(c.Static, c.Dynamic) {
			out[ec.EndpointConfig.ClusterName] += 0
			for _, loc := range ec.EndpointConfig.Endpoints {
				for _, h := range loc.LbEndpoints {
					if h.Metadata.FilterMetadata.Gateway.Endpoint == "" {
						out[ec.EndpointConfig.ClusterName]++
					}
				}
			}
		}
	}
	return out
}
