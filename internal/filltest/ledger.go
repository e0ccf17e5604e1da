package filltest

import (
	"reflect"
	"strings"

	"github.com/modelgateway/gateway/internal/usage"
)

// NotInLedger reports whether the leaf at path of a filled
// account.Settlement (or ledger.Entry, which embeds one) is one the
// ledger does not keep: the lease the request was admitted from (the
// spool's alone) and the rate of a usage kind not priced on its own.
func NotInLedger(path string) bool {
	path = strings.TrimPrefix(path, "Settlement.")
	if strings.HasPrefix(path, "Lease.") {
		return true
	}
	rate, ok := strings.CutPrefix(path, "Rates.")
	return ok && unpricedFields[rate]
}

// unpricedFields are the usage.Usage fields of the kinds not priced.
var unpricedFields = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range usage.Kinds {
		if k.Priced() {
			continue
		}
		var u usage.Usage
		k.Set(&u, 1)
		v := reflect.ValueOf(u)
		for i := range v.NumField() {
			if !v.Field(i).IsZero() {
				m[v.Type().Field(i).Name] = true
			}
		}
	}
	return m
}()
