package leases

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/outbox"
)

func BenchmarkKeep(b *testing.B) {
	box, _, _, err := outbox.Open(filepath.Join(b.TempDir(), "outbox"), 16)
	if err != nil {
		b.Fatal(err)
	}
	m := New(nil, nil, Options{Outbox: box})
	rec := account.LeasedRequest{Lease: account.LeaseRef{ID: "3f2a9b1c4d5e.acct_215ffb7f68516049.key_0123456789abcdef.12", Seq: 1234, Hold: 12345678}, At: time.Now(),
		Admission: account.Admission{RequestID: "01JABCDEFGHJKMNPQRSTVWXYZ12", AccountID: "acct_215ffb7f68516049", KeyID: "key_0123456789abcdef", Priced: "claude-sonnet-4-5", Requested: "claude-sonnet-4-5", Hold: 12345678, Tokens: 4096}}
	b.ReportAllocs()
	for b.Loop() {
		s, _ := m.keep(&rec)
		box.Drop(s)
	}
}
