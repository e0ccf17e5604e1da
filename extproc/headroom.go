package extproc

// A pooled reply's headroom: Envoy's listener filter (envoy/blame.go,
// headroomLua) puts the lowest remaining fraction of the vendor's
// rate-limit headers of every reply in the request's dynamic metadata,
// which comes with the reply's first body chunk. The pool hears how much
// of the served key's limits is left on every reply, not only on
// refusals (Envoy's upstream log), and shares its capacity before the
// vendor refuses anyone.

// headroom passes the reply's headroom to the pool of the key that
// served it.
func (x *exchange) headroom(h *replyHead) {
	p := x.upstream.Pool
	if p == nil || x.vendorKey == "" || !h.hasHeadroom {
		return
	}
	if low := h.headroom; low >= 0 && low <= 1 {
		p.Headroom(x.vendorKey, low)
	}
}
