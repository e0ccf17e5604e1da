package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// starters are the test helpers that start a server process; the unit tier
// (every package outside test/ and deploy/) needs Go alone, so it asks for
// test/integration's servers (redistest.Provided, pgtest.Provided) instead.
var starters = map[string][]string{
	"redistest": {"Start", "NewServer", "NewServerWith", "StartCluster", "StartReplicatedCluster", "NewTLSServer"},
}

// No unit test starts a redis-server: `make unit` passes with only Go on
// PATH.
func TestUnitTierStartsNoServer(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "test", "deploy", ".git", ".venv", ".cache", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pkg, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			for _, name := range starters[pkg.Name] {
				if sel.Sel.Name == name {
					t.Errorf("%s: %s.%s starts a server in the unit tier; use %s.Provided and run the test from test/integration",
						fset.Position(sel.Pos()), pkg.Name, name, pkg.Name)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("only %d test files checked", checked)
	}
}
