package e2e

import (
	"os"
	"sync"
	"testing"

	"github.com/modelgateway/gateway/test/launch"
)

// shared holds the stack of default options that the tests of one file
// share (sharedStack), by file, until another file's tests ask for theirs
// or every test has run (TestMain).
var shared struct {
	mu     sync.Mutex
	stacks map[string]*launch.Stack
}

// sharedStack is a stack of default options shared by the tests of file
// that ask for it, started by the first of them: a stack start is about a
// second of each such test. The tests stay independent as long as each
// makes its own accounts and keys and leaves the stack as it found it
// (no fake controls, no stopped process, no counts of the whole stack).
// Failures go to the test using it, and its logs are printed if that test
// failed.
func sharedStack(t *testing.T, file string) *launch.Stack {
	t.Helper()
	if testing.Short() {
		t.Skip("starts real processes (Envoy, redis-server): skipped by -short (make unit)")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	s := shared.stacks[file]
	if s == nil {
		// One shared stack at a time: another file's tests have run (tests
		// run file by file), and its stack would idle on through the rest.
		for f, other := range shared.stacks {
			other.Close()
			delete(shared.stacks, f)
		}
		var err error
		if s, err = launch.Up(launch.Options{}); err != nil {
			t.Fatal(err)
		}
		if shared.stacks == nil {
			shared.stacks = map[string]*launch.Stack{}
		}
		shared.stacks[file] = s
	}
	s.T, s.Primary.T, s.Reserve.T = t, t, t
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(s.Logs())
		}
	})
	return s
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range shared.stacks {
		s.Close()
	}
	os.Exit(code)
}
