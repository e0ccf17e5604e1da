package outbox

import (
	"encoding/binary"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/filltest"
)

// A record and a settlement read back from the outbox with every field
// they hold: a field added to either later is filled here too, and fails
// the test until the entry carries it.
func TestEntriesCarryEveryField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox")
	o, _, _ := mustOpen(t, path, 4)
	rec := filltest.Filled[account.LeasedRequest]()
	st := filltest.Filled[account.Settlement]()
	if _, ok := o.KeepRecord(rec); !ok {
		t.Fatal("record not kept")
	}
	if _, ok := o.KeepSettlement(st); !ok {
		t.Fatal("settlement not kept")
	}
	o.Close()
	o, left, _ := mustOpen(t, path, 4)
	defer o.Close()
	if len(left) != 2 {
		t.Fatalf("%d entries, want 2", len(left))
	}
	for _, e := range left {
		kind, gotRec, gotSt, err := Decode(e)
		switch {
		case err != nil:
			t.Fatal(err)
		case kind == KindRecord && !reflect.DeepEqual(gotRec, rec):
			t.Errorf("record read back as\n%+v\nwant\n%+v", gotRec, rec)
		case kind == KindSettlement && !reflect.DeepEqual(gotSt, st):
			t.Errorf("settlement read back as\n%+v\nwant\n%+v", gotSt, st)
		}
	}
}

// An entry of no known kind, or without the ids its replay needs, is an
// error, not a zero record sent to Redis.
func TestDecodeRefusesWhatCannotBeSent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox")
	o, _, _ := mustOpen(t, path, 4)
	defer o.Close()
	st := filltest.Filled[account.Settlement]()
	s, _ := o.KeepSettlement(st)
	whole := append([]byte(nil), o.data[int(s)*SlotSize+header:][:binary.LittleEndian.Uint32(o.data[int(s)*SlotSize:])]...)
	noID := account.Settlement{AccountID: "acct_1", Status: 200}
	s, _ = o.KeepSettlement(noID)
	withoutID := append([]byte(nil), o.data[int(s)*SlotSize+header:][:binary.LittleEndian.Uint32(o.data[int(s)*SlotSize:])]...)
	bad := map[string][]byte{
		"empty":           nil,
		"unknown kind":    append([]byte{'x'}, whole[1:]...),
		"cut short":       whole[:len(whole)-3],
		"a byte too many": append(append([]byte(nil), whole...), 0),
		"a record's kind": append([]byte{KindRecord}, whole[1:]...),
		"no request id":   withoutID,
	}
	for name, p := range bad {
		if _, _, _, err := Decode(Entry{Data: p}); err == nil {
			t.Errorf("%s: Decode took it", name)
		}
	}
	if _, _, _, err := Decode(Entry{Data: whole}); err != nil {
		t.Fatalf("the whole entry: %v", err)
	}
}

// What keeping costs per request: a record and a settlement as the bench
// makes them, kept and dropped.
func BenchmarkKeep(b *testing.B) {
	o, _, _, err := Open(filepath.Join(b.TempDir(), "outbox"), 16)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	rec := account.LeasedRequest{Lease: account.LeaseRef{ID: "3f2a9b1c4d5e.acct_215ffb7f68516049.key_0123456789abcdef.12", Seq: 1234, Hold: 12345678},
		Admission: account.Admission{RequestID: "01JABCDEFGHJKMNPQRSTVWXYZ12", AccountID: "acct_215ffb7f68516049", KeyID: "key_0123456789abcdef", Priced: "claude-sonnet-4-5", Requested: "claude-sonnet-4-5", Hold: 12345678, Tokens: 4096}}
	st := account.Settlement{RequestID: "01JABCDEFGHJKMNPQRSTVWXYZ12", AccountID: "acct_215ffb7f68516049", KeyID: "key_0123456789abcdef",
		Requested: "claude-sonnet-4-5", Priced: "claude-sonnet-4-5", Reported: "claude-sonnet-4-5-20250929", Cost: 291000, Status: 200, Endpoint: "primary", VendorKey: "alpha-1", Lease: rec.Lease}
	st.Usage.Input, st.Usage.Output = 12, 17
	b.Run("record", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, _ := o.KeepRecord(rec)
			o.Drop(s)
		}
	})
	b.Run("settlement", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, _ := o.KeepSettlement(st)
			o.Drop(s)
		}
	})
}
