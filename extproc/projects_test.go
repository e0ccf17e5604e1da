package extproc

import (
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
)

// A project's request-rate refusal is remembered for the keys of that
// project only: another project's key, and a key of the default project,
// of the same account are not refused at their headers.
func TestRefusalMemoryByProject(t *testing.T) {
	r := newRefusalMemory()
	now := time.Unix(1_800_000_000, 0)
	a := account.Key{ID: "key_a", AccountID: "acct_1", ProjectID: "prj_a"}
	a2 := account.Key{ID: "key_a2", AccountID: "acct_1", ProjectID: "prj_a"}
	b := account.Key{ID: "key_b", AccountID: "acct_1", ProjectID: "prj_b"}
	def := account.Key{ID: "key_d", AccountID: "acct_1"}
	r.remember(a, account.Decision{Outcome: account.RateLimited, Level: account.ProjectLevel, RetryAfter: 5 * time.Second, Limit: 1, Used: 1}, now)
	if d, ok := r.recall(a2, now.Add(time.Second)); !ok || d.Level != account.ProjectLevel || d.RetryAfter != 4*time.Second {
		t.Fatalf("a key of the refused project: %+v %v", d, ok)
	}
	for _, k := range []account.Key{b, def} {
		if d, ok := r.recall(k, now.Add(time.Second)); ok {
			t.Fatalf("key %s of another project refused at its headers: %+v", k.ID, d)
		}
	}
}
