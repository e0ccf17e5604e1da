package extproc

import (
	"bytes"
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/modelgateway/gateway/internal/usage"
)

// A reply naming a catalogue model dearer than the one requested is
// settled at the dearer model's price, the ledger entry naming it as the
// priced model (so its cost is rebuilt from the catalogue as recorded),
// counted and reported once per settlement; a reply naming a cheaper or an
// unknown model is settled at the requested model's price.
func TestDearerReportedModelSettledAtItsPrice(t *testing.T) {
	cases := []struct {
		name, requested, reported string
		wantPriced                usage.PricedModel
	}{
		{"dearer", "claude-haiku-4-5", "claude-sonnet-4-5", "fake-claude-1"},
		{"dearer, dated", "claude-haiku-4-5", "fake-claude-1-20250101", "fake-claude-1"},
		{"cheaper", "claude-sonnet-4-5", "claude-haiku-4-5", "fake-claude-1"},
		{"unknown", "claude-haiku-4-5", "claude-opus-99", "fake-claude-1-mini"},
		{"same", "claude-haiku-4-5", "claude-haiku-4-5", "fake-claude-1-mini"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.srv.metrics = NewMetrics(prometheus.NewRegistry(), "alpha")
			type mismatch struct {
				requested, priced usage.PricedModel
				account           string
			}
			var heard []mismatch
			r.srv.onDearer = func(upstream, accountID, keyID string, requested, priced usage.PricedModel) {
				heard = append(heard, mismatch{requested, priced, accountID})
			}
			body := bytes.Replace(reqBody, []byte("claude-sonnet-4-5"), []byte(tc.requested), 1)
			evs := append([][]byte{bytes.Replace(events[0], []byte(`"model":"claude-sonnet-4-5"`), []byte(`"model":"`+tc.reported+`"`), 1)}, events[1:]...)
			r.requestWith(t, body, evs)
			if err := r.srv.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			entries, _, err := r.st.Ledger(context.Background(), r.acct, "", 10)
			if err != nil || len(entries) != 1 {
				t.Fatalf("ledger %v %v", entries, err)
			}
			e := entries[0]
			m, ok := r.upstream.Prices.Lookup(string(e.Priced))
			if !ok {
				t.Fatalf("priced model %q not in the catalogue", e.Priced)
			}
			want := m.Price(e.Usage, e.ServiceTier, "").Cost
			if e.Priced != tc.wantPriced || e.Cost != want || want == 0 || string(e.Requested) != tc.requested || string(e.Reported) != tc.reported {
				t.Fatalf("ledger entry priced %q at %d (requested %q, reported %q); want %q at %d", e.Priced, e.Cost, e.Requested, e.Reported, tc.wantPriced, want)
			}
			requested, _ := r.upstream.Prices.Lookup(tc.requested)
			dearer := tc.wantPriced != requested.Name
			if dearer && e.Cost <= requested.Price(e.Usage, e.ServiceTier, "").Cost {
				t.Fatalf("cost %d is not above the requested model's", e.Cost)
			}
			wantHeard := 0
			if dearer {
				wantHeard = 1
			}
			if len(heard) != wantHeard || dearer && (heard[0] != mismatch{requested.Name, tc.wantPriced, r.acct}) {
				t.Fatalf("reported %+v, want %d", heard, wantHeard)
			}
			if got := testutil.ToFloat64(r.srv.metrics.dearerModel.WithLabelValues("alpha")); got != float64(wantHeard) {
				t.Fatalf("gateway_model_mismatches_total %v, want %d", got, wantHeard)
			}
		})
	}
}
