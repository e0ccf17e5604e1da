package layering

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// maxFields bounds the fields of a type on the request path: state that
// grows past it is split by phase or role into types of its own.
const maxFields = 20

// wideTypes are the processor's types allowed more fields, with why.
var wideTypes = map[string]string{
	"extproc.Metrics": "one field per collector, registered once; no request's state",
	"extproc.Options": "the processor's configuration, read once by NewServer",
}

// No struct type of the processor (package extproc and the packages under
// it) has more than maxFields fields, but those wideTypes names.
func TestRequestPathTypesSmall(t *testing.T) {
	root := filepath.Join("..", "..", "extproc")
	checked := 0
	walkGo(t, root, func(path string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			checked++
			fields := 0
			for _, fl := range st.Fields.List {
				fields += max(len(fl.Names), 1) // an embedded type is one
			}
			name := f.Name.Name + "." + ts.Name.Name
			if _, ok := wideTypes[name]; !ok && fields > maxFields {
				t.Errorf("%s: type %s has %d fields, more than %d: split it by phase or role", path, name, fields, maxFields)
			}
			return true
		})
	})
	if checked < 20 {
		t.Fatalf("only %d struct types found under %s", checked, root)
	}
}

// maxAdapterLines bounds each transport's adapter.
const maxAdapterLines = 250

// The WebSocket adapter (extproc/socket.go) is thin: under maxAdapterLines
// lines, no ext_proc message built or read (it does not import Envoy's
// API), and no operation named.
func TestSocketAdapterThin(t *testing.T) {
	f := adapterThin(t, "socket.go")
	for _, imp := range f.Imports {
		if strings.Contains(imp.Path.Value, "envoyproxy/go-control-plane") {
			t.Errorf("socket.go imports %s: the adapter speaks calls (call.go), not ext_proc", imp.Path.Value)
		}
	}
}

// The ext_proc adapter (extproc/envoy.go and its wire, envoywire.go),
// which turns Envoy's processing messages into the exchange's inputs and
// its answers into Envoy's, is as thin: each file under maxAdapterLines
// lines, and no operation named.
func TestEnvoyAdapterThin(t *testing.T) {
	adapterThin(t, "envoy.go")
	adapterThin(t, "envoywire.go")
}

// envoySide are the processor's files that speak Envoy's API: the
// ext_proc adapter, the service's registration, and the receivers of
// Envoy's access logs (a pooled key's refusals, abandoned attempts).
var envoySide = []string{"envoy.go", "envoywire.go", "server.go", "keylog.go", "abandoned.go"}

// Nothing else of the processor imports Envoy's API: the call, the
// exchange and the request's phases speak bytes, headers, onwards and
// Refusals, which the adapters translate; a new file is neutral unless
// it is named in envoySide.
func TestCallSpeaksNoEnvoy(t *testing.T) {
	dir := filepath.Join("..", "..", "extproc")
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range names {
		name := filepath.Base(path)
		if strings.HasSuffix(name, "_test.go") || slices.Contains(envoySide, name) {
			continue
		}
		checked++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if strings.Contains(imp.Path.Value, "envoyproxy/go-control-plane") {
				t.Errorf("%s imports %s: only the adapters (%v) speak Envoy's API", path, imp.Path.Value, envoySide)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d files checked under %s", checked, dir)
	}
}

// adapterThin checks that extproc's file name is under maxAdapterLines
// lines and names none of the paths, message and event types the
// operations declare (operation.Socket, operation.Path); it returns the
// parsed file.
func adapterThin(t *testing.T, name string) *ast.File {
	t.Helper()
	adapter := filepath.Join("..", "..", "extproc", name)
	src, err := os.ReadFile(adapter)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n >= maxAdapterLines {
		t.Errorf("%s: %d lines, at least %d", adapter, n, maxAdapterLines)
	}
	declared := operationStrings(t, filepath.Join("..", "..", "extproc", "format"))
	if len(declared) < 5 {
		t.Fatalf("only %d strings declared by the operations: %v", len(declared), declared)
	}
	f, err := parser.ParseFile(token.NewFileSet(), adapter, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		v, _ := strconv.Unquote(lit.Value)
		for _, d := range declared {
			// A path or a dotted type inside a message names it too; a
			// bare word only as the whole string.
			if v == d || strings.ContainsAny(d, "/.") && strings.Contains(v, d) {
				t.Errorf("%s: %s names %q, which an operation declares", adapter, lit.Value, d)
			}
		}
		return true
	})
	return f
}

// operationStrings are the strings in the operation.Socket and
// operation.Path literals under dir: the operations' paths, message and
// event types.
func operationStrings(t *testing.T, dir string) []string {
	var out []string
	walkGo(t, dir, func(_ string, f *ast.File) {
		ast.Inspect(f, func(n ast.Node) bool {
			cl, ok := n.(*ast.CompositeLit)
			if !ok || !declares(cl.Type) {
				return true
			}
			ast.Inspect(cl, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if v, _ := strconv.Unquote(lit.Value); strings.HasPrefix(v, "/") || strings.Contains(v, ".") || v == "error" {
						out = append(out, v)
					}
				}
				return true
			})
			return true
		})
	})
	return out
}

// declares reports whether a composite literal's type is operation.Socket
// or a list of operation.Path.
func declares(e ast.Expr) bool {
	if at, ok := e.(*ast.ArrayType); ok {
		e = at.Elt
	}
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "operation" && (sel.Sel.Name == "Socket" || sel.Sel.Name == "Path")
}

// walkGo parses each Go file under root but tests.
func walkGo(t *testing.T, root string, fn func(path string, f *ast.File)) {
	t.Helper()
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		fn(path, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
