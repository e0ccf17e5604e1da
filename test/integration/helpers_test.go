package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/modelgateway/gateway/test/launch/launchtest"
)

// runWith runs the named tests of pkg with env added to the environment and
// fails unless every one of them ran and passed: a test that skipped for
// want of the server env names fails here.
func runWith(t *testing.T, pkg string, tests []string, env ...string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not on PATH: %v", err)
	}
	cmd := exec.Command(goBin, "test", "-count=1", "-v", "-run", "^("+strings.Join(tests, "|")+")$", pkg)
	cmd.Dir = launchtest.RepoRoot(t)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test %s: %v\n%s", pkg, err, out)
	}
	for _, name := range tests {
		if !strings.Contains(string(out), "--- PASS: "+name+" ") {
			t.Fatalf("%s of %s did not pass:\n%s", name, pkg, out)
		}
	}
}

// skipShort skips tests that start processes under -short.
func skipShort(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes: skipped by -short")
	}
}
