package admin

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/modelgateway/gateway/internal/filltest"
	"github.com/modelgateway/gateway/internal/ledger"
)

// Every field of a ledger entry reaches the admin API's entry, and so
// gatewayctl ledger --json and gatewayctl ledger export, which print it as
// protojson: changing any one field of a filled entry changes the output.
func TestLedgerEntryShowsEveryField(t *testing.T) {
	show := func(e ledger.Entry) string {
		b, err := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}.Marshal(ledgerToProto(e))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	base := show(filltest.Filled[ledger.Entry]())
	filltest.Vary(func(path string, changed ledger.Entry) {
		if filltest.NotInLedger(path) {
			return
		}
		if show(changed) == base {
			t.Errorf("the admin API's ledger entry does not show %s", path)
		}
	})
}
