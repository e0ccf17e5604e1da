package endpoints

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

const sample = `{"cluster_statuses":[
 {"name":"alpha","host_statuses":[
   {"health_status":{"failed_outlier_check":true,"eds_health_status":"HEALTHY"},"address":{}},
   {"priority":1,"health_status":{"eds_health_status":"HEALTHY"}}]},
 {"name":"beta","host_statuses":[
   {"health_status":{"eds_health_status":"HEALTHY"}},
   {"priority":1,"health_status":{"eds_health_status":"HEALTHY"}}]},
 {"name":"gamma","host_statuses":[
   {"health_status":{"failed_active_health_check":true}},
   {"priority":1,"health_status":{"failed_active_health_check":true}}]},
 {"name":"control","host_statuses":[{"health_status":{}}]}]}`

func TestDecide(t *testing.T) {
	var cs clusters
	if err := json.Unmarshal([]byte(sample), &cs); err != nil {
		t.Fatal(err)
	}
	got := Decide(cs, []string{"alpha", "beta", "gamma"})
	want := map[string]string{"alpha": Reserve, "beta": Primary, "gamma": Unknown}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestWatcherPolls(t *testing.T) {
	body := sample
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/clusters" || r.URL.Query().Get("format") != "json" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	}))
	defer srv.Close()
	w := NewWatcher(srv.URL, []string{"alpha", "beta"}, nil, nil)
	if r := w.Endpoints(); r["alpha"] != Unknown {
		t.Fatalf("before the first poll: %v", r)
	}
	if err := w.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := w.Endpoints(); r["alpha"] != Reserve || r["beta"] != Primary {
		t.Fatalf("routes = %v", r)
	}
	srv.Close()
	if err := w.Poll(context.Background()); err == nil {
		t.Fatal("poll of a closed admin succeeded")
	}
	if r := w.Endpoints(); r["alpha"] != Unknown {
		t.Fatalf("after Envoy went away: %v", r)
	}
}
