package endpoints

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
	want := map[string]string{"alpha": Reserve, "beta": Primary, "gamma": None}
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
	w := NewWatcher(srv.URL, []Upstream{{Name: "alpha", Cluster: "alpha"}, {Name: "beta", Cluster: "beta"}}, nil, nil)
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

// Switches and time on the reserve are counted per upstream, from zero.
func TestWatcherCountsSwitches(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := NewWatcher("http://unused", []Upstream{{Name: "alpha", Cluster: "alpha"}}, reg, nil)
	now := time.Unix(1000, 0)
	w.now = func() time.Time { return now }
	if got := testutil.ToFloat64(w.switches.WithLabelValues("alpha", Reserve)); got != 0 {
		t.Fatalf("switches before any poll: %v", got)
	}
	step := func(d time.Duration, ep string) {
		now = now.Add(d)
		w.set(map[string]string{"alpha": ep})
	}
	step(0, Primary)             // first sight: not a switch
	step(time.Second, Reserve)   // switch 1
	step(3*time.Second, Reserve) // 3 s on the reserve
	step(2*time.Second, None)    // switch 2; 2 more seconds on the reserve
	step(time.Second, Primary)   // switch 3
	if got := testutil.ToFloat64(w.switches.WithLabelValues("alpha", Reserve)); got != 1 {
		t.Errorf("switches to reserve = %v", got)
	}
	if got := testutil.ToFloat64(w.switches.WithLabelValues("alpha", None)); got != 1 {
		t.Errorf("switches to none = %v", got)
	}
	if got := testutil.ToFloat64(w.switches.WithLabelValues("alpha", Primary)); got != 1 {
		t.Errorf("switches to primary = %v", got)
	}
	if got := testutil.ToFloat64(w.onReserve.WithLabelValues("alpha")); got != 5 {
		t.Errorf("seconds on reserve = %v, want 5", got)
	}
	if got := testutil.ToFloat64(w.gauge.WithLabelValues("alpha", Primary)); got != 1 {
		t.Errorf("gauge primary = %v", got)
	}
}

// An upstream is read from the cluster it is configured with; one whose
// cluster Envoy lacks stays unknown, and the watcher says why in one line,
// logged once; Envoy's admin not answering is a cause too.
func TestWatcherNamesMissingCluster(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(sample))
	}))
	defer srv.Close()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	w := NewWatcher(srv.URL, []Upstream{{Name: "vendor", Cluster: "beta"}, {Name: "alpha", Cluster: "alpha-primary"}, {Name: "omega", Cluster: "omega"}}, nil, log)
	for range 2 {
		if err := w.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if r := w.Endpoints(); r["vendor"] != Primary || r["alpha"] != Unknown || r["omega"] != Unknown {
		t.Fatalf("endpoints = %v", r)
	}
	if p := w.Problem("vendor"); p != "" {
		t.Errorf("vendor: problem %q", p)
	}
	want := map[string]string{
		"alpha": "no Envoy cluster for upstream alpha: expected cluster named alpha-primary (upstreams[].envoy_cluster)",
		"omega": "no Envoy cluster for upstream omega: expected cluster named omega, or set upstreams[].envoy_cluster",
	}
	for u, p := range want {
		if got := w.Problem(u); got != p {
			t.Errorf("%s: problem %q, want %q", u, got, p)
		}
		if n := strings.Count(logs.String(), p); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", p, n, logs.String())
		}
	}
	srv.Close()
	w.Poll(context.Background())
	if p := w.Problem("vendor"); !strings.Contains(p, "admin interface at "+srv.URL) || strings.Contains(p, "\n") {
		t.Errorf("Envoy gone: problem %q", p)
	}
}

// A pool's aggregate has no hosts: its upstream is on the primary while any
// key's primary cluster has a healthy host, else on the reserve.
func TestPoolMembersDecide(t *testing.T) {
	host := func(healthy bool) string {
		return fmt.Sprintf(`{"priority":0,"health_status":{"failed_active_health_check":%v}}`, !healthy)
	}
	var primaryUp atomic.Bool
	primaryUp.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"cluster_statuses":[{"name":"alpha"},
			{"name":"alpha--k1--primary","host_statuses":[%s]},{"name":"alpha--k2--primary","host_statuses":[%s]},
			{"name":"alpha--k1--reserve","host_statuses":[%s]},{"name":"alpha--k2--reserve","host_statuses":[%s]}]}`,
			host(primaryUp.Load()), host(primaryUp.Load()), host(true), host(true))
	}))
	defer srv.Close()
	up := Upstream{Name: "alpha", Cluster: "alpha", Members: map[string]int{
		"alpha--k1--primary": 0, "alpha--k2--primary": 0, "alpha--k1--reserve": 1, "alpha--k2--reserve": 1}}
	w := NewWatcher(srv.URL, []Upstream{up}, nil, nil)
	if err := w.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.Endpoints()["alpha"]; got != Primary {
		t.Fatalf("healthy primaries: %q", got)
	}
	primaryUp.Store(false)
	if err := w.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.Endpoints()["alpha"]; got != Reserve {
		t.Fatalf("primaries down: %q", got)
	}
}
