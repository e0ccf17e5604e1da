package spool

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// leaf is one field of account.Settlement that holds a value (not a struct),
// by its path of field indexes.
type leaf struct {
	name  string // "Usage.Input"
	index []int
}

// leaves lists every field of typ that holds a value, recursing into
// structs. time.Time is a leaf. An unexported field or a kind that fill
// cannot set fails the test: a field the test cannot fill is a field it
// cannot check.
func leaves(t *testing.T, typ reflect.Type, prefix string, index []int) []leaf {
	t.Helper()
	var out []leaf
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := prefix + f.Name
		idx := append(append([]int(nil), index...), i)
		if !f.IsExported() {
			t.Fatalf("%s: unexported field; teach this test to fill it", name)
		}
		switch {
		case f.Type == reflect.TypeFor[time.Time]():
		case f.Type.Kind() == reflect.Struct:
			out = append(out, leaves(t, f.Type, name+".", idx)...)
			continue
		case f.Type.Kind() == reflect.String, f.Type.Kind() == reflect.Bool,
			f.Type.Kind() == reflect.Int, f.Type.Kind() == reflect.Int64:
		default:
			t.Fatalf("%s: cannot fill a %s; teach this test to fill it", name, f.Type)
		}
		out = append(out, leaf{name, idx})
	}
	return out
}

// fill sets leaf l of v to a non-zero value of its own, n telling the
// leaves apart. Times are whole milliseconds in UTC: the ledger keeps
// milliseconds, so a settlement is never more precise than its entry.
func fill(v reflect.Value, l leaf, n int) {
	f := v.FieldByIndex(l.index)
	switch f.Kind() {
	case reflect.String:
		f.SetString(fmt.Sprintf("%s-%d", l.name, n))
	case reflect.Bool:
		f.SetBool(true)
	case reflect.Int, reflect.Int64:
		f.SetInt(int64(1000 + n))
	case reflect.Struct: // time.Time
		t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		f.Set(reflect.ValueOf(t0.Add(time.Duration(n) * 1001 * time.Millisecond)))
	}
}

// carried is what the spool keeps of st: all of it, except the rates of
// kinds that are not priced on their own (reasoning is part of output):
// the ledger records no rate for them.
func carried(st account.Settlement) account.Settlement {
	for _, k := range usage.Kinds {
		if !k.Priced() {
			k.Set(&st.Rates, 0)
		}
	}
	return st
}

func roundTrip(t *testing.T, st account.Settlement) account.Settlement {
	t.Helper()
	line, err := encode(st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(line[:len(line)-1])
	if err != nil {
		t.Fatalf("decode %s: %v", line, err)
	}
	return got
}

// diff names the leaves in which got and want differ.
func diff(got, want account.Settlement, ls []leaf) []string {
	var out []string
	g, w := reflect.ValueOf(got), reflect.ValueOf(want)
	for _, l := range ls {
		if a, b := g.FieldByIndex(l.index).Interface(), w.FieldByIndex(l.index).Interface(); !reflect.DeepEqual(a, b) {
			out = append(out, fmt.Sprintf("%s: got %v, want %v", l.name, a, b))
		}
	}
	return out
}

// Every field of a settlement survives the spool, found by reflection: a
// field added to account.Settlement and not carried (by the ledger encoding
// the spool writes) fails here. Each field also travels alone, so that
// two fields swapped on the way (two flags, say) show.
func TestRecordCarriesEveryField(t *testing.T) {
	ls := leaves(t, reflect.TypeFor[account.Settlement](), "", nil)
	if len(ls) < 2*len(usage.Kinds) {
		t.Fatalf("%d leaves: the usage structs were not reached", len(ls))
	}
	var full account.Settlement
	for i, l := range ls {
		fill(reflect.ValueOf(&full).Elem(), l, i+1)
	}
	want := carried(full)
	if got := roundTrip(t, full); !reflect.DeepEqual(got, want) {
		t.Fatalf("every field set; not carried:\n%s", strings.Join(diff(got, want, ls), "\n"))
	}
	for i, l := range ls {
		var st account.Settlement
		fill(reflect.ValueOf(&st).Elem(), l, i+1)
		// A record without a request id is refused.
		if l.name != "RequestID" {
			st.RequestID = "req_1"
		}
		want := carried(st)
		if got := roundTrip(t, st); !reflect.DeepEqual(got, want) {
			t.Errorf("%s alone: %s", l.name, strings.Join(diff(got, want, ls), "; "))
		}
	}
}
