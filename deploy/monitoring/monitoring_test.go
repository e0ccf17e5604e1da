// Package monitoring holds the Prometheus alert rules and the Grafana
// dashboard of the model gateway. It is a module of its own so that the
// Prometheus packages its tests use to check the rules stay out of the
// gateway's dependencies.
package monitoring

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

var promql = parser.NewParser(parser.Options{})

// exportedMetrics reads the names of the gateway's own series from the
// repository's Go sources (every `Name: "gateway_..."`), with the series a
// histogram adds.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	re := regexp.MustCompile(`Name:\s*"(gateway_[a-z_]+)"`)
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".venv" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(b, -1) {
			n := string(m[1])
			names[n] = true
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				names[n+suffix] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !names["gateway_store_up"] || !names["gateway_requests_total"] {
		t.Fatalf("the sidecar's metric names were not found in the sources: %v", names)
	}
	return names
}

// checkExpr parses a PromQL expression and checks that every gateway_
// series it selects is one the sidecar exports.
func checkExpr(t *testing.T, where, expr string, known map[string]bool) {
	t.Helper()
	e, err := promql.ParseExpr(strings.ReplaceAll(expr, "$__rate_interval", "5m"))
	if err != nil {
		t.Errorf("%s: %v", where, err)
		return
	}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && strings.HasPrefix(vs.Name, "gateway_") && !known[vs.Name] {
			t.Errorf("%s: %s is not a series the sidecar exports", where, vs.Name)
		}
		return nil
	})
}

// The alert rules pass Prometheus's own rule checker (what `promtool check
// rules` runs), cover the failures an operator must hear about, and use
// only series the sidecar exports.
func TestAlertRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile("alerts.yaml", false, model.UTF8Validation, promql, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Error(err)
	}
	if len(errs) > 0 {
		return
	}
	known := exportedMetrics(t)
	alerts := map[string]bool{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			checkExpr(t, r.Alert, r.Expr, known)
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q", r.Alert, s)
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("%s: no summary", r.Alert)
			}
		}
	}
	for _, want := range []string{
		"GatewayStoreDown", "GatewayUpstreamNoEndpoint", "GatewayUpstreamOnReserve",
		"GatewaySpoolGrowing", "GatewayErrorRatio", "GatewaySettlementLag", "GatewaySettlementsLost", "GatewayUsageCapped",
		"GatewayModelMismatch",
		"GatewayLedgerSinkRejects",
	} {
		if !alerts[want] {
			t.Errorf("no alert %s", want)
		}
	}
}

// dashboard is the part of Grafana's dashboard model the checks read;
// decoding is strict about these fields' types.
type dashboard struct {
	UID           string `json:"uid"`
	Title         string `json:"title"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID         int    `json:"id"`
		Title      string `json:"title"`
		Type       string `json:"type"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
		GridPos struct{ H, W, X, Y int } `json:"gridPos"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// The dashboard is a valid Grafana dashboard model: a uid and title, a
// Prometheus datasource variable, unique panel ids of known types laid out
// on the 24-column grid without overlaps, and queries that parse and use
// only series the sidecar exports.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile("dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Fatalf("uid %q title %q schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasDS {
		t.Fatal("no Prometheus datasource variable")
	}
	known := exportedMetrics(t)
	types := map[string]bool{"timeseries": true, "stat": true, "table": true, "gauge": true, "bargauge": true}
	ids := map[int]bool{}
	cells := map[[2]int]int{}
	for _, p := range d.Panels {
		if ids[p.ID] || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or used twice", p.Title, p.ID)
		}
		ids[p.ID] = true
		if !types[p.Type] || p.Title == "" {
			t.Errorf("panel %d: type %q title %q", p.ID, p.Type, p.Title)
		}
		if p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v", p.Title, p.Datasource)
		}
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 || g.Y < 0 {
			t.Errorf("panel %q: gridPos %+v", p.Title, g)
		}
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Errorf("panel %q overlaps panel %d", p.Title, other)
				}
				cells[[2]int{x, y}] = p.ID
			}
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		refs := map[string]bool{}
		for _, q := range p.Targets {
			if refs[q.RefID] || q.RefID == "" {
				t.Errorf("panel %q: refId %q", p.Title, q.RefID)
			}
			refs[q.RefID] = true
			checkExpr(t, p.Title, q.Expr, known)
		}
	}
}
