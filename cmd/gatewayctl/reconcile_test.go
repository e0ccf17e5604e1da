package main

import (
	"strings"
	"testing"
	"time"
)

func TestReconcileTime(t *testing.T) {
	ts, err := reconcileTime("--from", "2026-01-02T10:00:00Z")
	if err != nil || !ts.AsTime().Equal(time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)) {
		t.Fatalf("%v %v", ts, err)
	}
	ts, err = reconcileTime("--from", "2h")
	if err != nil || time.Since(ts.AsTime()) < 2*time.Hour {
		t.Fatalf("2h ago: %v %v", ts, err)
	}
	if _, err := reconcileTime("--to", "yesterday"); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Fatalf("err %v", err)
	}
}

func TestKinds(t *testing.T) {
	if got := kinds(map[string]int64{"output": -3, "input": 10, "cache_read": 0}); got != "input=10,output=-3" {
		t.Errorf("kinds %q", got)
	}
	if got := kinds(nil); got != "0" {
		t.Errorf("kinds of nothing %q", got)
	}
}

// Without an upstream's admin key the admin API says what to configure;
// a window backwards is refused before any vendor is asked.
func TestReconcileErrors(t *testing.T) {
	t.Setenv(addrEnv, startAdmin(t))
	t.Setenv(tokenEnv, testToken)
	code, _, errOut := ctl(t, "reconcile", "--from", "2h")
	if code == 0 || !strings.Contains(errOut, "admin_credential_env") {
		t.Errorf("exit %d: %s", code, errOut)
	}
	code, _, errOut = ctl(t, "reconcile", "--from", "nonsense")
	if code == 0 || !strings.Contains(errOut, "--from") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}
