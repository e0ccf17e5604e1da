package ledgersink

import (
	"context"
	"fmt"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
)

// A page larger than one store read is assembled from reads of readChunk
// entries, in ledger order, starting after the cursor and ending at the
// ledger's end.
func TestReadInChunks(t *testing.T) {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	st := store.New(rdb, store.Options{})
	a, err := st.CreateAccount(ctx, "chunks", 1_000_000_000, account.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 2*readChunk + 37
	for i := range n {
		req := fmt.Sprintf("req_%d", i)
		if d, err := st.Admit(ctx, &account.Admission{RequestID: req, AccountID: a.ID, KeyID: "key_x", Priced: "m", Hold: 10}); err != nil || d.Outcome != account.Admitted {
			t.Fatalf("admit %s: %v %v", req, d.Outcome, err)
		}
		if _, err := st.Settle(ctx, account.Settlement{RequestID: req, AccountID: a.ID, KeyID: "key_x", Priced: "m", Status: 200, Cost: 1}); err != nil {
			t.Fatal(err)
		}
	}
	all, _, err := st.Ledger(ctx, a.ID, "", 1000)
	if err != nil || len(all) != n {
		t.Fatalf("ledger: %d entries, %v", len(all), err)
	}

	s := New(st, Options{PageSize: 2*readChunk + 10})
	page, err := s.read(ctx, a.ID, all[4].ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != s.opts.PageSize {
		t.Fatalf("page of %d entries, want %d", len(page), s.opts.PageSize)
	}
	for i, e := range page {
		if e.ID != all[5+i].ID {
			t.Fatalf("entry %d is %s, want %s", i, e.ID, all[5+i].ID)
		}
	}
	rest, err := s.read(ctx, a.ID, page[len(page)-1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := n - 5 - len(page); len(rest) != want || rest[len(rest)-1].ID != all[n-1].ID {
		t.Fatalf("the rest is %d entries, want %d ending at the ledger's last", len(rest), want)
	}
	if end, err := s.read(ctx, a.ID, all[n-1].ID); err != nil || len(end) != 0 {
		t.Fatalf("after the last entry: %d entries, %v", len(end), err)
	}
}
