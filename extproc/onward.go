package extproc

// onward is how a request goes on to the vendor once a phase lets it: the
// headers it sets (in order) and removes, the body sent in place of the
// client's (when edited), whether the route is matched again (its key
// steered to another aggregate) and, once its headers are read, what the
// gateway sees of it from there. The ext_proc adapter sends it as Envoy's
// mutations and processing mode (envoy.go).
type onward struct {
	set     [][2]string
	remove  []string
	body    []byte
	edited  bool
	reroute bool
	sees    sight
}

// A sight is what the gateway sees of a request after its headers.
type sight uint8

const (
	// seesNothing: a free request, forwarded as it is.
	seesNothing sight = iota
	// seesMetered: the body, whole, for admission; the reply as it
	// streams, for the meter.
	seesMetered
	// seesBody: the body, whole (a token count naming a stored object);
	// not the reply.
	seesBody
	// seesReply: the reply as it streams (a parked response's retrieval
	// or cancellation); not the body.
	seesReply
)

// setHeader sets header k (lower case) to v, in place of a value set
// before.
func (o *onward) setHeader(k, v string) {
	for i, kv := range o.set {
		if kv[0] == k {
			o.set[i][1] = v
			return
		}
	}
	o.set = append(o.set, [2]string{k, v})
}
