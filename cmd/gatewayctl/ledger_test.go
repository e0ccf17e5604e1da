package main

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

// pages serves 0..9 in pages of size, tokens being the next index.
func pages(t *testing.T, calls *[]string) func(size int32, token string) ([]int, string, error) {
	return func(size int32, token string) ([]int, string, error) {
		*calls = append(*calls, token)
		start := 0
		if token != "" {
			start, _ = strconv.Atoi(token)
		}
		end := min(start+int(size), 10)
		var out []int
		for i := start; i < end; i++ {
			out = append(out, i)
		}
		next := ""
		if end < 10 {
			next = strconv.Itoa(end)
		}
		return out, next, nil
	}
}

func TestReadPages(t *testing.T) {
	var calls []string
	got, next, err := read(pageFlags{size: 4}, pages(t, &calls))
	if err != nil || !slices.Equal(got, []int{0, 1, 2, 3}) || next != "4" || len(calls) != 1 {
		t.Fatalf("one page: %v next %q err %v calls %v", got, next, err, calls)
	}
	calls = nil
	got, next, err = read(pageFlags{size: 4, token: next}, pages(t, &calls))
	if err != nil || !slices.Equal(got, []int{4, 5, 6, 7}) || next != "8" {
		t.Fatalf("continued page: %v next %q", got, next)
	}
	calls = nil
	got, next, err = read(pageFlags{size: 4, all: true}, pages(t, &calls))
	if err != nil || len(got) != 10 || next != "" || !slices.Equal(calls, []string{"", "4", "8"}) {
		t.Fatalf("--all: %v next %q calls %v", got, next, calls)
	}
	boom := errors.New("unavailable")
	if _, _, err := read(pageFlags{size: 4, all: true}, func(int32, string) ([]int, string, error) { return nil, "", boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
}

// The ledger commands show every usage kind the gateway meters (the JSON
// listing and the export by name, the table those without a column of
// their own), and the JSON the vendor key and transport.
func TestLedgerUsageKinds(t *testing.T) {
	addr, st := startAdminStore(t)
	t.Setenv(addrEnv, addr)
	t.Setenv(tokenEnv, testToken)
	id := ctlJSON(t, "accounts", "create", "--name", "acme", "--balance-usd", "1")["account"].(map[string]any)["id"].(string)
	ctx := context.Background()
	if _, err := st.Admit(ctx, &account.Admission{RequestID: "r1", AccountID: id, Hold: 10}); err != nil {
		t.Fatal(err)
	}
	u := usage.Usage{Input: 10, Output: 5, Reasoning: 2, WebSearches: 1, FileSearches: 3, CodeInterpreter: 2, ImageGenerations: 4}
	if _, err := st.Settle(ctx, account.Settlement{RequestID: "r1", AccountID: id, KeyID: "key_1", Priced: "m", Usage: u,
		Rates: usage.Usage{CodeInterpreter: 30_000_000 * 1_000_000}, Cost: 7, Status: 200, Endpoint: "primary",
		VendorKey: "org-b", Transport: "websocket"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"file_searches": "3", "code_interpreter_sessions": "2", "image_generations": "4", "web_searches": "1"}
	entries := ctlJSON(t, "ledger", id)["entries"].([]any)
	code, out, errOut := ctl(t, "ledger", "export", id, "--no-commit")
	if code != 0 || len(entries) != 1 {
		t.Fatalf("ledger: %v; export: exit %d %s", entries, code, errOut)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(out), &line); err != nil {
		t.Fatalf("export line %q: %v", out, err)
	}
	for name, e := range map[string]map[string]any{"ledger --json": entries[0].(map[string]any), "ledger export": line} {
		got := e["usage"].(map[string]any)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: usage[%s] = %v, want %v", name, k, got[k], v)
			}
		}
		if p := e["prices_nano_usd_per_million"].(map[string]any)["code_interpreter_sessions"]; p != "30000000000000" {
			t.Errorf("%s: code interpreter price %v", name, p)
		}
		if e["vendor_key"] != "org-b" || e["transport"] != "websocket" {
			t.Errorf("%s: vendor_key %v, transport %v", name, e["vendor_key"], e["transport"])
		}
	}
	code, out, _ = ctl(t, "ledger", id)
	if code != 0 || !strings.Contains(out, "OTHER_USAGE") ||
		!strings.Contains(out, "code_interpreter_sessions=2,file_searches=3,image_generations=4,reasoning=2,web_searches=1") {
		t.Fatalf("ledger table:\n%s", out)
	}
}

func TestOtherUsage(t *testing.T) {
	if got := otherUsage(map[string]int64{"input": 5, "cache_read": 1, "audio_input": 0}); got != "-" {
		t.Errorf("no other usage: %q", got)
	}
	if got := otherUsage(map[string]int64{"output": 1, "image_generations": 2, "audio_output": 3}); got != "audio_output=3,image_generations=2" {
		t.Errorf("other usage: %q", got)
	}
}

func TestStateDiff(t *testing.T) {
	for _, tc := range []struct{ before, after, want string }{
		{"", "", "-"},
		{`{"suspended":false}`, `{"suspended":true}`, "suspended: false->true"},
		{"", `{"key":{"label":"ci","models":["a"]}}`, `key.label: -->"ci", key.models: -->["a"]`},
		{`{"key":{"label":"ci","revoked":false}}`, "", `key.label: "ci"->-, key.revoked: false->-`},
		{`{"limits":{"rpm":30,"tpm":0}}`, `{"limits":{"rpm":60,"tpm":0}}`, "limits.rpm: 30->60"},
		{`{"limits":{"rpm":30}}`, `{"limits":{"rpm":30}}`, "-"},
		{"not json", `{"a":1}`, `not json->{"a":1}`},
	} {
		if got := stateDiff(tc.before, tc.after); got != tc.want {
			t.Errorf("stateDiff(%q, %q) = %q, want %q", tc.before, tc.after, got, tc.want)
		}
	}
	if outcome("") != "done" || outcome("refused") != "refused" {
		t.Errorf("outcome: %q, %q", outcome(""), outcome("refused"))
	}
}
