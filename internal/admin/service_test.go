package admin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/usage"
	adminv1 "github.com/modelgateway/gateway/proto/gateway/admin/v1"
)

func TestAuth(t *testing.T) {
	e := newEnv(t)
	req := &adminv1.ListAccountsRequest{}
	for name, md := range map[string][]string{
		"no token":     nil,
		"wrong token":  {"authorization", "Bearer not-the-token"},
		"token prefix": {"authorization", "Bearer " + testToken[:10]},
		"no scheme":    {"authorization", testToken},
		"basic scheme": {"authorization", "Basic " + testToken},
		"two tokens":   {"authorization", "Bearer " + testToken, "authorization", "Bearer x"},
	} {
		ctx := context.Background()
		if md != nil {
			ctx = metadata.AppendToOutgoingContext(ctx, md...)
		}
		_, err := e.client.ListAccounts(ctx, req)
		t.Run(name, func(t *testing.T) { wantCode(t, err, codes.Unauthenticated) })
	}
	if _, err := e.client.ListAccounts(e.ctx, req); err != nil {
		t.Fatalf("right token: %v", err)
	}
	// Mutations are refused too, and leave nothing behind.
	_, err := e.client.CreateAccount(context.Background(), &adminv1.CreateAccountRequest{Name: "x"})
	wantCode(t, err, codes.Unauthenticated)
	if r, _ := e.client.ListAccounts(e.ctx, req); len(r.GetAccounts()) != 0 {
		t.Fatalf("unauthenticated create made %v", r.Accounts)
	}
}

func TestNewServerNeedsToken(t *testing.T) {
	if _, err := NewServer(New(nil, Options{}), "", nil); err == nil {
		t.Fatal("NewServer accepted an empty token")
	}
}

func TestTokenFromEnv(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("  from-file\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tc := range []struct {
		env     map[string]string
		want    string
		wantErr bool
	}{
		{env: nil, want: ""},
		{env: map[string]string{TokenEnv: "from-env"}, want: "from-env"},
		{env: map[string]string{TokenFileEnv: file}, want: "from-file"},
		{env: map[string]string{TokenEnv: "a", TokenFileEnv: file}, wantErr: true},
		{env: map[string]string{TokenFileEnv: empty}, wantErr: true},
		{env: map[string]string{TokenFileEnv: filepath.Join(dir, "missing")}, wantErr: true},
	} {
		got, err := TokenFromEnv(func(k string) string { return tc.env[k] })
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%v: got %q, %v; want %q, error %t", tc.env, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestAccounts(t *testing.T) {
	e := newEnv(t)
	a := e.account(5e9)
	if a.Name != "acme" || a.BalanceNanoUsd != 5e9 || !proto.Equal(a.Limits, limitsToProto(defaultLimits)) {
		t.Fatalf("created %v; want the default limits", a)
	}
	r, err := e.client.CreateAccount(e.ctx, &adminv1.CreateAccountRequest{
		Name: "bob", Rpm: proto.Int64(10), DailyNanoUsd: proto.Int64(0), // window: the default
	})
	if err != nil {
		t.Fatal(err)
	}
	b := r.Account
	if !proto.Equal(b.Limits, &adminv1.Limits{Rpm: 10, WindowMinutes: defaultLimits.WindowMinutes}) {
		t.Fatalf("explicit limits: %v", b.Limits)
	}

	g, err := e.client.GetAccount(e.ctx, &adminv1.GetAccountRequest{AccountId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(g.Account, a) || g.DailyUsedNanoUsd != 0 || g.OpenHolds != 0 {
		t.Fatalf("get: %v, want %v", g, a)
	}

	l, err := e.client.ListAccounts(e.ctx, &adminv1.ListAccountsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Accounts created at the same instant are listed in id order; compare
	// by id.
	byID := map[string]*adminv1.Account{}
	for _, x := range l.Accounts {
		byID[x.Id] = x
	}
	if len(l.Accounts) != 2 || !proto.Equal(byID[a.Id], a) || !proto.Equal(byID[b.Id], b) {
		t.Fatalf("list: %v", l.Accounts)
	}

	_, err = e.client.GetAccount(e.ctx, &adminv1.GetAccountRequest{AccountId: "acct_missing"})
	wantCode(t, err, codes.NotFound)
	for _, bad := range []*adminv1.CreateAccountRequest{
		{Name: ""},
		{Name: strings.Repeat("n", 201)},
		{Name: "x", BalanceNanoUsd: -1},
		{Name: "x", Rpm: proto.Int64(-1)},
	} {
		_, err := e.client.CreateAccount(e.ctx, bad)
		wantCode(t, err, codes.InvalidArgument)
	}
}

func TestTopUpIdempotent(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	req := &adminv1.TopUpRequest{AccountId: a.Id, AmountNanoUsd: 2e9, IdempotencyKey: "invoice-7"}
	r, err := e.client.TopUp(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Applied || r.BalanceNanoUsd != 3e9 {
		t.Fatalf("first top-up: %v", r)
	}
	r, err = e.client.TopUp(e.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Applied || r.BalanceNanoUsd != 3e9 {
		t.Fatalf("repeat: %v; want applied false and the balance unchanged", r)
	}
	_, err = e.client.TopUp(e.ctx, &adminv1.TopUpRequest{AccountId: a.Id, AmountNanoUsd: 5e9, IdempotencyKey: "invoice-7"})
	wantCode(t, err, codes.AlreadyExists)

	_, err = e.client.TopUp(e.ctx, &adminv1.TopUpRequest{AccountId: a.Id, AmountNanoUsd: 1})
	wantCode(t, err, codes.InvalidArgument) // the key is required
	_, err = e.client.TopUp(e.ctx, &adminv1.TopUpRequest{AccountId: a.Id, AmountNanoUsd: 0, IdempotencyKey: "k"})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.TopUp(e.ctx, &adminv1.TopUpRequest{AccountId: "acct_missing", AmountNanoUsd: 1, IdempotencyKey: "k"})
	wantCode(t, err, codes.NotFound)

	g, _ := e.client.GetAccount(e.ctx, &adminv1.GetAccountRequest{AccountId: a.Id})
	if g.GetAccount().GetBalanceNanoUsd() != 3e9 {
		t.Fatalf("balance %d, want 3e9", g.GetAccount().GetBalanceNanoUsd())
	}
	// One audit entry: the repeat changed nothing.
	if n := countActions(e, "account.topup"); n != 1 {
		t.Fatalf("%d top-up audit entries, want 1", n)
	}
}

func TestSetLimits(t *testing.T) {
	e := newEnv(t)
	a := e.account(0)
	r, err := e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: a.Id, Rpm: proto.Int64(5)})
	if err != nil {
		t.Fatal(err)
	}
	want := &adminv1.Limits{DailyNanoUsd: defaultLimits.DailyNanoUSD, Rpm: 5, WindowMinutes: 1}
	if !proto.Equal(r.Account.Limits, want) {
		t.Fatalf("rpm only: %v, want %v", r.Account.Limits, want)
	}
	r, err = e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: a.Id,
		DailyNanoUsd: proto.Int64(0), WindowMinutes: proto.Int64(10)})
	if err != nil {
		t.Fatal(err)
	}
	want = &adminv1.Limits{DailyNanoUsd: 0, Rpm: 5, WindowMinutes: 10}
	if !proto.Equal(r.Account.Limits, want) {
		t.Fatalf("daily and window: %v, want %v", r.Account.Limits, want)
	}
	acct, err := e.st.Account(context.Background(), a.Id)
	if err != nil || acct.Limits != limitsFromProto(want) {
		t.Fatalf("stored %v, %v", acct.Limits, err)
	}
	_, err = e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: a.Id, Rpm: proto.Int64(-1)})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: "acct_missing", Rpm: proto.Int64(1)})
	wantCode(t, err, codes.NotFound)
}

func TestKeys(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	secret, k := e.key(a.Id, &adminv1.CreateKeyRequest{
		Label: "ci", Expiry: &adminv1.CreateKeyRequest_Ttl{Ttl: durationpb.New(time.Hour)}, Models: []string{"m1", "m2"},
	})
	if !strings.HasPrefix(secret, "cr_") || k.Kind != adminv1.KeyKind_KEY_KIND_MODEL ||
		k.Label != "ci" || !slices.Equal(k.Models, []string{"m1", "m2"}) || k.State != adminv1.KeyState_KEY_STATE_ACTIVE ||
		!k.ExpireTime.AsTime().Equal(start.Add(time.Hour)) || !strings.HasPrefix(secret, k.Prefix) {
		t.Fatalf("created %q %v", secret, k)
	}
	// The secret works against the store, as the request path would use it.
	if got, err := e.st.LookupKey(context.Background(), store.HashSecret(secret)); err != nil || got.ID != k.Id {
		t.Fatalf("lookup: %v %v", got, err)
	}
	plain, _ := e.key(a.Id, nil)
	if plain == secret {
		t.Fatal("two keys with one secret")
	}

	keys := e.keys(a.Id)
	if len(keys) != 2 || !proto.Equal(keys[k.Id], k) {
		t.Fatalf("list: %v", keys)
	}
	e.clock.Advance(time.Hour)
	if s := e.keys(a.Id)[k.Id].State; s != adminv1.KeyState_KEY_STATE_EXPIRED {
		t.Fatalf("after its expiry the key is %s", s)
	}

	for _, bad := range []*adminv1.CreateKeyRequest{
		{AccountId: a.Id, Expiry: &adminv1.CreateKeyRequest_Ttl{Ttl: durationpb.New(-time.Second)}},
		{AccountId: a.Id, Expiry: &adminv1.CreateKeyRequest_ExpireTime{ExpireTime: timestamppb.New(start)}},
		{AccountId: a.Id, Models: []string{""}},
		{AccountId: a.Id, Label: strings.Repeat("l", 201)},
	} {
		_, err := e.client.CreateKey(e.ctx, bad)
		wantCode(t, err, codes.InvalidArgument)
	}
	_, err := e.client.CreateKey(e.ctx, &adminv1.CreateKeyRequest{AccountId: "acct_missing"})
	wantCode(t, err, codes.NotFound)
}

func TestRevoke(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	_, k := e.key(a.Id, nil)
	tr, err := e.client.CreateReadOnlyToken(e.ctx, &adminv1.CreateReadOnlyTokenRequest{AccountId: a.Id, Label: "dash"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tr.Secret, "ro_") || tr.Token.Kind != adminv1.KeyKind_KEY_KIND_READ_ONLY {
		t.Fatalf("token: %v", tr.Token)
	}

	// Each revocation call takes only its own kind.
	_, err = e.client.RevokeKey(e.ctx, &adminv1.RevokeKeyRequest{AccountId: a.Id, KeyId: tr.Token.Id})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.RevokeReadOnlyToken(e.ctx, &adminv1.RevokeReadOnlyTokenRequest{AccountId: a.Id, TokenId: k.Id})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.RevokeKey(e.ctx, &adminv1.RevokeKeyRequest{AccountId: a.Id, KeyId: "key_missing"})
	wantCode(t, err, codes.NotFound)

	r, err := e.client.RevokeKey(e.ctx, &adminv1.RevokeKeyRequest{AccountId: a.Id, KeyId: k.Id})
	if err != nil {
		t.Fatal(err)
	}
	if r.Key.State != adminv1.KeyState_KEY_STATE_REVOKED || !r.Key.RevokeTime.AsTime().Equal(start) {
		t.Fatalf("revoked key: %v", r.Key)
	}
	rt, err := e.client.RevokeReadOnlyToken(e.ctx, &adminv1.RevokeReadOnlyTokenRequest{AccountId: a.Id, TokenId: tr.Token.Id})
	if err != nil {
		t.Fatal(err)
	}
	if rt.Token.State != adminv1.KeyState_KEY_STATE_REVOKED {
		t.Fatalf("revoked token: %v", rt.Token)
	}
	// Revoking again is harmless.
	if _, err := e.client.RevokeKey(e.ctx, &adminv1.RevokeKeyRequest{AccountId: a.Id, KeyId: k.Id}); err != nil {
		t.Fatal(err)
	}
	_, err = e.client.RotateKey(e.ctx, &adminv1.RotateKeyRequest{AccountId: a.Id, KeyId: k.Id})
	wantCode(t, err, codes.FailedPrecondition)
}

func TestRotate(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	_, k := e.key(a.Id, &adminv1.CreateKeyRequest{Label: "ci", Models: []string{"m1"}})

	r, err := e.client.RotateKey(e.ctx, &adminv1.RotateKeyRequest{AccountId: a.Id, KeyId: k.Id, Grace: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r.Secret, "cr_") || r.Key.Id == k.Id || r.Key.Label != "ci" || !slices.Equal(r.Key.Models, []string{"m1"}) {
		t.Fatalf("new key: %v", r.Key)
	}
	if r.OldKey.Id != k.Id || !r.OldKey.ExpireTime.AsTime().Equal(start.Add(time.Minute)) || r.OldKey.State != adminv1.KeyState_KEY_STATE_ACTIVE {
		t.Fatalf("old key: %v", r.OldKey)
	}
	e.clock.Advance(time.Minute)
	keys := e.keys(a.Id)
	if keys[k.Id].State != adminv1.KeyState_KEY_STATE_EXPIRED || keys[r.Key.Id].State != adminv1.KeyState_KEY_STATE_ACTIVE {
		t.Fatalf("after the grace period: old %s, new %s", keys[k.Id].State, keys[r.Key.Id].State)
	}

	// Default grace: a day.
	r2, err := e.client.RotateKey(e.ctx, &adminv1.RotateKeyRequest{AccountId: a.Id, KeyId: r.Key.Id})
	if err != nil {
		t.Fatal(err)
	}
	if want := e.clock.Now().Add(DefaultGrace); !r2.OldKey.ExpireTime.AsTime().Equal(want) {
		t.Fatalf("default grace: old key expires %v, want %v", r2.OldKey.ExpireTime.AsTime(), want)
	}
	_, err = e.client.RotateKey(e.ctx, &adminv1.RotateKeyRequest{AccountId: a.Id, KeyId: k.Id, Grace: durationpb.New(-time.Second)})
	wantCode(t, err, codes.InvalidArgument)
}

func TestLedger(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	ctx := context.Background()
	for i := range 3 {
		id := "req" + strconv.Itoa(i)
		if _, err := e.st.Admit(ctx, &account.Admission{RequestID: id, AccountID: a.Id, Hold: 10}); err != nil {
			t.Fatal(err)
		}
		st := account.Settlement{RequestID: id, AccountID: a.Id, KeyID: "key_1", Requested: "m-20250101", Priced: "m", Reported: "m-x",
			Usage: usage.Usage{Input: 7, Output: 3, CacheWrite5m: 2, CacheWrite1h: 5, Reasoning: 1}, Rates: usage.Usage{Input: 3000, CacheWrite1h: 6000},
			ServiceTier: "priority", LongContext: 200_000, Fallback: true,
			Cost: int64(i + 1), Status: 200, Endpoint: "primary", StartedAt: start, EndedAt: start}
		if _, err := e.st.Settle(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	var got []*adminv1.LedgerEntry
	token := ""
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatal("paging does not end")
		}
		r, err := e.client.ListLedger(e.ctx, &adminv1.ListLedgerRequest{AccountId: a.Id, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Entries...)
		if token = r.NextPageToken; token == "" {
			break
		}
	}
	if len(got) != 3 || got[0].RequestId != "req0" || got[2].CostNanoUsd != 3 || got[1].InputTokens != 7 ||
		got[1].Status != 200 || got[1].Endpoint != "primary" || !got[1].StartTime.AsTime().Equal(start) {
		t.Fatalf("ledger: %v", got)
	}
	// Every quantity and unit price, for an invoice line.
	if e := got[1]; e.Model != "m" || e.ModelRequested != "m-20250101" || e.ModelReported != "m-x" || e.CacheWriteTokens != 7 ||
		e.Usage["cache_write_1h"] != 5 || e.Usage["reasoning"] != 1 || e.Usage["web_searches"] != 0 || len(e.Usage) != len(usage.Kinds) ||
		e.PricesNanoUsdPerMillion["cache_write_1h"] != 6000 || e.PricesNanoUsdPerMillion["input"] != 3000 ||
		e.ServiceTier != "priority" || e.LongContextThreshold != 200_000 || !e.FallbackPrice {
		t.Fatalf("ledger entry: %v", e)
	}
	_, err := e.client.ListLedger(e.ctx, &adminv1.ListLedgerRequest{AccountId: a.Id, PageToken: "garbage"})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.ListLedger(e.ctx, &adminv1.ListLedgerRequest{AccountId: a.Id, PageSize: -1})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.ListLedger(e.ctx, &adminv1.ListLedgerRequest{AccountId: "acct_missing"})
	wantCode(t, err, codes.NotFound)
}

// Every usage kind the gateway meters reaches the admin API with its figure
// and unit price, in listings and exports alike: a kind added to
// internal/usage fails here until the ledger carries it to the API.
func TestLedgerEveryKind(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	ctx := context.Background()
	var u, rates usage.Usage
	for i, k := range usage.Kinds {
		k.Set(&u, int64(i+1))
		if k.Priced() {
			k.Set(&rates, int64(i+1)*1_000_000)
		}
	}
	if _, err := e.st.Admit(ctx, &account.Admission{RequestID: "r", AccountID: a.Id, Hold: 10}); err != nil {
		t.Fatal(err)
	}
	st := account.Settlement{RequestID: "r", AccountID: a.Id, KeyID: "key_1", Priced: "m", Usage: u, Rates: rates,
		Cost: 5, Status: 200, Endpoint: "primary", StartedAt: start, EndedAt: start}
	if _, err := e.st.Settle(ctx, st); err != nil {
		t.Fatal(err)
	}
	list, err := e.client.ListLedger(e.ctx, &adminv1.ListLedgerRequest{AccountId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	export, err := e.client.ExportLedger(e.ctx, &adminv1.ExportLedgerRequest{AccountId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	for name, entries := range map[string][]*adminv1.LedgerEntry{"list": list.Entries, "export": export.Entries} {
		if len(entries) != 1 {
			t.Fatalf("%s: %d entries", name, len(entries))
		}
		got := entries[0]
		for _, k := range usage.Kinds {
			if q, ok := got.Usage[k.Name]; !ok || q != k.Of(u) {
				t.Errorf("%s: usage[%s] = %d, %t; want %d", name, k.Name, q, ok, k.Of(u))
			}
			if p, ok := got.PricesNanoUsdPerMillion[k.Name]; ok != k.Priced() || p != k.Of(rates) {
				t.Errorf("%s: prices[%s] = %d, %t; want %d, %t", name, k.Name, p, ok, k.Of(rates), k.Priced())
			}
		}
		// The responses operation's built-in tools, by the names clients read.
		if got.Usage["file_searches"] != 10 || got.Usage["code_interpreter_sessions"] != 11 || got.Usage["image_generations"] != 12 ||
			got.PricesNanoUsdPerMillion["code_interpreter_sessions"] != 11_000_000 || len(got.Usage) != len(usage.Kinds) {
			t.Errorf("%s: usage %v, prices %v", name, got.Usage, got.PricesNanoUsdPerMillion)
		}
	}
}

// Export pages after the committed mark; commits move it forward only.
func TestExportLedger(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	ctx := context.Background()
	for i := range 5 {
		id := "req" + strconv.Itoa(i)
		if _, err := e.st.Admit(ctx, &account.Admission{RequestID: id, AccountID: a.Id, Hold: 10}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Settle(ctx, account.Settlement{RequestID: id, AccountID: a.Id, Priced: "m", Cost: 1, Status: 200}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := e.client.ExportLedger(e.ctx, &adminv1.ExportLedgerRequest{AccountId: a.Id, PageSize: 3})
	if err != nil || len(r.Entries) != 3 || r.Mark != "" {
		t.Fatalf("first page: %v %v", r, err)
	}
	c, err := e.client.CommitLedgerExport(e.ctx, &adminv1.CommitLedgerExportRequest{AccountId: a.Id, LastId: r.Entries[2].Id})
	if err != nil || c.Mark != r.Entries[2].Id || c.Trimmed != 0 {
		t.Fatalf("commit: %v %v", c, err)
	}
	r2, err := e.client.ExportLedger(e.ctx, &adminv1.ExportLedgerRequest{AccountId: a.Id})
	if err != nil || len(r2.Entries) != 2 || r2.Entries[0].RequestId != "req3" || r2.Mark != c.Mark {
		t.Fatalf("resumed: %v %v", r2, err)
	}
	// An earlier id does not move the mark back.
	c2, err := e.client.CommitLedgerExport(e.ctx, &adminv1.CommitLedgerExportRequest{AccountId: a.Id, LastId: r.Entries[0].Id})
	if err != nil || c2.Mark != c.Mark {
		t.Fatalf("mark moved back: %v %v", c2, err)
	}
	_, err = e.client.CommitLedgerExport(e.ctx, &adminv1.CommitLedgerExportRequest{AccountId: a.Id, LastId: "x"})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.CommitLedgerExport(e.ctx, &adminv1.CommitLedgerExportRequest{AccountId: "acct_missing", LastId: "1-0"})
	wantCode(t, err, codes.NotFound)
	_, err = e.client.ExportLedger(e.ctx, &adminv1.ExportLedgerRequest{AccountId: a.Id, After: "garbage"})
	wantCode(t, err, codes.InvalidArgument)
}

// TestAudit runs every mutation and checks that each left one entry naming
// the actor, and that no secret reached the audit trail.
func TestAudit(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	var secrets []string
	s1, k := e.key(a.Id, &adminv1.CreateKeyRequest{Label: "ci", Models: []string{"m1"}})
	secrets = append(secrets, s1)
	tr, err := e.client.CreateReadOnlyToken(e.ctx, &adminv1.CreateReadOnlyTokenRequest{AccountId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, tr.Secret)
	rr, err := e.client.RotateKey(e.ctx, &adminv1.RotateKeyRequest{AccountId: a.Id, KeyId: k.Id})
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, rr.Secret)
	calls := []func() error{
		func() error {
			_, err := e.client.TopUp(e.ctx, &adminv1.TopUpRequest{AccountId: a.Id, AmountNanoUsd: 1, IdempotencyKey: "k1"})
			return err
		},
		func() error {
			_, err := e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: a.Id, Rpm: proto.Int64(1)})
			return err
		},
		func() error {
			_, err := e.client.RevokeKey(e.ctx, &adminv1.RevokeKeyRequest{AccountId: a.Id, KeyId: rr.Key.Id})
			return err
		},
		func() error {
			_, err := e.client.RevokeReadOnlyToken(e.ctx, &adminv1.RevokeReadOnlyTokenRequest{AccountId: a.Id, TokenId: tr.Token.Id})
			return err
		},
	}
	for _, call := range calls {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	// Reads are not audited.
	e.keys(a.Id)

	r, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, en := range r.Entries {
		actions = append(actions, en.Action)
		if en.Actor != "alice" || en.AccountId != a.Id || en.Time == nil {
			t.Errorf("entry %v: want actor alice, the account and a time", en)
		}
		dump := protojson.Format(en)
		for _, s := range secrets {
			if strings.Contains(dump, s) || strings.Contains(dump, s[3:]) {
				t.Errorf("audit entry %s holds a secret", dump)
			}
		}
	}
	want := []string{"account.create", "key.create", "token.create", "key.rotate",
		"account.topup", "account.limits", "key.revoke", "token.revoke"}
	if !slices.Equal(actions, want) {
		t.Fatalf("actions %v, want %v", actions, want)
	}

	// Paging, and the default actor.
	if _, err := e.client.CreateAccount(metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer "+testToken), &adminv1.CreateAccountRequest{Name: "anon"}); err != nil {
		t.Fatal(err)
	}
	p1, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{PageSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{PageSize: 8, PageToken: p1.NextPageToken})
	if err != nil {
		t.Fatal(err)
	}
	if len(p1.Entries) != 8 || len(p2.Entries) != 1 || p2.NextPageToken != "" || p2.Entries[0].Actor != DefaultActor {
		t.Fatalf("pages: %d then %v", len(p1.Entries), p2)
	}
}

func countActions(e *env, action string) int {
	e.t.Helper()
	r, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, en := range r.Entries {
		if en.Action == action {
			n++
		}
	}
	return n
}

func TestActor(t *testing.T) {
	for in, want := range map[string]string{
		"":                       DefaultActor,
		"  ":                     DefaultActor,
		"bob":                    "bob",
		"bo\nb\x00":              "bob",
		strings.Repeat("x", 100): strings.Repeat("x", 64),
	} {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(ActorHeader, in))
		if got := actor(ctx); got != want {
			t.Errorf("actor(%q) = %q, want %q", in, got, want)
		}
	}
	if got := actor(context.Background()); got != DefaultActor {
		t.Errorf("no metadata: %q", got)
	}
}

// A suspension is stored, shown on the account, seen by key lookups and
// audited; resuming undoes it.
func TestSuspendAndResume(t *testing.T) {
	e := newEnv(t)
	a := e.account(0)
	key, err := e.client.CreateKey(e.ctx, &adminv1.CreateKeyRequest{AccountId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.client.SuspendAccount(e.ctx, &adminv1.SuspendAccountRequest{AccountId: a.Id, Reason: "unpaid invoice"})
	if err != nil || !r.Account.Suspended {
		t.Fatalf("suspend: %v, %v", r, err)
	}
	k, err := e.st.LookupKey(context.Background(), store.HashSecret(key.Secret))
	if err != nil || !k.AccountSuspended {
		t.Fatalf("lookup after suspend: %+v, %v", k, err)
	}
	g, err := e.client.GetAccount(e.ctx, &adminv1.GetAccountRequest{AccountId: a.Id})
	if err != nil || !g.Account.Suspended {
		t.Fatalf("get: %v, %v", g, err)
	}
	rr, err := e.client.ResumeAccount(e.ctx, &adminv1.ResumeAccountRequest{AccountId: a.Id})
	if err != nil || rr.Account.Suspended {
		t.Fatalf("resume: %v, %v", rr, err)
	}
	if k, _ := e.st.LookupKey(context.Background(), store.HashSecret(key.Secret)); k.AccountSuspended {
		t.Fatal("still suspended after resume")
	}
	_, err = e.client.SuspendAccount(e.ctx, &adminv1.SuspendAccountRequest{AccountId: "acct_missing"})
	wantCode(t, err, codes.NotFound)
	au, err := e.client.ListAudit(e.ctx, &adminv1.ListAuditRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, en := range au.Entries {
		actions = append(actions, en.Action)
	}
	if !slices.Contains(actions, "account.suspend") || !slices.Contains(actions, "account.resume") {
		t.Fatalf("audit actions %v", actions)
	}
}

// An account's new limits are set like the old ones: each given one
// changes, the others stay.
func TestSetAccountLimitsEveryKind(t *testing.T) {
	e := newEnv(t)
	a := e.account(0)
	r, err := e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: a.Id,
		Tpm: proto.Int64(1000), Concurrency: proto.Int64(4), MonthlyNanoUsd: proto.Int64(7e9)})
	if err != nil {
		t.Fatal(err)
	}
	want := &adminv1.Limits{DailyNanoUsd: defaultLimits.DailyNanoUSD, Rpm: defaultLimits.RPM, WindowMinutes: defaultLimits.WindowMinutes,
		Tpm: 1000, Concurrency: 4, MonthlyNanoUsd: 7e9}
	if !proto.Equal(r.Account.Limits, want) {
		t.Fatalf("limits %v, want %v", r.Account.Limits, want)
	}
	r, err = e.client.SetLimits(e.ctx, &adminv1.SetLimitsRequest{AccountId: a.Id, Concurrency: proto.Int64(0)})
	if err != nil {
		t.Fatal(err)
	}
	want.Concurrency = 0
	if !proto.Equal(r.Account.Limits, want) {
		t.Fatalf("after removing concurrency: %v, want %v", r.Account.Limits, want)
	}
	c, err := e.client.CreateAccount(e.ctx, &adminv1.CreateAccountRequest{Name: "b", Tpm: proto.Int64(5)})
	if err != nil || c.Account.Limits.Tpm != 5 {
		t.Fatalf("create with tpm: %v, %v", c, err)
	}
}

// A key's limits change without rotating it, are audited with who changed
// them, and show with what the key has used.
func TestSetKeyLimits(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	_, k := e.key(a.Id, &adminv1.CreateKeyRequest{Label: "ci"})
	if !proto.Equal(k.Limits, &adminv1.Limits{}) {
		t.Fatalf("new key has limits %v", k.Limits)
	}
	r, err := e.client.SetKeyLimits(e.ctx, &adminv1.SetKeyLimitsRequest{AccountId: a.Id, KeyId: k.Id,
		Rpm: proto.Int64(10), WindowMinutes: proto.Int64(1), Tpm: proto.Int64(2000), Concurrency: proto.Int64(2),
		DailyNanoUsd: proto.Int64(1e9), MonthlyNanoUsd: proto.Int64(5e9), TotalNanoUsd: proto.Int64(9e9)})
	if err != nil {
		t.Fatal(err)
	}
	want := &adminv1.Limits{Rpm: 10, WindowMinutes: 1, Tpm: 2000, Concurrency: 2, DailyNanoUsd: 1e9, MonthlyNanoUsd: 5e9, TotalNanoUsd: 9e9}
	if !proto.Equal(r.Key.Limits, want) || r.Key.Id != k.Id || r.Usage == nil {
		t.Fatalf("set: %v, want limits %v", r, want)
	}
	// Spend already counted stays, and shows.
	_, err = e.st.Admit(e.ctx, &account.Admission{RequestID: "r1", AccountID: a.Id, KeyID: k.Id, Hold: 100, KeyLimits: limitsFromProto(want)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Settle(e.ctx, account.Settlement{RequestID: "r1", AccountID: a.Id, KeyID: k.Id, Cost: 70, Status: 200}); err != nil {
		t.Fatal(err)
	}
	r, err = e.client.SetKeyLimits(e.ctx, &adminv1.SetKeyLimitsRequest{AccountId: a.Id, KeyId: k.Id, Tpm: proto.Int64(0)})
	if err != nil {
		t.Fatal(err)
	}
	want.Tpm = 0
	if !proto.Equal(r.Key.Limits, want) {
		t.Fatalf("after removing tpm: %v, want %v", r.Key.Limits, want)
	}
	g, err := e.client.GetKey(e.ctx, &adminv1.GetKeyRequest{AccountId: a.Id, KeyId: k.Id})
	if err != nil {
		t.Fatal(err)
	}
	if u := g.Usage; u.DailyUsedNanoUsd != 70 || u.MonthlyUsedNanoUsd != 70 || u.TotalUsedNanoUsd != 70 || u.TotalRequests != 1 || u.InFlight != 0 {
		t.Fatalf("usage %v", u)
	}
	stored, err := e.st.Key(e.ctx, a.Id, k.Id)
	if err != nil || stored.Limits != limitsFromProto(want) {
		t.Fatalf("stored %+v, %v", stored.Limits, err)
	}
	if n := countActions(e, "key.limits"); n != 2 {
		t.Fatalf("%d key.limits audit entries, want 2", n)
	}
	_, err = e.client.SetKeyLimits(e.ctx, &adminv1.SetKeyLimitsRequest{AccountId: a.Id, KeyId: k.Id, Concurrency: proto.Int64(-1)})
	wantCode(t, err, codes.InvalidArgument)
	_, err = e.client.SetKeyLimits(e.ctx, &adminv1.SetKeyLimitsRequest{AccountId: a.Id, KeyId: "key_missing", Rpm: proto.Int64(1)})
	wantCode(t, err, codes.NotFound)
	other := e.account(0)
	_, err = e.client.SetKeyLimits(e.ctx, &adminv1.SetKeyLimitsRequest{AccountId: other.Id, KeyId: k.Id, Rpm: proto.Int64(1)})
	wantCode(t, err, codes.NotFound)
	tr, err := e.client.CreateReadOnlyToken(e.ctx, &adminv1.CreateReadOnlyTokenRequest{AccountId: a.Id})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.client.SetKeyLimits(e.ctx, &adminv1.SetKeyLimitsRequest{AccountId: a.Id, KeyId: tr.Token.Id, Rpm: proto.Int64(1)})
	wantCode(t, err, codes.FailedPrecondition)
}

func TestSetBalanceAlert(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	r, err := e.client.SetBalanceAlert(e.ctx, &adminv1.SetBalanceAlertRequest{AccountId: a.Id, ThresholdNanoUsd: 5e8})
	if err != nil || r.Account.BalanceAlertNanoUsd != 5e8 {
		t.Fatalf("set: %v, %v", r, err)
	}
	if g, _ := e.client.GetAccount(e.ctx, &adminv1.GetAccountRequest{AccountId: a.Id}); g.Account.BalanceAlertNanoUsd != 5e8 {
		t.Fatalf("get: %v", g)
	}
	_, err = e.client.SetBalanceAlert(e.ctx, &adminv1.SetBalanceAlertRequest{AccountId: a.Id, ThresholdNanoUsd: -1})
	wantCode(t, err, codes.InvalidArgument)
	if n := countActions(e, "account.balance_alert"); n != 1 {
		t.Fatalf("%d audit entries, want 1", n)
	}
}

// A not-found error names what is missing: the account of an account's
// call, the key of a key's.
func TestNotFoundNamesWhat(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	for _, tc := range []struct {
		call func() error
		want string
	}{
		{func() error {
			_, err := e.client.CreateKey(e.ctx, &adminv1.CreateKeyRequest{AccountId: "acct_gone"})
			return err
		}, `create key: account "acct_gone" not found`},
		{func() error {
			_, err := e.client.TopUp(e.ctx, &adminv1.TopUpRequest{AccountId: "acct_gone", AmountNanoUsd: 1, IdempotencyKey: "k"})
			return err
		}, `top up: account "acct_gone" not found`},
		{func() error {
			_, err := e.client.RevokeKey(e.ctx, &adminv1.RevokeKeyRequest{AccountId: a.Id, KeyId: "key_gone"})
			return err
		}, `revoke key: key "key_gone" of account "` + a.Id + `" not found`},
	} {
		err := tc.call()
		wantCode(t, err, codes.NotFound)
		if msg := status.Convert(err).Message(); msg != tc.want {
			t.Errorf("message %q, want %q", msg, tc.want)
		}
	}
}

// A name or label with a control character or invalid UTF-8 is refused at
// the door, wherever it would be stored: an account's name, a key's or a
// token's label, a key's models, a project's name.
func TestHostileNamesRefused(t *testing.T) {
	e := newEnv(t)
	a := e.account(1e9)
	for _, bad := range []string{"a\x00b", "line\nbreak", "tab\there", "\x1b[31mred", "del\x7f"} {
		_, err := e.client.CreateAccount(e.ctx, &adminv1.CreateAccountRequest{Name: bad})
		wantCode(t, err, codes.InvalidArgument)
		_, err = e.client.CreateKey(e.ctx, &adminv1.CreateKeyRequest{AccountId: a.Id, Label: bad})
		wantCode(t, err, codes.InvalidArgument)
		_, err = e.client.CreateReadOnlyToken(e.ctx, &adminv1.CreateReadOnlyTokenRequest{AccountId: a.Id, Label: bad})
		wantCode(t, err, codes.InvalidArgument)
		_, err = e.client.CreateKey(e.ctx, &adminv1.CreateKeyRequest{AccountId: a.Id, Models: []string{"gpt-4o", bad}})
		wantCode(t, err, codes.InvalidArgument)
		_, err = e.client.CreateProject(e.ctx, &adminv1.CreateProjectRequest{AccountId: a.Id, Name: bad})
		wantCode(t, err, codes.InvalidArgument)
	}
	// Invalid UTF-8 cannot cross gRPC; the consoles call the service in
	// process.
	svc := New(e.st, Options{})
	if _, err := svc.CreateKey(e.ctx, &adminv1.CreateKeyRequest{AccountId: a.Id, Label: "bad\xffutf8"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a label of invalid UTF-8 in process: %v", err)
	}
	if _, err := svc.CreateProject(e.ctx, &adminv1.CreateProjectRequest{AccountId: a.Id, Name: "bad\xffutf8"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a project name of invalid UTF-8 in process: %v", err)
	}
	// A formula-like or non-Latin name is kept: the CSV export defends
	// its cells, and names are the customer's words.
	for _, ok := range []string{"=SUM(A1)", "équipe données", "チーム"} {
		if _, err := e.client.CreateProject(e.ctx, &adminv1.CreateProjectRequest{AccountId: a.Id, Name: ok}); err != nil {
			t.Errorf("project %q: %v", ok, err)
		}
	}
	if keys := e.keys(a.Id); len(keys) != 0 {
		t.Errorf("%d keys made from refused requests", len(keys))
	}
}
