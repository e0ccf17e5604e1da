package extproc

// A pooled reply's headroom: Envoy's listener filter (envoy/blame.go,
// headroomLua) puts the lowest remaining fraction of the vendor's
// rate-limit headers of every reply in the request's dynamic metadata,
// which comes with the reply's first body chunk. The pool hears how much
// of the served key's limits is left on every reply, not only on
// refusals (Envoy's upstream log), and shares its capacity before the
// vendor refuses anyone.

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/modelgateway/gateway/internal/keypool"
)

// headroom passes the reply's headroom in md to the pool of the key that
// served it.
func (x *exchange) headroom(md *corev3.Metadata) {
	p := x.upstream.Pool
	if p == nil || x.vendorKey == "" {
		return
	}
	v, ok := md.GetFilterMetadata()[keypool.HeadroomNamespace].GetFields()[keypool.HeadroomField]
	if !ok {
		return
	}
	if low := v.GetNumberValue(); low >= 0 && low <= 1 {
		p.Headroom(x.vendorKey, low)
	}
}
