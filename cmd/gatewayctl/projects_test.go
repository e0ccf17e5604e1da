package main

import (
	"strings"
	"testing"
)

// projects create|list|set-limits|delete and keys create --project and
// keys move --project, end to end through the admin API.
func TestCLIProjects(t *testing.T) {
	addr := startAdmin(t)
	t.Setenv(addrEnv, addr)
	t.Setenv(tokenEnv, testToken)
	id := ctlJSON(t, "accounts", "create", "--name", "acme", "--balance-usd", "10")["account"].(map[string]any)["id"].(string)

	p := ctlJSON(t, "projects", "create", id, "--name", "Team A", "--daily-usd", "2.5", "--rpm", "30")["project"].(map[string]any)
	pid := p["id"].(string)
	if l := p["limits"].(map[string]any); p["name"] != "Team A" || l["daily_nano_usd"] != "2500000000" || l["rpm"] != "30" {
		t.Fatalf("created %v", p)
	}
	if l := ctlJSON(t, "projects", "set-limits", id, pid, "--total-usd", "5")["project"].(map[string]any)["limits"].(map[string]any); l["total_nano_usd"] != "5000000000" || l["rpm"] != "30" {
		t.Fatalf("set-limits %v", l)
	}
	if code, _, errOut := ctl(t, "projects", "set-limits", id, "default", "--rpm", "1"); code == 0 || !strings.Contains(errOut, "default project") {
		t.Fatalf("limits of the default project: %d %s", code, errOut)
	}
	k := ctlJSON(t, "keys", "create", id, "--project", pid)["key"].(map[string]any)
	if k["project_id"] != pid {
		t.Fatalf("key %v", k)
	}
	code, out, _ := ctl(t, "projects", "list", id)
	if code != 0 || !strings.Contains(out, "default") || !strings.Contains(out, "Team A") || !strings.Contains(out, "2.50") {
		t.Fatalf("projects list:\n%s", out)
	}
	if code, _, errOut := ctl(t, "projects", "delete", id, pid); code == 0 || !strings.Contains(errOut, "keys") {
		t.Fatalf("delete with keys: %d %s", code, errOut)
	}
	if code, _, _ := ctl(t, "keys", "move", id, k["id"].(string)); code == 0 {
		t.Fatal("keys move without --project succeeded")
	}
	if m := ctlJSON(t, "keys", "move", id, k["id"].(string), "--project", "default")["key"].(map[string]any); m["project_id"] != "default" {
		t.Fatalf("moved %v", m)
	}
	if code, _, errOut := ctl(t, "projects", "delete", id, pid); code != 0 {
		t.Fatalf("delete: %s", errOut)
	}
	if ps := ctlJSON(t, "projects", "list", id)["projects"].([]any); len(ps) != 1 {
		t.Fatalf("projects after delete %v", ps)
	}
}
