package outbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

func mustOpen(t *testing.T, path string, slots int) (*Outbox, []Entry, int) {
	t.Helper()
	o, left, damaged, err := Open(path, slots)
	if err != nil {
		t.Fatal(err)
	}
	return o, left, damaged
}

func payloads(es []Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, string(e.Data))
	}
	slices.Sort(out)
	return out
}

// The child of TestEntriesOutliveSIGKILL: keeps three entries, drops one,
// says so, and waits to be killed.
func init() {
	path := os.Getenv("OUTBOX_TEST_CHILD")
	if path == "" {
		return
	}
	o, _, _, err := Open(path, 16)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var slots []int32
	for _, p := range []string{"one", "two", "three"} {
		s, ok := o.Keep([]byte(p))
		if !ok {
			fmt.Println("error: not kept")
			os.Exit(1)
		}
		slots = append(slots, s)
	}
	o.Drop(slots[1])
	fmt.Println("kept")
	select {}
}

// What a process kept and did not drop is there for the next one after a
// SIGKILL: no write of the file, no flush, no close.
func TestEntriesOutliveSIGKILL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "OUTBOX_TEST_CHILD="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "kept\n" {
		cmd.Process.Kill()
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	o, left, damaged := mustOpen(t, path, 16)
	defer o.Close()
	if got := payloads(left); !slices.Equal(got, []string{"one", "three"}) || damaged != 0 {
		t.Fatalf("after SIGKILL: entries %q, %d damaged; want one and three", got, damaged)
	}
	if o.Kept() != 2 {
		t.Fatalf("%d kept after open, want the 2 left", o.Kept())
	}
}

// An entry left by a previous run keeps its slot until dropped: new
// entries go elsewhere, and once dropped it is gone for the next run.
func TestLeftEntriesKeepTheirSlots(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox")
	o, left, _ := mustOpen(t, path, 4)
	if len(left) != 0 || o.Kept() != 0 {
		t.Fatalf("a new outbox holds %d entries", len(left))
	}
	a, _ := o.Keep([]byte("a"))
	o.Keep([]byte("b"))
	o.Close()

	o, left, _ = mustOpen(t, path, 4)
	if got := payloads(left); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("reopened: %q", got)
	}
	for range 2 {
		s, ok := o.Keep([]byte("new"))
		if !ok || slices.ContainsFunc(left, func(e Entry) bool { return e.Slot == s }) {
			t.Fatalf("a new entry took slot %d (ok %v) of a left one", s, ok)
		}
	}
	if _, ok := o.Keep([]byte("fifth")); ok {
		t.Fatal("kept a fifth entry in four slots")
	}
	for _, e := range left {
		if e.Slot == a {
			o.Drop(e.Slot)
		}
	}
	o.Close()
	o, left, _ = mustOpen(t, path, 4)
	defer o.Close()
	if got := payloads(left); !slices.Equal(got, []string{"b", "new", "new"}) {
		t.Fatalf("after dropping a: %q", got)
	}
}

// An entry whose bytes do not match its checksum (cut short while it was
// written) is counted and dropped, not returned.
func TestDamagedEntryIsDropped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox")
	o, _, _ := mustOpen(t, path, 4)
	o.Keep([]byte("good"))
	s, _ := o.Keep([]byte("damaged"))
	o.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[int(s)*SlotSize+header] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	o, left, damaged := mustOpen(t, path, 4)
	if got := payloads(left); !slices.Equal(got, []string{"good"}) || damaged != 1 {
		t.Fatalf("entries %q, %d damaged; want good and 1", got, damaged)
	}
	if o.Kept() != 1 {
		t.Fatalf("%d kept: the damaged slot was not freed", o.Kept())
	}
	o.Close()
}

// An outbox written with another number of slots is read whole.
func TestOtherGeometryIsRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox")
	o, _, _ := mustOpen(t, path, 2)
	o.Keep([]byte("x"))
	o.Keep([]byte("y"))
	o.Close()
	o, left, _ := mustOpen(t, path, 8)
	defer o.Close()
	if got := payloads(left); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("entries %q", got)
	}
	if st, _ := os.Stat(path); st.Size() != 9*SlotSize {
		t.Fatalf("file of %d bytes, want 9 slots", st.Size())
	}
}

// Keep refuses what does not fit in a slot, and nothing is kept empty.
func TestKeepRefusesWhatDoesNotFit(t *testing.T) {
	o, _, _ := mustOpen(t, filepath.Join(t.TempDir(), "outbox"), 2)
	defer o.Close()
	if _, ok := o.Keep(bytes.Repeat([]byte("x"), SlotSize-header+1)); ok {
		t.Fatal("kept an entry larger than a slot")
	}
	if _, ok := o.Keep(nil); ok {
		t.Fatal("kept an empty entry")
	}
	if _, ok := o.Keep(bytes.Repeat([]byte("x"), SlotSize-header)); !ok {
		t.Fatal("refused an entry that fills a slot")
	}
}

// Two processes (here two opens) cannot share an outbox.
func TestOutboxIsLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox")
	o, _, _ := mustOpen(t, path, 2)
	defer o.Close()
	if o2, _, _, err := Open(path, 2); err == nil {
		o2.Close()
		t.Fatal("a second open of the same outbox succeeded")
	}
}
