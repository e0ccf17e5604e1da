package usage

import "fmt"

// ByName returns the figures of u that are not zero, keyed by kind name, or
// nil when all are zero: the form in which checkpoints and spooled
// settlements store usage and rates.
func ByName(u Usage) map[string]int64 {
	var m map[string]int64
	for _, k := range Kinds {
		if n := k.Of(u); n != 0 {
			if m == nil {
				m = make(map[string]int64, len(Kinds))
			}
			m[k.Name] = n
		}
	}
	return m
}

// FromNames is the reverse of ByName. A name that is no kind is an error;
// the figures of the kinds it knows are set all the same.
func FromNames(m map[string]int64) (Usage, error) {
	var u Usage
	var err error
	for name, n := range m {
		k, ok := KindNamed(name)
		if !ok {
			err = fmt.Errorf("unknown usage kind %q", name)
			continue
		}
		k.Set(&u, n)
	}
	return u, err
}
