package main

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/config"
)

// --port-offset moves every listener: each address field of
// config.Listeners is filled (found by reflection, so that a listener added
// later is covered) and must come back shifted.
func TestShiftListenersMovesEveryListener(t *testing.T) {
	var l config.Listeners
	v := reflect.ValueOf(&l).Elem()
	want := map[string]string{}
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.String {
			continue
		}
		name := v.Type().Field(i).Name
		f.SetString("127.0.0.1:" + strconv.Itoa(9000+i))
		want[name] = "127.0.0.1:" + strconv.Itoa(9100+i)
	}
	if len(want) < 8 {
		t.Fatalf("only %d listeners found", len(want))
	}
	if err := shiftListeners(&l, 100); err != nil {
		t.Fatal(err)
	}
	for name, addr := range want {
		if got := v.FieldByName(name).String(); got != addr {
			t.Errorf("%s: %s, want %s", name, got, addr)
		}
	}

	// An unset listener stays unset; a port pushed out of range is refused.
	l = config.Listeners{Public: "[::1]:8080"}
	if err := shiftListeners(&l, 1); err != nil || l.Public != "[::1]:8081" || l.Console != "" {
		t.Errorf("%+v %v", l, err)
	}
	if err := shiftListeners(&config.Listeners{Public: "127.0.0.1:65000"}, 1000); err == nil || !strings.Contains(err.Error(), "65000") {
		t.Errorf("out of range: %v", err)
	}
}
