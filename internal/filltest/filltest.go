// Package filltest fills every field of a struct by reflection, so that a
// test can show that each field of a record reaches an output: a field
// added to the record later is filled too, and fails the test until it
// reaches the output.
package filltest

import (
	"fmt"
	"reflect"
	"time"
)

// Leaf is one field of a filled struct that holds a value of its own: a
// string, number or bool, or a time.Time (whose own fields are not
// walked). Path names it from the top, "Settlement.Usage.Input".
type Leaf struct {
	Path string
	v    reflect.Value
}

// Fill sets every exported leaf of the struct p points to, nested structs
// included, to a non-zero value distinct from every other leaf's, and
// returns the leaves in field order.
func Fill(p any) []Leaf {
	v := reflect.ValueOf(p)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic(fmt.Sprintf("filltest: Fill of %T, want a pointer to a struct", p))
	}
	var leaves []Leaf
	walk(v.Elem(), "", &leaves)
	for i, l := range leaves {
		set(l.v, int64(i+1))
	}
	return leaves
}

// Filled is a T with every leaf filled (Fill).
func Filled[T any]() T {
	var v T
	Fill(&v)
	return v
}

// Vary calls f once per leaf of T, with its path and a filled T (Filled)
// in which only that leaf holds another value (false for a bool), so that
// f can check that the change shows in an output.
func Vary[T any](f func(path string, changed T)) {
	var probe T
	n := len(Fill(&probe))
	for i := range n {
		var changed T
		l := Fill(&changed)[i]
		set(l.v, int64(n+i+1))
		if l.v.Kind() == reflect.Bool {
			l.v.SetBool(false)
		}
		f(l.Path, changed)
	}
}

var timeType = reflect.TypeOf(time.Time{})

func walk(v reflect.Value, prefix string, leaves *[]Leaf) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		path := prefix + f.Name
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct && f.Type != timeType {
			walk(fv, path+".", leaves)
			continue
		}
		*leaves = append(*leaves, Leaf{Path: path, v: fv})
	}
}

// set gives a leaf the value n in its kind: the string "vN", the number N,
// true, or N hours after 2026-01-01.
func set(v reflect.Value, n int64) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("v%d", n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(n))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(n))
	case reflect.Struct: // time.Time
		v.Set(reflect.ValueOf(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Hour)))
	default:
		panic(fmt.Sprintf("filltest: field of kind %s", v.Kind()))
	}
}
