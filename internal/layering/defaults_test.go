package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// unrelatedDefaults are constants that match a config default by name or
// value but are another setting, by file and name, with why.
var unrelatedDefaults = map[string]bool{
	// The lease renewal interval, not upstreams[].health_check.interval.
	"leases.go DefaultInterval": true,
	// The id of an account's implicit project, not an upstream's vendor
	// key named "default" (config.DefaultKeyName).
	"account.go DefaultProject": true,
}

// A default the configuration sets is written once, in internal/config: a
// package whose constructor fills the same option refers to config's
// constant rather than writing the value again (5m and 64 for sockets,
// 8 and 16 for leases were each written twice, and could drift apart).
// Caught: a Default… constant outside internal/config written as the same
// literal as one of config's Default… constants, or as a default config's
// setDefaults writes as a literal for a field whose name ends in the
// constant's (DefaultShare, limits.LeaseShare).
func TestDefaultWrittenOnce(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	text := func(e ast.Expr) string {
		b, _ := os.ReadFile(fset.Position(e.Pos()).Filename)
		return string(b[fset.Position(e.Pos()).Offset:fset.Position(e.End()).Offset])
	}
	literal := func(e ast.Expr) bool {
		lit := true
		ast.Inspect(e, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name != "time" && !strings.Contains("Second Minute Hour Millisecond", id.Name) {
				lit = false
			}
			return lit
		})
		return lit
	}
	// config's defaults, by their literal text: a named constant, or the
	// fields setDefaults gives that literal.
	configDefaults := map[string]string{}
	fieldDefaults := map[string][]string{}
	files, err := filepath.Glob(filepath.Join(root, "internal", "config", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if strings.HasPrefix(name.Name, "Default") && i < len(n.Values) && literal(n.Values[i]) {
						configDefaults[text(n.Values[i])] = "config." + name.Name
					}
				}
			case *ast.CallExpr:
				if id, ok := n.Fun.(*ast.Ident); ok && (id.Name == "def" || id.Name == "defDur") && len(n.Args) == 2 && literal(n.Args[1]) {
					v := text(n.Args[1])
					fieldDefaults[v] = append(fieldDefaults[v], text(n.Args[0]))
				}
			}
			return true
		})
	}
	if len(configDefaults) == 0 {
		t.Fatal("found no defaults in internal/config")
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "config", "node_modules", "test", "deploy", ".venv", ".cache", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, ".pb.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if v, ok := n.(*ast.ValueSpec); ok {
				for i, name := range v.Names {
					if !strings.HasPrefix(name.Name, "Default") || i >= len(v.Values) || !literal(v.Values[i]) {
						continue
					}
					val := text(v.Values[i])
					if where, ok := configDefaults[val]; ok && !unrelatedDefaults[filepath.Base(path)+" "+name.Name] {
						t.Errorf("%s: %s = %s is written as %s is: derive it from internal/config",
							fset.Position(name.Pos()), name.Name, val, where)
					}
					for _, field := range fieldDefaults[val] {
						if strings.HasSuffix(field, strings.TrimPrefix(name.Name, "Default")) && !unrelatedDefaults[filepath.Base(path)+" "+name.Name] {
							t.Errorf("%s: %s = %s is config's default of %s written again: name it in internal/config and derive it",
								fset.Position(name.Pos()), name.Name, val, field)
						}
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
