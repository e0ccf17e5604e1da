package extproc

// onward is how a request goes on to the vendor once a phase lets it: the
// headers it sets (in order) and removes, the body sent in place of the
// client's (when edited), and whether the route is matched again (its key
// steered to another aggregate). The ext_proc adapter sends it as Envoy's
// mutations (envoy.go, mutation).
type onward struct {
	set     [][2]string
	remove  []string
	body    []byte
	edited  bool
	reroute bool
}

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
