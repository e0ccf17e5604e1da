package integration

import (
	"testing"

	"github.com/modelgateway/gateway/internal/pgtest"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The ledger sink's schema migrations, the entries PostgreSQL refuses set
// aside, and every ledger field kept in the table, on a real PostgreSQL.
func TestLedgerSinkOnPostgres(t *testing.T) {
	skipShort(t)
	pg := launchtest.Postgres(t)
	runWith(t, "./internal/ledgersink", []string{"TestMigrateKeepsRows", "TestRefusedEntriesSetAside", "TestTableHasEveryField", "TestReconciliationCopied"}, pgtest.Env+"="+pg.URL)
}
