package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the code of every .proto file into
// a temporary directory and fails when a committed file differs: run
// `make proto` after editing a .proto file, and commit the result.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the code generators")
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	protoDir := filepath.Join(root, "proto")
	files, err := Generate(context.Background(), root, protoDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("nothing generated")
	}
	tmp := t.TempDir()
	if err := write(tmp, files); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		rel := filepath.FromSlash(name)
		want, err := os.ReadFile(filepath.Join(tmp, rel))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(protoDir, rel))
		if err != nil {
			t.Errorf("%s is not committed (%v): run `make proto`", name, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("proto/%s is stale: run `make proto`", name)
		}
	}
}
