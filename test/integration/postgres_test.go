package integration

import (
	"testing"

	"github.com/modelgateway/gateway/internal/pgtest"
	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// The ledger sink's schema migrations, the entries PostgreSQL refuses set
// aside, every ledger field kept in the table, and the audit trail copied,
// on a real PostgreSQL.
func TestLedgerSinkOnPostgres(t *testing.T) {
	skipShort(t)
	pg := launchtest.Postgres(t)
	runWith(t, "./internal/ledgersink", []string{"TestMigrateKeepsRows", "TestRefusedEntriesSetAside", "TestTableHasEveryField", "TestAuditCopied", "TestReconciliationCopied"}, pgtest.Env+"="+pg.URL)
}
