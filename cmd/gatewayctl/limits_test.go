package main

import (
	"strings"
	"testing"
)

// The limits commands: without flags they show each limit with what is
// used of it; each flag given changes one limit, 0 removes it, --json as
// everywhere.
func TestLimitsCommands(t *testing.T) {
	addr := startAdmin(t)
	t.Setenv(addrEnv, addr)
	t.Setenv(tokenEnv, testToken)

	id := ctlJSON(t, "accounts", "create", "--name", "acme", "--balance-usd", "100")["account"].(map[string]any)["id"].(string)
	r := ctlJSON(t, "accounts", "limits", id, "--tpm", "50000", "--concurrency", "8", "--monthly-usd", "300", "--daily-usd", "0")
	l := r["account"].(map[string]any)["limits"].(map[string]any)
	if l["tpm"] != "50000" || l["concurrency"] != "8" || l["monthly_nano_usd"] != "300000000000" || l["daily_nano_usd"] != "0" || l["rpm"] != "60" {
		t.Fatalf("account limits %v", l)
	}
	if _, ok := r["monthly_used_nano_usd"]; !ok {
		t.Fatalf("no monthly use in %v", r)
	}
	code, out, errOut := ctl(t, "accounts", "limits", id)
	if code != 0 || !strings.Contains(out, "tokens per minute") || !strings.Contains(out, "50000") || !strings.Contains(out, "300.00") {
		t.Fatalf("accounts limits: exit %d\n%s%s", code, out, errOut)
	}

	key := ctlJSON(t, "keys", "create", id, "--label", "ci")["key"].(map[string]any)["id"].(string)
	r = ctlJSON(t, "keys", "limits", id, key, "--rpm", "10", "--window-minutes", "2", "--tpm", "2000",
		"--concurrency", "2", "--daily-usd", "1", "--monthly-usd", "5.5", "--total-usd", "20")
	kl := r["key"].(map[string]any)["limits"].(map[string]any)
	want := map[string]string{"rpm": "10", "window_minutes": "2", "tpm": "2000", "concurrency": "2",
		"daily_nano_usd": "1000000000", "monthly_nano_usd": "5500000000", "total_nano_usd": "20000000000"}
	for k, v := range want {
		if kl[k] != v {
			t.Fatalf("key limits %v, want %s=%s", kl, k, v)
		}
	}
	if u := r["usage"].(map[string]any); u["in_flight"] != "0" || u["total_used_nano_usd"] != "0" {
		t.Fatalf("key usage %v", u)
	}
	// 0 removes one limit; the others stay.
	kl = ctlJSON(t, "keys", "limits", id, key, "--concurrency", "0")["key"].(map[string]any)["limits"].(map[string]any)
	if kl["concurrency"] != "0" || kl["tpm"] != "2000" {
		t.Fatalf("after removing concurrency %v", kl)
	}
	code, out, errOut = ctl(t, "keys", "limits", id, key)
	if code != 0 || !strings.Contains(out, "total (USD)") || !strings.Contains(out, "20.00") {
		t.Fatalf("keys limits: exit %d\n%s%s", code, out, errOut)
	}
	// An account has no lifetime cap; bad values are refused.
	if code, _, _ := ctl(t, "accounts", "limits", id, "--total-usd", "1"); code == 0 {
		t.Fatal("accounts limits took --total-usd")
	}
	if code, _, errOut := ctl(t, "keys", "limits", id, key, "--tpm", "-1"); code == 0 || !strings.Contains(errOut, "negative") {
		t.Fatalf("negative tpm: exit %d %s", code, errOut)
	}
	if code, _, _ := ctl(t, "keys", "limits", id, "key_missing"); code == 0 {
		t.Fatal("limits of a missing key shown")
	}
	a := ctlJSON(t, "accounts", "alert", id, "--balance-below-usd", "25")["account"].(map[string]any)
	if a["balance_alert_nano_usd"] != "25000000000" {
		t.Fatalf("alert %v", a)
	}
}
