// Package docs holds the project's documentation; its tests keep the README
// short, every section the README once held findable, and every relative link
// working.
package docs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

const root = ".."

// readmeLimit is the README's budget: a front door, not the manual.
const readmeLimit = 8 << 10

func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > readmeLimit {
		t.Fatalf("README.md is %d bytes; keep it within %d and move the rest to docs/", len(b), readmeLimit)
	}
}

// moved maps each section the README had when it held the whole manual to
// the file and heading that hold it now, so that nothing is lost when text
// moves again.
var moved = []struct{ old, file, heading string }{
	{"Model gateway", "README.md", "Model gateway"},
	{"Quick start", "README.md", "Quick start"},
	{"Quick start (make run)", "docs/local.md", "`make run`"},
	{"Quick start (upstreams)", "docs/local.md", "Upstreams"},
	{"Quick start (gatewayctl)", "docs/operations.md", "Administration with `gatewayctl`"},
	{"Architecture", "docs/architecture.md", "Architecture"},
	{"Architecture (per request)", "docs/architecture.md", "One request"},
	{"Reading your own writes", "docs/architecture.md", "Reading your own writes"},
	{"Architecture (code map)", "docs/architecture.md", "Code map"},
	{"Architecture (words)", "docs/architecture.md", "Words"},
	{"Configuration: `gateway.yaml`", "docs/configuration.md", "Configuration: `gateway.yaml`"},
	{"Sizing the circuit breakers", "docs/configuration.md", "Sizing the circuit breakers"},
	{"Configuration (environment)", "docs/configuration.md", "Environment"},
	{"Prices", "docs/billing.md", "Prices"},
	{"Prices: Source", "docs/billing.md", "Source"},
	{"Prices: Loading is strict", "docs/billing.md", "Loading is strict"},
	{"Prices: Matching never guesses", "docs/billing.md", "Matching never guesses"},
	{"Prices: What is billed", "docs/billing.md", "What is billed"},
	{"Prices: Money", "docs/billing.md", "Money"},
	{"Prices: Reload", "docs/billing.md", "Reload"},
	{"Prices: Listing", "docs/billing.md", "Listing"},
	{"API reference", "docs/clients.md", "API reference"},
	{"Behaviour clients can rely on", "docs/clients.md", "Behaviour clients can rely on"},
	{"Credentials", "docs/clients.md", "Credentials"},
	{"Sent to the vendor", "docs/clients.md", "Sent to the vendor"},
	{"Limits", "docs/billing.md", "Limits and holds"},
	{"Status codes", "docs/clients.md", "Status codes"},
	{"`GET /v1/usage?period=day|month|total`", "docs/clients.md", "`GET /v1/usage?period=day|month|total`"},
	{"`GET /health`", "docs/clients.md", "`GET /health`"},
	{"Liveness and readiness", "docs/operations.md", "Liveness and readiness"},
	{"Streams", "docs/clients.md", "Streams"},
	{"Chat-completions streams are always billed from the vendor's usage", "docs/clients.md", "Chat-completions streams are always billed from the vendor's usage"},
	{"Failed replies cost what the vendor bills", "docs/billing.md", "Failed replies cost what the vendor bills"},
	{"Holds and crashes", "docs/billing.md", "Holds and crashes"},
	{"Failover", "docs/failover.md", "Failover"},
	{"Failover (measured)", "docs/failover.md", "Measured"},
	{"Failover (bad days)", "docs/failover.md", "Bad days"},
	{"Operations", "docs/operations.md", "Operations"},
	{"Accounts and keys", "docs/operations.md", "Accounts and keys"},
	{"Reading usage", "docs/operations.md", "Reading usage"},
	{"Scaling out", "docs/operations.md", "Scaling out"},
	{"When Redis is down", "docs/operations.md", "When Redis is down"},
	{"Shutdown", "docs/operations.md", "Shutdown"},
	{"Ledger export and retention", "docs/operations.md", "Ledger export and retention"},
	{"Redis memory", "docs/operations.md", "Redis memory"},
	{"Redis commands per request", "docs/operations.md", "Redis commands per request"},
	{"Metrics", "docs/operations.md", "Metrics"},
	{"Alerts and dashboard", "docs/operations.md", "Alerts and dashboard"},
	{"Logs", "docs/operations.md", "Logs"},
	{"Deployment", "docs/deployment.md", "Deployment"},
	{"Image", "docs/deployment.md", "Image"},
	{"docker-compose", "docs/deployment.md", "docker-compose"},
	{"Kubernetes", "docs/deployment.md", "Kubernetes"},
	{"Runbooks", "docs/operations.md", "Runbooks"},
	{"Vendor hung", "docs/operations.md", "Vendor hung"},
	{"Redis hung or down", "docs/operations.md", "Redis hung or down"},
	{"Both endpoints down", "docs/operations.md", "Both endpoints down"},
	{"Trust model", "docs/security.md", "Trust model"},
	{"Who reaches which port", "docs/security.md", "Who reaches which port"},
	{"Where secrets live", "docs/security.md", "Where secrets live"},
	{"What a client controls", "docs/security.md", "What a client controls"},
	{"Tests", "CONTRIBUTING.md", "Tests"},
	{"Benchmarks", "docs/benchmarks.md", "Benchmarks"},
	{"Benchmarks (latest run)", "docs/benchmarks.md", "Latest runs"},
	{"Benchmarks (where the rest goes)", "docs/benchmarks.md", "Where the rest goes"},
	{"Benchmarks (what changed)", "test/bench/HISTORY.md", "What changed, and what each bought"},
	{"Benchmarks (runtime settings)", "test/bench/HISTORY.md", "Runtime settings"},
}

func TestEverySectionHasAHome(t *testing.T) {
	for _, m := range moved {
		heads, err := headings(filepath.Join(root, m.file))
		if err != nil {
			t.Error(err)
			continue
		}
		if !heads[m.heading] {
			t.Errorf("section %q: %s has no heading %q", m.old, m.file, m.heading)
		}
	}
}

// link matches an inline Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve checks every relative link of the project's
// Markdown: the file exists and, with a #fragment, has that heading.
func TestRelativeLinksResolve(t *testing.T) {
	files := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md"}
	for _, pattern := range []string{"docs/*.md", "test/bench/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, rel)
		}
	}
	checked := 0
	for _, f := range files {
		path := filepath.Join(root, f)
		lines, err := prose(path)
		if err != nil {
			t.Error(err)
			continue
		}
		for _, l := range lines {
			for _, sm := range link.FindAllStringSubmatch(l.text, -1) {
				target := sm[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), file)
				}
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: link %s: %v", f, l.n, target, err)
					continue
				}
				if frag == "" {
					continue
				}
				heads, err := headings(dest)
				if err != nil {
					t.Errorf("%s:%d: link %s: %v", f, l.n, target, err)
					continue
				}
				if !anchors(heads)[frag] {
					t.Errorf("%s:%d: link %s: no heading with anchor #%s", f, l.n, target, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative links found: the link pattern is broken")
	}
}

// The wire formats are named for what they are.
func TestNoLetteredFormatNames(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(root, "docs/*.md"))
	files = append(files, filepath.Join(root, "README.md"), filepath.Join(root, "CONTRIBUTING.md"))
	bad := regexp.MustCompile(`(?i)\bformat [AB]\b`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if loc := bad.FindIndex(b); loc != nil {
			t.Errorf("%s: %q: name the wire format (messages, chat completions)", f, b[loc[0]:loc[1]])
		}
	}
}

type line struct {
	n    int
	text string
}

// prose returns a Markdown file's lines outside fenced code blocks.
func prose(path string) ([]line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []line
	fenced := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		t := sc.Text()
		if strings.HasPrefix(strings.TrimSpace(t), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line{n, t})
		}
	}
	return out, sc.Err()
}

// headings returns the text of every ATX heading of a Markdown file.
func headings(path string) (map[string]bool, error) {
	lines, err := prose(path)
	if err != nil {
		return nil, err
	}
	heads := map[string]bool{}
	for _, l := range lines {
		trimmed := strings.TrimLeft(l.text, "#")
		if len(trimmed) < len(l.text) && strings.HasPrefix(trimmed, " ") {
			heads[strings.TrimSpace(trimmed)] = true
		}
	}
	return heads, nil
}

// anchors returns the anchors GitHub gives the headings: lower case,
// spaces as hyphens, punctuation other than hyphens and underscores dropped.
func anchors(heads map[string]bool) map[string]bool {
	out := map[string]bool{}
	for h := range heads {
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// architecture.md's "One request" names the file and function of each
// step: each file exists and declares each function named after it.
func TestOneRequestNamesRealCode(t *testing.T) {
	data, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	start := strings.Index(section, "## One request")
	if start < 0 {
		t.Fatal(`no "## One request" section`)
	}
	section = section[start+3:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	ident := regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)
	var file, src string
	checked := 0
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(section, -1) {
		tok := m[1]
		switch {
		case strings.HasSuffix(tok, ".go") || strings.HasSuffix(tok, ".lua"):
			file = tok
			if !strings.HasPrefix(file, "internal/") {
				file = "extproc/" + file
			}
			b, err := os.ReadFile(filepath.Join(root, file))
			if err != nil {
				t.Errorf("One request names %s: %v", tok, err)
			}
			src = string(b)
		case ident.MatchString(tok) && file != "" && strings.HasSuffix(file, ".go"):
			decl := regexp.MustCompile(`(?m)^(func (\([^)]*\) )?` + tok + `\(|\t` + tok + `\()`)
			if !decl.MatchString(src) {
				t.Errorf("One request names %s in %s, which declares no such function", tok, file)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Errorf("only %d functions named; the section should name each step's", checked)
	}
}

// operationPackage reports whether dir is an operation's package: one
// directory under extproc/format with an operation.go.
func operationPackage(dir string) bool {
	rest, ok := strings.CutPrefix(dir, "extproc/format/")
	if !ok || strings.Contains(rest, "/") {
		return false
	}
	_, err := os.Stat(filepath.Join(root, dir, "operation.go"))
	return err == nil
}

// The code map lists every Go package of the module, by its path; the
// operations' packages by the one row for them all.
func TestCodeMapListsEveryPackage(t *testing.T) {
	data, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(data)
	section = section[strings.Index(section, "## Code map"):]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z0-9_./-]+)`").FindAllStringSubmatch(section, -1) {
		listed[m[1]] = true
	}
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// Not the module's: tools, dependencies, the deploy module.
			if strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "node_modules" || d.Name() == "testdata" || rel == "deploy" || rel == "bin" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		dir := filepath.ToSlash(filepath.Dir(rel))
		if operationPackage(dir) && strings.Contains(section, "`extproc/format/NAME`") {
			return nil // an operation's package: the map's row for them all
		}
		if dir != "." && !listed[dir] {
			listed[dir] = true // one complaint per package
			t.Errorf("package %s is not in architecture.md's code map", dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// release is a "## X.Y.Z (YYYY-MM-DD)" heading of CHANGELOG.md.
var release = regexp.MustCompile(`^## (\d+)\.(\d+)\.(\d+) \(\d{4}-\d{2}-\d{2}\)$`)

// TestReleasesAreNamedOnce holds CHANGELOG.md to docs/releasing.md: below an
// optional "## Unreleased", every section is a release, newest first, each
// opening with its upgrade checklist from the one before; the chart's
// versions are the newest release's.
func TestReleasesAreNamedOnce(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	type rel struct {
		name     string
		v        [3]int
		upgrades string // the first "### " heading of the section
	}
	var rels []rel
	for i, l := range lines {
		if !strings.HasPrefix(l, "## ") || l == "## Unreleased" && len(rels) == 0 {
			if strings.HasPrefix(l, "### ") && len(rels) > 0 && rels[len(rels)-1].upgrades == "" {
				rels[len(rels)-1].upgrades = l
			}
			continue
		}
		m := release.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("CHANGELOG.md:%d: %q: want \"## X.Y.Z (YYYY-MM-DD)\" (docs/releasing.md)", i+1, l)
			continue
		}
		var r rel
		r.name = m[1] + "." + m[2] + "." + m[3]
		for j := range 3 {
			fmt.Sscan(m[j+1], &r.v[j])
		}
		rels = append(rels, r)
	}
	if len(rels) == 0 {
		t.Fatal("CHANGELOG.md names no release")
	}
	for i := 1; i < len(rels); i++ {
		newer, older := rels[i-1], rels[i]
		if !(newer.v[0] > older.v[0] || newer.v[0] == older.v[0] && (newer.v[1] > older.v[1] || newer.v[1] == older.v[1] && newer.v[2] > older.v[2])) {
			t.Errorf("CHANGELOG.md: %s is listed above %s: newest first", newer.name, older.name)
		}
		if want := "### Upgrading from " + older.name; newer.upgrades != want {
			t.Errorf("CHANGELOG.md: release %s opens with %q: want %q", newer.name, newer.upgrades, want)
		}
	}
	chart, err := os.ReadFile(filepath.Join(root, "deploy/helm/gateway/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"version", "appVersion"} {
		m := regexp.MustCompile(`(?m)^` + field + `: "?([^"\s]+)"?$`).FindSubmatch(chart)
		if m == nil || string(m[1]) != rels[0].name {
			t.Errorf("Chart.yaml %s: %q: want the newest release, %s", field, m, rels[0].name)
		}
	}
}
