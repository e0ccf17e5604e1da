package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/auth"
	"github.com/modelgateway/gateway/internal/control"
	"github.com/modelgateway/gateway/internal/store"
	"github.com/modelgateway/gateway/internal/testclock"
)

// releaseData is testdata/release-0.2.0.json: every Redis key release
// 0.2.0 wrote for one account (made through its admin service: the account
// with limits, a top-up, a model key and a read-only token; two requests
// admitted and settled by its store, one still in flight), its secrets,
// and what its /v1/usage and data API answered for them, by credential and
// query.
type releaseData struct {
	Release string                       `json:"release"`
	Now     time.Time                    `json:"now"`
	Account string                       `json:"account"`
	Key     string                       `json:"key"`
	KeyID   string                       `json:"key_id"`
	Token   string                       `json:"token"`
	Usage   map[string]json.RawMessage   `json:"usage"`
	Strings map[string]string            `json:"strings"`
	Hashes  map[string]map[string]string `json:"hashes"`
	Sets    map[string][]string          `json:"sets"`
	ZSets   map[string][]redis.Z         `json:"zsets"`
	Streams map[string][]redis.XMessage  `json:"streams"`
	TTLs    map[string]int64             `json:"ttl_ms"`
}

// loadRelease writes the release's keys into a fresh miniredis, its clock
// at the moment the release left them.
func loadRelease(t *testing.T, path string) (releaseData, *redis.Client, *testclock.Clock) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d releaseData
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	mr := miniredis.RunT(t)
	mr.SetTime(d.Now)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for k, v := range d.Strings {
		pipe.Set(ctx, k, v, 0)
	}
	for k, h := range d.Hashes {
		pipe.HSet(ctx, k, h)
	}
	for k, m := range d.Sets {
		pipe.SAdd(ctx, k, m)
	}
	for k, zs := range d.ZSets {
		pipe.ZAdd(ctx, k, zs...)
	}
	for k, entries := range d.Streams {
		for _, e := range entries {
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: k, ID: e.ID, Values: e.Values})
		}
	}
	for k, ms := range d.TTLs {
		pipe.PExpire(ctx, k, time.Duration(ms)*time.Millisecond)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	return d, rdb, testclock.New(d.Now)
}

// sameFields reports where got lacks a field of want or holds another
// value there: a newer answer may add fields, never drop or change one.
func sameFields(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %v, want an object", path, got)}
		}
		var out []string
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				out = append(out, path+"."+k+": missing")
				continue
			}
			out = append(out, sameFields(path+"."+k, wv, gv)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: %v, want %d items", path, got, len(w))}
		}
		var out []string
		for i := range w {
			out = append(out, sameFields(fmt.Sprintf("%s[%d]", path, i), w[i], g[i])...)
		}
		return out
	}
	if !reflect.DeepEqual(want, got) {
		return []string{fmt.Sprintf("%s: %v, want %v", path, got, want)}
	}
	return nil
}

// Data written by release 0.2.0 serves unchanged, with no migration: its
// model key and read-only token read /v1/usage and the data API with every
// field the release answered, at the same values; the key admits and
// settles (as the request the release left in flight does); the operator
// console signs in with the admin token and shows the account, its
// credentials and the release's audit entries.
func TestReleaseDataServesUnchanged(t *testing.T) {
	d, rdb, clk := loadRelease(t, "testdata/release-0.2.0.json")
	if d.Release != "0.2.0" || len(d.Usage) == 0 {
		t.Fatalf("fixture of release %q with %d answers", d.Release, len(d.Usage))
	}
	ctx := context.Background()
	st := store.New(rdb, store.Options{Now: clk.Now})
	keys := auth.NewCache(st, 0)
	usage := control.New(control.Options{Region: "eu", Store: st, Keys: keys, Now: clk.Now})
	api := http.NewServeMux()
	Mount(api, APIOptions{Store: st, Keys: keys, Now: clk.Now})
	secrets := map[string]string{"key": d.Key, "token": d.Token}
	for name, body := range d.Usage {
		who, target, _ := strings.Cut(name, " ")
		var h http.Handler = api
		if u, _ := url.Parse(target); u.Path == "/v1/usage" {
			h = usage
		}
		req := httptest.NewRequest("GET", target, nil)
		req.Header.Set("Authorization", "Bearer "+secrets[who])
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("%s: %d %s", name, rec.Code, rec.Body)
			continue
		}
		var want, got any
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, diff := range sameFields(name, want, got) {
			t.Error(diff)
		}
	}

	// The key admits and settles; so does the request left in flight.
	k, err := st.LookupKey(ctx, store.HashSecret(d.Key))
	if err != nil || k.ID != d.KeyID || k.Kind != account.ModelKey || k.Project() != account.DefaultProject {
		t.Fatalf("the release's key reads back %+v, %v", k, err)
	}
	if tok, err := st.LookupKey(ctx, store.HashSecret(d.Token)); err != nil || tok.Kind != account.ReadOnlyToken || tok.AccountID != d.Account {
		t.Fatalf("the release's token reads back %+v, %v", tok, err)
	}
	before, err := st.Balance(ctx, d.Account)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := st.Admit(ctx, &account.Admission{RequestID: "after_upgrade", AccountID: d.Account, KeyID: k.ID, Hold: 1_000_000_000,
		Priced: "gpt-4o-mini", Requested: "gpt-4o-mini", KeyLimits: k.Limits, ProjectID: k.ProjectID, ProjectLimits: k.ProjectLimits})
	if err != nil || dec.Outcome != account.Admitted {
		t.Fatalf("admission after the upgrade: %+v, %v", dec, err)
	}
	for id, cost := range map[string]int64{"after_upgrade": 300_000_000, "req_open": 200_000_000} {
		if ok, err := st.Settle(ctx, account.Settlement{RequestID: id, AccountID: d.Account, KeyID: k.ID, Priced: "gpt-4o-mini", Cost: cost, Status: 200, EndedAt: clk.Now()}); err != nil || !ok {
			t.Fatalf("settle %s: %v, %v", id, ok, err)
		}
	}
	if b, err := st.Balance(ctx, d.Account); err != nil || b != before-500_000_000 {
		t.Fatalf("balance %d after settling 0.5 USD from %d: %v", b, before, err)
	}

	// The operator console signs in with the admin token and shows the
	// release's account, credentials and audit trail.
	a, err := NewTokenAuthenticator(adminToken)
	if err != nil {
		t.Fatal(err)
	}
	op := NewOperator(OperatorOptions{Admin: admin.New(st, admin.Options{Now: clk.Now}), Store: st, Auth: a, SessionOptions: SessionOptions{Sessions: st}, Now: clk.Now})
	req := httptest.NewRequest("POST", "/signin", strings.NewReader(url.Values{"token": {adminToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = "192.0.2.1:1234"
	rec := httptest.NewRecorder()
	op.ServeHTTP(rec, req)
	var cookie *http.Cookie
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie {
			cookie = c
		}
	}
	if rec.Code != http.StatusSeeOther || cookie == nil {
		t.Fatalf("operator sign-in: %d %s", rec.Code, rec.Body)
	}
	req = httptest.NewRequest("GET", "/accounts/"+d.Account, nil)
	req.AddCookie(cookie)
	rec = httptest.NewRecorder()
	op.ServeHTTP(rec, req)
	page := rec.Body.String()
	if rec.Code != http.StatusOK {
		t.Fatalf("account page: %d %s", rec.Code, page)
	}
	for _, want := range []string{"acme", d.KeyID, ">ci<", ">dashboard<", ">account.create<", ">key.create<", ">account.topup<", ">done<", `id="topup"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the account page lacks %q", want)
		}
	}
}
