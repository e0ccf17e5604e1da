package extproc

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// The usage series are created under real kind names only, and their help
// names every kind.
func TestTokenSeriesKinds(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "u")
	m.InitModels("u", []string{"m"})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "gateway_tokens_total" {
			continue
		}
		for _, k := range usage.Kinds {
			if !strings.Contains(f.GetHelp(), k.Name) {
				t.Errorf("help lacks %s: %q", k.Name, f.GetHelp())
			}
		}
		if len(f.GetMetric()) == 0 {
			t.Fatal("no series created")
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if _, ok := usage.KindNamed(l.GetValue()); l.GetName() == "kind" && !ok {
					t.Errorf("series of kind %q, not a usage kind", l.GetValue())
				}
			}
		}
		return
	}
	t.Fatal("no gateway_tokens_total")
}

// A settlement counts under its own upstream, model, status and endpoint,
// whatever series earlier settlements found first (observe keeps them by
// model).
func TestObserveCountsEachSettlementInItsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, "u", "v")
	for _, s := range []struct {
		upstream, model string
		st              account.Settlement
	}{
		{"u", "m1", account.Settlement{Status: 200, Endpoint: "primary", Cost: 2_000_000_000, Usage: usage.Usage{Input: 10, Output: 3}}},
		{"u", "m1", account.Settlement{Status: 200, Endpoint: "reserve", Cost: 1_000_000_000, Usage: usage.Usage{Input: 1}}},
		{"u", "m1", account.Settlement{Status: 429, Endpoint: "primary"}},
		{"u", "m2", account.Settlement{Status: 200, Endpoint: "primary", Usage: usage.Usage{CacheRead: 7}}},
		{"v", "m1", account.Settlement{Status: 500}},
	} {
		m.observe(s.upstream, s.model, s.st)
	}
	want := map[string]float64{
		"gateway_requests_total{endpoint=primary,model=m1,status=2xx,upstream=u}": 1,
		"gateway_requests_total{endpoint=reserve,model=m1,status=2xx,upstream=u}": 1,
		"gateway_requests_total{endpoint=primary,model=m1,status=4xx,upstream=u}": 1,
		"gateway_requests_total{endpoint=primary,model=m2,status=2xx,upstream=u}": 1,
		"gateway_requests_total{endpoint=none,model=m1,status=5xx,upstream=v}":    1,
		"gateway_tokens_total{kind=input,model=m1,upstream=u}":                    11,
		"gateway_tokens_total{kind=output,model=m1,upstream=u}":                   3,
		"gateway_tokens_total{kind=cache_read,model=m2,upstream=u}":               7,
		"gateway_cost_usd_total{model=m1,upstream=u}":                             3,
		"gateway_cost_usd_total{model=m2,upstream=u}":                             0,
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		switch f.GetName() {
		case "gateway_requests_total", "gateway_tokens_total", "gateway_cost_usd_total":
		default:
			continue
		}
		for _, s := range f.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[f.GetName()+"{"+strings.Join(labels, ",")+"}"] = s.GetCounter().GetValue()
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d series, want %d: %v", len(got), len(want), got)
	}
}
