package redistest

import (
	"strings"
	"testing"
)

func TestStart(t *testing.T) {
	addr := Start(t)
	if err := ping(addr); err != nil {
		t.Fatal(err)
	}
}

func TestStopStart(t *testing.T) {
	s := NewServer(t)
	if _, err := command(s.Addr, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if err := ping(s.Addr); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Stop() // stopping twice is harmless
	s.Start()
	if err := ping(s.Addr); err != nil {
		t.Fatalf("PING after Start: %v", err)
	}
	if v, err := command(s.Addr, "GET", "k"); err == nil && v == "v" {
		t.Fatal("data survived a restart; the server should keep nothing")
	}
	s.Restart()
	if err := ping(s.Addr); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

func TestStartCluster(t *testing.T) {
	addrs := StartCluster(t, 3)
	if len(addrs) != 3 {
		t.Fatalf("got %d nodes, want 3", len(addrs))
	}
	for _, addr := range addrs {
		info, err := command(addr, "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "cluster_known_nodes:3") {
			t.Errorf("%s: %s", addr, info)
		}
	}
}

func TestPersistenceSurvivesStop(t *testing.T) {
	s := NewServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	if _, err := command(s.Addr, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Start()
	if v, err := command(s.Addr, "GET", "k"); err != nil || v != "v" {
		t.Fatalf("GET k after restart = %q, %v; want the value kept on disk", v, err)
	}
}
