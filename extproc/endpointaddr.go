package extproc

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/modelgateway/gateway/internal/config"
)

// endpointAddrs tells which configured endpoint (primary or reserve) an
// upstream host belongs to, from the address Envoy connected to (the
// upstream.address attribute, "ip:port"): the reduced Envoy contract has
// no host metadata to say so. An address matches as configured (an IP
// literal, or the name itself) or, for a host name, any address it
// resolves to with the same port. The primary wins where both match.
type endpointAddrs struct {
	// only is the endpoint of an upstream without a reserve: every reply
	// is its, whatever the address.
	only   string
	static map[string]string // "host:port" as configured → endpoint
	names  []namedEndpoint   // endpoints configured by host name
	lookup func(ctx context.Context, host string) ([]string, error)

	mu       sync.Mutex
	resolved map[string]string // "ip:port" → endpoint, from names
	at       time.Time         // of the last resolution
}

type namedEndpoint struct {
	host, port, endpoint string
}

// reresolveAfter spaces the resolutions an unknown address triggers: a
// name's addresses change (DNS), but an address that matches nothing must
// not cost a lookup per reply.
const reresolveAfter = 5 * time.Second

func newEndpointAddrs(u config.Upstream) *endpointAddrs {
	a := &endpointAddrs{static: map[string]string{}, resolved: map[string]string{}, lookup: net.DefaultResolver.LookupHost}
	eps := u.Endpoints()
	if len(eps) == 1 {
		a.only = "primary"
	}
	for i, ep := range eps {
		name := "primary"
		if i == 1 {
			name = "reserve"
		}
		t, err := ep.Parse()
		if err != nil {
			continue // validated at load
		}
		port := strconv.Itoa(t.Port)
		key := net.JoinHostPort(t.Host, port)
		if _, ok := a.static[key]; !ok {
			a.static[key] = name
		}
		if net.ParseIP(t.Host) == nil {
			a.names = append(a.names, namedEndpoint{t.Host, port, name})
		}
	}
	return a
}

// endpointOf names the endpoint serving from addr, or "" when none
// matches.
func (a *endpointAddrs) endpointOf(addr string) string {
	if a.only != "" {
		return a.only
	}
	if ep, ok := a.static[addr]; ok {
		return ep
	}
	if len(a.names) == 0 {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if ep, ok := a.resolved[addr]; ok {
		return ep
	}
	if !a.at.IsZero() && time.Since(a.at) < reresolveAfter {
		return ""
	}
	a.resolve()
	return a.resolved[addr]
}

// resolve looks every named endpoint up again; a.mu is held. A name that
// does not resolve keeps its previous addresses.
func (a *endpointAddrs) resolve() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	a.at = time.Now()
	next := map[string]string{}
	for _, n := range a.names {
		ips, err := a.lookup(ctx, n.host)
		if err != nil {
			for k, ep := range a.resolved {
				if ep == n.endpoint {
					next[k] = ep
				}
			}
			continue
		}
		for _, ip := range ips {
			k := net.JoinHostPort(ip, n.port)
			if _, ok := next[k]; !ok {
				next[k] = n.endpoint
			}
		}
	}
	a.resolved = next
}
