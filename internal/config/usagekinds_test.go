package config

import (
	"reflect"
	"testing"

	"github.com/modelgateway/gateway/internal/usage"
)

// An operator can price every priced usage kind, and Fields names each
// price by its kind: a kind added to internal/usage fails here until Price
// has a field for it, and a field added to Price fails until Fields names
// it.
func TestPriceFieldsCoverPricedKinds(t *testing.T) {
	var p Price
	v := reflect.ValueOf(&p).Elem()
	prices := 0
	for i := range v.NumField() {
		if f := v.Field(i); f.Type() == reflect.TypeFor[*float64]() {
			prices++
			x := float64(prices)
			f.Set(reflect.ValueOf(&x))
		}
	}
	fields := p.Fields()
	if len(fields) != prices {
		t.Errorf("Fields names %d of Price's %d prices: %v", len(fields), prices, fields)
	}
	for _, k := range usage.Kinds {
		if _, ok := fields[k.Name]; ok != k.Priced() {
			t.Errorf("usage kind %q (priced %v): in Fields %v", k.Name, k.Priced(), ok)
		}
	}
	for name := range fields {
		if _, ok := usage.KindNamed(name); !ok {
			t.Errorf("Fields names %q, which is no usage kind", name)
		}
	}
}
