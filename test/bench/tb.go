package main

import (
	"fmt"
	"log"
	"os"
	"sync"
)

// benchTB is the bench's failure handling: a failure stops every process
// the bench started (newest first, as tests do) and exits. The launcher's
// test helpers report to it (it satisfies launch.TB).
type benchTB struct {
	mu       sync.Mutex
	cleanups []func()
	failed   bool
	dirs     []string
}

func newBenchTB() *benchTB { return &benchTB{} }

func (t *benchTB) Helper()      {}
func (t *benchTB) Name() string { return "bench" }

func (t *benchTB) Log(args ...any)                 { log.Print(args...) }
func (t *benchTB) Logf(format string, args ...any) { log.Printf(format, args...) }

func (t *benchTB) Error(args ...any) { t.markFailed(); log.Print(args...) }
func (t *benchTB) Errorf(format string, args ...any) {
	t.markFailed()
	log.Printf(format, args...)
}

func (t *benchTB) Fatal(args ...any)                 { t.die(fmt.Sprint(args...)) }
func (t *benchTB) Fatalf(format string, args ...any) { t.die(fmt.Sprintf(format, args...)) }
func (t *benchTB) FailNow()                          { t.die("FailNow") }

// Skipf is a failure here: a benchmark that cannot start its stack (no
// redis-server, say) must not write a results file that looks complete.
func (t *benchTB) Skipf(format string, args ...any) {
	t.die("cannot run: " + fmt.Sprintf(format, args...))
}

func (t *benchTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *benchTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

func (t *benchTB) TempDir() string {
	d, err := os.MkdirTemp("", "gateway-bench-")
	if err != nil {
		t.die(err.Error())
	}
	t.mu.Lock()
	t.dirs = append(t.dirs, d)
	t.mu.Unlock()
	return d
}

func (t *benchTB) markFailed() {
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

// die reports the failure, stops every process the harness started (the
// cleanups print their logs' tails because Failed is now true) and exits.
func (t *benchTB) die(msg string) {
	t.markFailed()
	log.Print("FATAL: ", msg)
	t.runCleanups()
	os.Exit(1)
}

// runCleanups runs the registered cleanups newest first, as testing does,
// then removes the temporary directories. Each runs at most once, whichever
// goroutine gets here first.
func (t *benchTB) runCleanups() {
	for {
		t.mu.Lock()
		n := len(t.cleanups)
		if n == 0 {
			dirs := t.dirs
			t.dirs = nil
			t.mu.Unlock()
			for _, d := range dirs {
				os.RemoveAll(d)
			}
			return
		}
		f := t.cleanups[n-1]
		t.cleanups = t.cleanups[:n-1]
		t.mu.Unlock()
		f()
	}
}
