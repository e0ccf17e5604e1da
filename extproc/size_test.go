package extproc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a function of the processor and of the operations'
// packages: a step longer than this is split into steps with names.
const maxFuncLines = 80

// No function on the request path is longer than maxFuncLines.
func TestFunctionsAreShort(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok {
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines, more than %d", path, fd.Name.Name, n, maxFuncLines)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
