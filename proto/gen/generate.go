package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bufbuild/protocompile"
	"github.com/bufbuild/protocompile/protoutil"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

// plugin is a protoc code generator built from the Go module proxy.
type plugin struct {
	name string // binary name
	pkg  string // Go package of its main
	// version pins the generator. Empty means the version go.mod requires:
	// protoc-gen-go must match the google.golang.org/protobuf runtime the
	// generated code links against.
	version string
}

var plugins = []plugin{
	{name: "protoc-gen-go", pkg: "google.golang.org/protobuf/cmd/protoc-gen-go"},
	{name: "protoc-gen-go-grpc", pkg: "google.golang.org/grpc/cmd/protoc-gen-go-grpc", version: "v1.6.2"},
}

// pluginParameter makes output paths follow the .proto files' paths, so that
// proto/gateway/admin/v1/admin.proto yields proto/gateway/admin/v1/admin.pb.go.
const pluginParameter = "paths=source_relative"

// Generate compiles every .proto file under protoDir and returns the
// generated files by path relative to protoDir. root is the module root,
// where the generators are built.
func Generate(ctx context.Context, root, protoDir string) (map[string][]byte, error) {
	names, err := protoFiles(protoDir)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no .proto files under %s", protoDir)
	}
	req, err := compile(ctx, protoDir, names)
	if err != nil {
		return nil, err
	}
	bin, err := os.MkdirTemp("", "proto-gen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(bin)
	out := map[string][]byte{}
	for _, p := range plugins {
		path, err := p.build(ctx, root, bin)
		if err != nil {
			return nil, err
		}
		if err := runPlugin(ctx, path, req, out); err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return out, nil
}

// protoFiles lists the .proto files under dir as slash-separated paths
// relative to it, sorted.
func protoFiles(dir string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".proto") {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	slices.Sort(names)
	return names, err
}

// compile parses and links the files and returns the request protoc would
// send a plugin: every file with its imports, dependencies first.
func compile(ctx context.Context, protoDir string, names []string) (*pluginpb.CodeGeneratorRequest, error) {
	c := protocompile.Compiler{
		Resolver:       protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{protoDir}}),
		SourceInfoMode: protocompile.SourceInfoStandard, // comments become doc comments
	}
	files, err := c.Compile(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	req := &pluginpb.CodeGeneratorRequest{
		FileToGenerate: names,
		Parameter:      proto.String(pluginParameter),
	}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, protoutil.ProtoFromFileDescriptor(fd))
	}
	for _, f := range files {
		add(f)
	}
	return req, nil
}

// build compiles the plugin into dir and returns its path.
func (p plugin) build(ctx context.Context, root, dir string) (string, error) {
	var cmd *exec.Cmd
	if p.version == "" {
		// Inside the module: the version go.mod requires.
		cmd = exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, p.name), p.pkg)
	} else {
		cmd = exec.CommandContext(ctx, "go", "install", p.pkg+"@"+p.version)
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
	}
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", p.name, err, out)
	}
	return filepath.Join(dir, p.name), nil
}

// runPlugin runs one generator as protoc does (request on stdin, response on
// stdout) and adds its files to out.
func runPlugin(ctx context.Context, path string, req *pluginpb.CodeGeneratorRequest, out map[string][]byte) error {
	in, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w\n%s", err, stderr.Bytes())
	}
	var resp pluginpb.CodeGeneratorResponse
	if err := proto.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return fmt.Errorf("reading response: %w", err)
	}
	if resp.Error != nil {
		return fmt.Errorf("%s", resp.GetError())
	}
	for _, f := range resp.File {
		if f.GetInsertionPoint() != "" {
			return fmt.Errorf("insertion points are not supported (%s)", f.GetName())
		}
		out[f.GetName()] = []byte(f.GetContent())
	}
	return nil
}
