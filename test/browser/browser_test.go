// Package browser tests the web consoles in headless Chromium, driven with
// chromedp, against a whole gateway (Envoy, the sidecar, redis-server, the
// fake vendors). Screenshots of every page at desktop and phone width go to
// bin/screenshots.
package browser

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/modelgateway/gateway/test/launch"
)

// chromiumPath finds Debian's chromium (make test installs it), or the
// browser CHROMIUM_BIN names.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_BIN"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: `make chromium` installs Debian's package (or set CHROMIUM_BIN)")
	return ""
}

// newBrowser starts headless Chromium with a fresh profile; every tab of the
// test shares it.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelBrowser := chromedp.NewContext(ctx)
	t.Cleanup(cancelBrowser)
	if err := chromedp.Do(ctx); err != nil { // start the browser now
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// tab is one browser tab and what it saw: every URL it requested, every
// dialog, exception and console or browser-log error.
type tab struct {
	ctx context.Context
	t   *testing.T

	mu       sync.Mutex
	urls     []string
	dialogs  []string
	problems []string
}

func newTab(t *testing.T, browser context.Context, opts ...chromedp.ContextOption) *tab {
	t.Helper()
	tb := &tab{t: t}
	ctx, cancel := chromedp.NewContext(browser, append([]chromedp.ContextOption{chromedp.WithListener(tb.listen)}, opts...)...)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)
	tb.ctx = ctx
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, log.Enable, cdp.Empty{}); err != nil {
		t.Fatal(err)
	}
	return tb
}

// listen runs in the tab's message loop: it records, and closes a dialog
// from another goroutine (a dialog blocks the page).
func (tb *tab) listen(ev any) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		tb.urls = append(tb.urls, ev.Request.URL)
	case *page.EventJavascriptDialogOpening:
		tb.dialogs = append(tb.dialogs, string(ev.Type)+": "+ev.Message)
		go chromedp.Call(tb.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
	case *runtime.EventExceptionThrown:
		tb.problems = append(tb.problems, "exception: "+ev.ExceptionDetails.Text+" "+exceptionDescription(ev.ExceptionDetails))
	case *log.EventEntryAdded:
		if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
			tb.problems = append(tb.problems, fmt.Sprintf("log %s/%s: %s %s", ev.Entry.Source, ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
		}
	}
}

func exceptionDescription(d *runtime.ExceptionDetails) string {
	if d.Exception != nil {
		return d.Exception.Description
	}
	return ""
}

// do runs actions, failing the test on error.
func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("browser: %v\n%s\npage:\n%s", err, tb.seen(), tb.page())
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	v, err := chromedp.Run(tb.ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		tb.t.Fatalf("evaluating %s: %v\n%s", expr, err, tb.seen())
	}
	return v
}

func (tb *tab) text(sel string) string {
	tb.t.Helper()
	return eval[string](tb, fmt.Sprintf("document.querySelector(%q).textContent", sel))
}

// rows returns the text of each cell of a table's body, row by row.
func (tb *tab) rows(sel string) [][]string {
	tb.t.Helper()
	return eval[[][]string](tb, fmt.Sprintf(
		"Array.from(document.querySelectorAll(%q)).map(r => Array.from(r.cells).map(c => c.textContent.trim()))", sel+" tbody tr"))
}

func (tb *tab) location() string {
	tb.t.Helper()
	loc, err := chromedp.Run(tb.ctx, chromedp.Location())
	if err != nil {
		tb.t.Fatal(err)
	}
	return loc
}

// page describes the tab's page for a failure report.
func (tb *tab) page() string {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	body, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.documentElement.outerHTML.slice(0, 3000)"))
	return loc + "\n" + body
}

func (tb *tab) seen() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return fmt.Sprintf("dialogs: %q\nproblems: %q", tb.dialogs, tb.problems)
}

// clean fails the test if the page opened a dialog, threw, or logged an
// error or warning (a Content-Security-Policy violation among them).
func (tb *tab) clean() {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.dialogs) > 0 || len(tb.problems) > 0 {
		tb.t.Errorf("the page was not clean:\ndialogs: %q\nproblems: %q", tb.dialogs, tb.problems)
	}
}

// requested returns every URL the tab requested.
func (tb *tab) requested() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.urls...)
}

// Viewports of the screenshots.
var viewports = []struct {
	name          string
	width, height int64
	mobile        bool
}{
	{"desktop", 1280, 900, false},
	{"phone", 390, 844, true},
}

// screenshots writes a full-page screenshot of the tab's page at each
// viewport to bin/screenshots/NAME-VIEWPORT.png, and restores the desktop
// viewport. It also checks that nothing is wider than the viewport.
func (tb *tab) screenshots(name string) {
	tb.t.Helper()
	root, err := launch.RepoRoot()
	if err != nil {
		tb.t.Fatal(err)
	}
	dir := filepath.Join(root, "bin", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	for _, v := range viewports {
		var opts []chromedp.EmulateViewportOption
		if v.mobile {
			opts = append(opts, chromedp.EmulateMobile)
		}
		tb.do(chromedp.EmulateViewport(v.width, v.height, opts...))
		// Resize handlers run before the next frame's callbacks: after two
		// frames the page has its new layout.
		eval[bool](tb, "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))")
		// The page must not scroll sideways: wide tables scroll in their
		// own boxes.
		if w := eval[int64](tb, "document.documentElement.scrollWidth"); w > v.width {
			wide := eval[[]string](tb, `Array.from(document.querySelectorAll("body *")).
				filter(e => e.getBoundingClientRect().right > `+strconv.FormatInt(v.width, 10)+` + 1 && !(e.parentElement && e.parentElement.closest(".scroll"))).
				slice(0, 6).map(e => e.tagName + "#" + e.id + "." + e.className + " " + Math.round(e.getBoundingClientRect().right))`)
			tb.t.Errorf("%s at %s width: the page is %dpx wide; too wide: %q", name, v.name, w, wide)
		}
		png, err := chromedp.Run(tb.ctx, chromedp.FullScreenshot(100))
		if err != nil {
			tb.t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+"-"+v.name+".png"), png, 0o644); err != nil {
			tb.t.Fatal(err)
		}
	}
	tb.do(chromedp.EmulateViewport(1280, 900))
}

// noSecretsIn fails the test if a secret appears in any of the texts.
func noSecretsIn(t *testing.T, what string, texts []string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s == "" {
			continue
		}
		for _, x := range texts {
			if strings.Contains(x, s) {
				t.Errorf("a secret (%.6s…) appears in %s", s, what)
			}
		}
	}
}

var errNoDownload = errors.New("no download completed")
