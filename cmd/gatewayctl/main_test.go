package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/admin"
	"github.com/modelgateway/gateway/internal/store"
)

const testToken = "cli-test-token"

// startAdmin serves the admin API on miniredis and returns its address.
func startAdmin(t *testing.T) string {
	t.Helper()
	addr, _ := startAdminStore(t)
	return addr
}

// startAdminStore serves the admin API on miniredis and returns its address
// and the store behind it.
func startAdminStore(t *testing.T) (string, *store.Store) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := store.New(rdb, store.Options{})
	svc := admin.New(st, admin.Options{
		DefaultLimits: account.Limits{DailyNanoUSD: 7e9, RPM: 60, WindowMinutes: 1}, Logger: log,
	})
	srv, err := admin.NewServer(svc, testToken, log)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(srv.Stop)
	return l.Addr().String(), st
}

// ctl runs gatewayctl in process and returns its exit code and output.
func ctl(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = execute(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// ctlJSON runs a command that must succeed with --json and decodes its output.
func ctlJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, out, errOut := ctl(t, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("gatewayctl %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("gatewayctl %s: not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
	return m
}

func TestCLI(t *testing.T) {
	addr := startAdmin(t)
	t.Setenv(addrEnv, addr)
	t.Setenv(tokenEnv, testToken)

	acct := ctlJSON(t, "accounts", "create", "--name", "acme", "--balance-usd", "100", "--rpm", "30")["account"].(map[string]any)
	id := acct["id"].(string)
	limits := acct["limits"].(map[string]any)
	// protojson writes int64 as strings; daily comes from the defaults.
	if acct["balance_nano_usd"] != "100000000000" || limits["rpm"] != "30" || limits["daily_nano_usd"] != "7000000000" {
		t.Fatalf("created %v", acct)
	}

	for i, want := range []bool{true, false} {
		r := ctlJSON(t, "topup", id, "--usd", "2.5", "--idempotency-key", "inv-1")
		if r["applied"] != want || r["balance_nano_usd"] != "102500000000" {
			t.Fatalf("top-up %d: %v", i, r)
		}
	}
	code, out, _ := ctl(t, "topup", id, "--usd", "2.5", "--idempotency-key", "inv-1")
	if code != 0 || !strings.Contains(out, "not applied") {
		t.Fatalf("repeat top-up, table: %d %q", code, out)
	}

	code, out, errOut := ctl(t, "keys", "create", id, "--label", "ci", "--expires", "720h", "--models", "m1,m2")
	if code != 0 {
		t.Fatalf("keys create: %s", errOut)
	}
	secret := ""
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "secret" {
			secret = f[1]
		}
	}
	if !strings.HasPrefix(secret, "cr_") || !strings.Contains(errOut, "shown once") {
		t.Fatalf("keys create printed %q / %q", out, errOut)
	}
	tok := ctlJSON(t, "tokens", "create", id)
	if !strings.HasPrefix(tok["secret"].(string), "ro_") {
		t.Fatalf("token: %v", tok)
	}

	for _, args := range [][]string{{"keys", "list", id}, {"keys", "list", id, "--json"}, {"audit"}, {"audit", "--json"}} {
		code, out, errOut := ctl(t, args...)
		if code != 0 {
			t.Fatalf("%v: %s", args, errOut)
		}
		for _, s := range []string{secret, secret[3:], tok["secret"].(string)} {
			if strings.Contains(out, s) {
				t.Fatalf("%v shows a secret:\n%s", args, out)
			}
		}
	}
	code, out, _ = ctl(t, "keys", "list", id)
	if code != 0 || !strings.Contains(out, "active") || !strings.Contains(out, "m1,m2") || !strings.Contains(out, "read-only") {
		t.Fatalf("keys list:\n%s", out)
	}

	r := ctlJSON(t, "limits", "set", id, "--daily-usd", "0")
	if l := r["account"].(map[string]any)["limits"].(map[string]any); l["daily_nano_usd"] != "0" || l["rpm"] != "30" {
		t.Fatalf("limits set: %v", l)
	}
	code, out, _ = ctl(t, "accounts", "list")
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "102.50") {
		t.Fatalf("accounts list:\n%s", out)
	}
	if ledger := ctlJSON(t, "ledger", id, "--all"); len(ledger["entries"].([]any)) != 0 {
		t.Fatalf("ledger: %v", ledger)
	}
}

func TestCLIErrors(t *testing.T) {
	addr := startAdmin(t)
	t.Setenv(tokenEnv, "")
	t.Setenv(tokenFileEnv, "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"accounts", "list", "--addr", addr}, "no admin token"},
		{[]string{"accounts", "list", "--addr", addr, "--token", "wrong"}, "admin token missing or wrong"},
		{[]string{"accounts", "get", "acct_missing", "--addr", addr, "--token", testToken}, "NotFound"},
		{[]string{"topup", "acct_x", "--usd", "1", "--addr", addr, "--token", testToken}, "idempotency-key"},
		{[]string{"topup", "acct_x", "--usd", "abc", "--idempotency-key", "k", "--addr", addr, "--token", testToken}, "not a USD amount"},
		{[]string{"limits", "set", "acct_x", "--addr", addr, "--token", testToken}, "no limit given"},
		{[]string{"accounts", "list", "--addr", "127.0.0.1:1", "--token", testToken, "--timeout", "2s"}, "unreachable"},
	} {
		code, out, errOut := ctl(t, tc.args...)
		if code == 0 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want failure mentioning %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

func TestSuspendAndResume(t *testing.T) {
	addr := startAdmin(t)
	t.Setenv(addrEnv, addr)
	t.Setenv(tokenEnv, testToken)
	id := ctlJSON(t, "accounts", "create", "--name", "acme")["account"].(map[string]any)["id"].(string)
	r := ctlJSON(t, "accounts", "suspend", id, "--reason", "unpaid")
	if r["account"].(map[string]any)["suspended"] != true {
		t.Fatalf("suspend: %v", r)
	}
	code, out, errOut := ctl(t, "accounts", "get", id)
	if code != 0 || !strings.Contains(out, "suspended") || !strings.Contains(out, "true") {
		t.Fatalf("get after suspend: %d %q %q", code, out, errOut)
	}
	r = ctlJSON(t, "accounts", "resume", id)
	if v, set := r["account"].(map[string]any)["suspended"]; set && v != false {
		t.Fatalf("resume: %v", r)
	}
	code, out, _ = ctl(t, "audit")
	if code != 0 || !strings.Contains(out, "account.suspend") || !strings.Contains(out, "account.resume") {
		t.Fatalf("audit: %q", out)
	}
	// The table shows where each change came from, that it was made and
	// what it changed.
	for _, want := range []string{"ORIGIN", "OUTCOME", "CHANGE", "127.0.0.1:", "done", "suspended: false->true", "suspended: true->false"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit shows no %q:\n%s", want, out)
		}
	}
	if code, _, _ := ctl(t, "accounts", "suspend", "acct_missing"); code == 0 {
		t.Fatal("suspending a missing account succeeded")
	}
}
