// Command gen regenerates the Go code of the project's .proto files
// (`make proto`).
//
// It needs no protoc: the .proto files are compiled to descriptors in Go
// (github.com/bufbuild/protocompile, pinned in go.mod) and handed to the
// standard code generators, protoc-gen-go and protoc-gen-go-grpc, run as
// protoc plugins. Both are built from the Go module proxy at pinned versions,
// so every machine writes byte-identical files.
//
// Usage (from anywhere in the repository):
//
//	go run ./proto/gen [-out DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	out := flag.String("out", "", "directory to write into (default: the proto/ directory itself)")
	flag.Parse()
	if err := run(context.Background(), *out); err != nil {
		fmt.Fprintln(os.Stderr, "proto/gen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out string) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	protoDir := filepath.Join(root, "proto")
	if out == "" {
		out = protoDir
	}
	files, err := Generate(ctx, root, protoDir)
	if err != nil {
		return err
	}
	if err := write(out, files); err != nil {
		return err
	}
	fmt.Printf("wrote %d files under %s\n", len(files), out)
	return nil
}

// write writes files (paths relative to dir, slash-separated) under dir.
func write(dir string, files map[string][]byte) error {
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// repoRoot finds the module root above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("go.mod not found above %s", dir)
		}
		dir = parent
	}
}
