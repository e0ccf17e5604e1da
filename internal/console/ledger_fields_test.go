package console

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/filltest"
	"github.com/modelgateway/gateway/internal/ledger"
)

// Every field of a ledger entry reaches both exports, /v1/usage/ledger's
// JSON and the CSV: changing any one field of a filled entry changes each.
func TestLedgerExportsShowEveryField(t *testing.T) {
	exports := map[string]func(e ledger.Entry) string{
		"JSON": func(e ledger.Entry) string {
			b, err := json.Marshal(newLedgerEntry(e, "label"))
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		},
		"CSV": func(e ledger.Entry) string { return strings.Join(csvRow(e, "label"), ",") },
	}
	for name, show := range exports {
		base := show(filltest.Filled[ledger.Entry]())
		filltest.Vary(func(path string, changed ledger.Entry) {
			if !filltest.NotInLedger(path) && show(changed) == base {
				t.Errorf("the %s export does not show %s", name, path)
			}
		})
	}
	if h, r := CSVHeader(), csvRow(ledger.Entry{}, ""); len(h) != len(r) {
		t.Fatalf("the CSV header has %d columns, a row %d", len(h), len(r))
	}
}
