package layering

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"testing"
)

// storeTypes are the exported types package store may declare, with why:
// the adapter's own. A value another package only passes to the store or
// reads from it (an entry, a report, a result, the arguments of a call) is
// the domain's, and lives in internal/account, internal/ledger or
// internal/audit, so that a package using it need not import the Redis
// adapter.
var storeTypes = map[string]string{
	"Store":        "the adapter itself",
	"Options":      "the adapter's configuration (clock, lifetimes, retention)",
	"ShardsDown":   "the adapter's error: Redis Cluster shards that did not answer",
	"SignInLimits": "the bounds of the store's sign-in counters (SignInAttempt, lua/signin.lua), the console's configuration of them, no domain value",
}

// internal/store exports no type but those storeTypes names: domain types
// live apart from the store adapter.
func TestStoreExportsOnlyTheAdapter(t *testing.T) {
	declared := map[string]bool{}
	walkGo(t, filepath.Join("..", "store"), func(path string, f *ast.File) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				if !ts.Name.IsExported() {
					continue
				}
				declared[ts.Name.Name] = true
				if _, ok := storeTypes[ts.Name.Name]; !ok {
					t.Errorf("%s: store exports type %s: a domain type goes to internal/account, internal/ledger or internal/audit (or, if it is the adapter's own, into storeTypes with why)",
						path, ts.Name.Name)
				}
			}
		}
	})
	if !declared["Store"] {
		t.Fatal("no type Store found in internal/store")
	}
	for name := range storeTypes {
		if !declared[name] {
			t.Errorf("storeTypes names %s, which internal/store no longer declares: drop it", name)
		}
	}
}
