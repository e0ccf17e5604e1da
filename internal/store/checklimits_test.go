package store

import (
	"reflect"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/config"
)

// Every field of account.Limits, the ones added after this test too, is
// refused negative and above its bound, and accepted at the bound.
func TestCheckLimitsCoversEveryField(t *testing.T) {
	typ := reflect.TypeFor[account.Limits]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		bound := int64(MaxNanoUSD)
		if f.Name == "ConcurrencyWaitSeconds" {
			bound = int64(config.MaxConcurrencyWait.Seconds())
		}
		for _, c := range []struct {
			n  int64
			ok bool
		}{{-1, false}, {bound, true}, {bound + 1, false}} {
			var l account.Limits
			reflect.ValueOf(&l).Elem().Field(i).SetInt(c.n)
			err := CheckLimits(l)
			if (err == nil) != c.ok {
				t.Errorf("%s = %d: CheckLimits says %v; want ok %v", f.Name, c.n, err, c.ok)
			}
			if err != nil && c.n < 0 && !strings.Contains(err.Error(), f.Name) {
				t.Errorf("%s = %d: the error %q does not name the field", f.Name, c.n, err)
			}
		}
	}
}
