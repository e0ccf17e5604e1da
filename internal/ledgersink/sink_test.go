package ledgersink

import (
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/ledger"
	"github.com/modelgateway/gateway/internal/usage"
)

// Every usage kind has its columns in the schema: a kind added to the
// ledger fails here until a migration adds them.
func TestEveryUsageKindHasColumns(t *testing.T) {
	schema := strings.Join(migrations, "\n")
	for _, k := range usage.Kinds {
		c, ok := usageColumns[k.Name]
		if !ok {
			t.Fatalf("usage kind %q has no column", k.Name)
		}
		if !strings.Contains(schema, "\t"+c[0]+" ") && !strings.Contains(schema, "ADD COLUMN "+c[0]+" ") {
			t.Errorf("no migration creates column %s", c[0])
		}
		if k.Priced() && (c[1] == "" || !strings.Contains(schema, "\t"+c[1]+" ") && !strings.Contains(schema, "ADD COLUMN "+c[1]+" ")) {
			t.Errorf("priced kind %q has no price column in the schema", k.Name)
		}
	}
}

// The insert names as many columns as a row has values.
func TestInsertMatchesRow(t *testing.T) {
	n := strings.Count(insertSQL, "$")
	args := row("label", ledger.Entry{ID: "1700000000000-3"})
	if n != len(args) {
		t.Fatalf("insert has %d placeholders, a row %d values", n, len(args))
	}
	if got := entryTime("1700000000000-3").UnixMilli(); got != 1700000000000 {
		t.Fatalf("entry time %d", got)
	}
}

func TestFlags(t *testing.T) {
	if f := Flags(account.Settlement{}); f == nil || len(f) != 0 {
		t.Fatalf("no flags: %#v, want an empty list", f)
	}
	f := Flags(account.Settlement{Estimated: true, Fallback: true, Interrupted: true, Reconciled: true, Capped: true, TierUnknown: true})
	if strings.Join(f, ",") != "estimated,fallback_price,interrupted,reconciled,capped,tier_unknown" {
		t.Fatalf("flags %v", f)
	}
}
