// Package layering holds the test of the import rule: the packages under
// internal/ are the layer below the processor, the Envoy renderer, the
// commands and the harness, and import none of them.
package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/modelgateway/gateway/"

// above are the top-level packages no package under internal/ may import.
var above = []string{"cmd", "extproc", "envoy", "proto", "test", "deploy"}

// exceptions are the accepted imports, by importer, with why.
var exceptions = map[string][]string{
	// The admin API's service implements the generated gRPC server and
	// speaks its message types throughout; the generated code has no
	// dependencies of ours.
	module + "internal/admin":   {module + "proto/gateway/admin/v1"},
	module + "internal/console": {module + "proto/gateway/admin/v1"},
}

// No package under internal/ imports a top-level package (its tests
// included): the arrows point down.
func TestInternalImportsNothingAbove(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command")
	}
	cmd := exec.Command(goCmd, "list", "-f",
		`{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`,
		module+"internal/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := fields[0]
		for _, imp := range fields[1:] {
			if forbidden(imp) && !accepted(pkg, imp) {
				t.Errorf("%s imports %s", pkg, imp)
			}
		}
	}
}

func forbidden(imp string) bool {
	rel, ok := strings.CutPrefix(imp, module)
	if !ok {
		return false
	}
	top, _, _ := strings.Cut(rel, "/")
	for _, a := range above {
		if top == a {
			return true
		}
	}
	return false
}

func accepted(pkg, imp string) bool {
	for _, e := range exceptions[pkg] {
		if imp == e || strings.HasPrefix(imp, e+"/") {
			return true
		}
	}
	return false
}
