package extproc

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

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
