package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The production binary carries no test harness and no in-memory store:
// they belong to gateway-local and the tests.
func TestNoHarnessInProductionBinary(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command")
	}
	out, err := exec.Command(goCmd, "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/alicebob/miniredis",
		"github.com/modelgateway/gateway/test/",
		"github.com/modelgateway/gateway/internal/redistest",
		"github.com/modelgateway/gateway/internal/freeport",
		"github.com/modelgateway/gateway/internal/testclock",
		"github.com/modelgateway/gateway/internal/eventually",
		"github.com/modelgateway/gateway/internal/pgtest",
		"github.com/modelgateway/gateway/internal/mtls/mtlstest",
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if strings.HasPrefix(pkg, f) {
				t.Errorf("gateway depends on %s", pkg)
			}
		}
	}
}
