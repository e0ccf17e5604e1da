package deploy_test

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/mod/semver"
)

// binaries are the commands the image ships.
var binaries = []string{"gateway", "gatewayctl", "fakevendor"}

// parseDockerfile parses the Dockerfile with BuildKit's own parser into its
// stages; a parser warning or a lint finding fails the test.
func parseDockerfile(t *testing.T) ([]instructions.Stage, []instructions.ArgCommand) {
	t.Helper()
	res, err := parser.Parse(bytes.NewReader(readRepoFile(t, "Dockerfile")))
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile lint %s: %s", rule, msg)
	}})
	stages, meta, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	return stages, meta
}

func TestDockerfileStages(t *testing.T) {
	stages, _ := parseDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stage(s): want a build stage and a runtime stage", len(stages))
	}
	names := map[string]bool{}
	for _, s := range stages[:len(stages)-1] {
		if s.Name == "" {
			t.Errorf("stage FROM %s has no name", s.BaseName)
		}
		names[s.Name] = true
	}

	// The build stage: static, trimmed binaries of all three commands.
	build := stages[0]
	if !strings.HasPrefix(build.BaseName, "golang:") {
		t.Errorf("build stage FROM %s: want the official golang image", build.BaseName)
	}
	checkGoVersion(t, build.BaseName)
	env := map[string]string{}
	var built []string
	for _, c := range build.Commands {
		switch c := c.(type) {
		case *instructions.EnvCommand:
			for _, kv := range c.Env {
				env[kv.Key] = kv.Value
			}
		case *instructions.RunCommand:
			line := strings.Join(c.CmdLine, " ")
			if !strings.Contains(line, "go build") {
				continue
			}
			if env["CGO_ENABLED"] != "0" && !strings.Contains(line, "CGO_ENABLED=0") {
				t.Errorf("go build without CGO_ENABLED=0: %s", line)
			}
			// Stripped, and named after the release as the Makefile names it.
			for _, want := range []string{"-trimpath", `-ldflags "-s -w `, "internal/version.Release=$VERSION", "CHANGELOG.md"} {
				if !strings.Contains(line, want) {
					t.Errorf("go build lacks %s: %s", want, line)
				}
			}
			for _, b := range binaries {
				if regexp.MustCompile(`\./cmd/` + b + `\b`).MatchString(line) {
					built = append(built, b)
				}
			}
		}
	}
	for _, b := range binaries {
		if !slices.Contains(built, b) {
			t.Errorf("the build stage does not build ./cmd/%s", b)
		}
	}

	// The runtime stage: distroless, a non-root user, the config, the
	// sidecar as entrypoint.
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final.BaseName, "gcr.io/distroless/") {
		t.Errorf("runtime stage FROM %s: want a distroless image", final.BaseName)
	}
	var user string
	var expose, entrypoint, cmd []string
	copied := map[string]bool{}
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.ExposeCommand:
			expose = append(expose, c.Ports...)
		case *instructions.EntrypointCommand:
			if c.PrependShell {
				t.Error("ENTRYPOINT in shell form: distroless has no shell")
			}
			entrypoint = c.CmdLine
		case *instructions.CmdCommand:
			if c.PrependShell {
				t.Error("CMD in shell form: distroless has no shell")
			}
			cmd = c.CmdLine
		case *instructions.RunCommand:
			t.Errorf("RUN in the runtime stage (distroless has no shell): %s", strings.Join(c.CmdLine, " "))
		case *instructions.CopyCommand:
			if c.From != "" && !names[c.From] {
				t.Errorf("COPY --from=%s: no such stage", c.From)
			}
			if c.From == "" {
				for _, src := range c.SourcePaths {
					copied[src] = true
				}
			}
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if uid == "" || uid == "root" || uid == "0" {
		t.Errorf("runtime stage USER %q: want a non-root user", user)
	}
	if strings.Trim(uid, "0123456789") != "" {
		t.Errorf("USER %q: want a numeric uid, so that Kubernetes' runAsNonRoot can verify it", user)
	}
	for _, p := range []string{"50051", "8081"} {
		if !slices.Contains(expose, p) {
			t.Errorf("runtime stage does not EXPOSE %s", p)
		}
	}
	if !copied["gateway.yaml"] {
		t.Error("runtime stage does not copy gateway.yaml")
	}
	if !slices.Equal(entrypoint, []string{"gateway"}) {
		t.Errorf("ENTRYPOINT %q, want [gateway]", entrypoint)
	}
	if len(cmd) == 0 || cmd[0] != "serve" {
		t.Errorf("CMD %q: want serve", cmd)
	} else if v, ok := flagValue(cmd, "--config"); !ok || !strings.HasSuffix(v, "/gateway.yaml") {
		t.Errorf("CMD %q: want --config naming the copied gateway.yaml", cmd)
	}
}

// checkGoVersion: the builder's Go is at least go.mod's go line; the
// official images set GOTOOLCHAIN=local, so an older one fails the build.
func checkGoVersion(t *testing.T, image string) {
	t.Helper()
	tag := strings.TrimPrefix(image, "golang:")
	v, _, _ := strings.Cut(tag, "-")
	var want string
	for _, line := range strings.Split(string(readRepoFile(t, "go.mod")), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "go" {
			want = f[1]
		}
	}
	if want == "" {
		t.Fatal("go.mod has no go line")
	}
	if !semver.IsValid("v"+v) || semver.Compare("v"+v, "v"+want) < 0 {
		t.Errorf("build stage %s: Go %s is older than go.mod's go %s (or not a version)", image, v, want)
	}
}

// .dockerignore keeps local state, history and secrets out of the build
// context, and nothing the build needs.
func TestDockerignore(t *testing.T) {
	patterns, err := ignorefile.ReadAll(bytes.NewReader(readRepoFile(t, ".dockerignore")))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	check := func(path string, want bool) {
		got, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf(".dockerignore: %s excluded = %v, want %v", path, got, want)
		}
	}
	for _, p := range []string{".git/config", ".venv/bin/envoy", ".run/spool/x", "bin/gateway", ".env"} {
		check(p, true)
	}
	keep := []string{"go.mod", "go.sum", "gateway.yaml", "Dockerfile", "envoy/bootstrap.yaml.tmpl"}
	for _, b := range binaries {
		keep = append(keep, fmt.Sprintf("cmd/%s/main.go", b))
	}
	for _, p := range keep {
		check(p, false)
	}
}
