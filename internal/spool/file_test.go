package spool

import (
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/gateway/internal/account"
	"github.com/modelgateway/gateway/internal/usage"
)

func settlement(i int) account.Settlement {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return account.Settlement{
		RequestID: "req_" + strconv.Itoa(i), AccountID: "acct1", KeyID: "key1",
		Requested: "m-20250101", Priced: "m", Reported: "m-20250101",
		Usage: usage.Usage{Input: 10, Output: int64(i), CacheRead: 2, CacheWrite1h: 5, AudioInput: 1, Reasoning: 1, WebSearches: 1},
		Rates: usage.Usage{Input: 3000, Output: 15000}, ServiceTier: "priority", LongContext: 200_000, Fallback: i%3 == 0,
		Cost: 1000 + int64(i), Estimated: i%2 == 0,
		Status: 200, Endpoint: "primary", Stream: true, StartedAt: t0, EndedAt: t0.Add(time.Second),
	}
}

func openT(t *testing.T, dir string, max int64) (*journal, loadReport) {
	t.Helper()
	j, rep, err := openJournal(dir, max, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.close() })
	return j, rep
}

func TestEncodeDecode(t *testing.T) {
	st := settlement(3)
	line, err := encode(st, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if line[len(line)-1] != '\n' || strings.Count(string(line), "\n") != 1 {
		t.Fatalf("not one line: %q", line)
	}
	got, err := decode(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	if got != st {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, st)
	}
	bad := append([]byte(nil), line[:len(line)-1]...)
	bad[len(bad)-3] ^= 1
	if _, err := decode(bad); err == nil {
		t.Fatal("a flipped bit was not noticed")
	}
	if _, err := decode(line[:len(line)/2]); err == nil {
		t.Fatal("half a record decoded")
	}
}

// Records survive a reopen, in order.
func TestJournalReopen(t *testing.T) {
	dir := t.TempDir()
	j, _ := openT(t, dir, 1<<20)
	for i := range 5 {
		if _, err := j.append(settlement(i)); err != nil {
			t.Fatal(err)
		}
	}
	j.close()
	j2, rep := openT(t, dir, 1<<20)
	if rep.records != 5 || rep.torn || rep.corrupt != 0 {
		t.Fatalf("report %+v", rep)
	}
	for i, e := range j2.snapshot() {
		if e.st != settlement(i) {
			t.Fatalf("record %d = %+v", i, e.st)
		}
	}
}

// A record cut short by a crash mid-write was never acknowledged: it is
// dropped on reload, and the next append starts on a clean line.
func TestJournalTornRecord(t *testing.T) {
	dir := t.TempDir()
	j, _ := openT(t, dir, 1<<20)
	for i := range 3 {
		if _, err := j.append(settlement(i)); err != nil {
			t.Fatal(err)
		}
	}
	j.close()
	line, _ := encode(settlement(99), time.Now())
	f, err := os.OpenFile(filepath.Join(dir, fileName), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(line[:len(line)/2])
	f.Close()

	j2, rep := openT(t, dir, 1<<20)
	if rep.records != 3 || !rep.torn || rep.corrupt != 0 {
		t.Fatalf("report %+v; want 3 records and a torn tail", rep)
	}
	if _, err := j2.append(settlement(3)); err != nil {
		t.Fatal(err)
	}
	j2.close()
	j3, rep := openT(t, dir, 1<<20)
	if rep.records != 4 || rep.torn {
		t.Fatalf("after append: report %+v; want 4 clean records", rep)
	}
	if got := j3.snapshot()[3].st; got != settlement(3) {
		t.Fatalf("last record %+v", got)
	}
}

// A complete record that fails its checksum (damage on disk) is set aside
// with a copy of the file; the others are kept.
func TestJournalCorruptRecord(t *testing.T) {
	dir := t.TempDir()
	j, _ := openT(t, dir, 1<<20)
	for i := range 3 {
		j.append(settlement(i))
	}
	j.close()
	path := filepath.Join(dir, fileName)
	b, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(b), "\n")
	lines[1] = strings.Replace(lines[1], `"cost":"1001"`, `"cost":"9001"`, 1)
	os.WriteFile(path, []byte(strings.Join(lines, "")), 0o600)

	j2, rep := openT(t, dir, 1<<20)
	if rep.records != 2 || rep.corrupt != 1 || rep.kept == "" {
		t.Fatalf("report %+v", rep)
	}
	if _, err := os.Stat(rep.kept); err != nil {
		t.Fatalf("damaged copy: %v", err)
	}
	got := j2.snapshot()
	if got[0].st != settlement(0) || got[1].st != settlement(2) {
		t.Fatalf("kept %+v", got)
	}
}

// The file is bounded: an append past the limit fails with ErrFull and
// leaves the file as it was.
func TestJournalFull(t *testing.T) {
	line, _ := encode(settlement(1), time.Now())
	j, _ := openT(t, t.TempDir(), int64(3*len(line)+len(line)/2))
	for i := range 3 {
		if _, err := j.append(settlement(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	if _, err := j.append(settlement(3)); !errors.Is(err, ErrFull) {
		t.Fatalf("err = %v; want ErrFull", err)
	}
	fi, _ := os.Stat(j.path)
	if n, s := j.depth(); n != 3 || s != fi.Size() || s > j.max {
		t.Fatalf("depth %d size %d, file %d bytes", n, s, fi.Size())
	}
	// Taking records out makes room again.
	if err := j.remove(map[uint64]bool{1: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := j.append(settlement(3)); err != nil {
		t.Fatalf("after remove: %v", err)
	}
}

// remove rewrites the file without the removed records and keeps records
// appended after the caller's snapshot.
func TestJournalRemove(t *testing.T) {
	dir := t.TempDir()
	j, _ := openT(t, dir, 1<<20)
	for i := range 4 {
		j.append(settlement(i))
	}
	snap := j.snapshot()
	j.append(settlement(4))
	done := map[uint64]bool{}
	for _, e := range snap {
		if e.st.RequestID != "req_2" {
			done[e.seq] = true
		}
	}
	if err := j.remove(done); err != nil {
		t.Fatal(err)
	}
	depth, size := j.depth()
	if depth != 2 {
		t.Fatalf("depth %d after remove", depth)
	}
	if fi, _ := os.Stat(filepath.Join(dir, fileName)); fi.Size() != size {
		t.Fatalf("file size %d, journal says %d", fi.Size(), size)
	}
	j.close()
	j2, rep := openT(t, dir, 1<<20)
	if rep.records != 2 {
		t.Fatalf("report %+v", rep)
	}
	got := j2.snapshot()
	if got[0].st.RequestID != "req_2" || got[1].st.RequestID != "req_4" {
		t.Fatalf("left %s, %s", got[0].st.RequestID, got[1].st.RequestID)
	}
	if _, err := os.Stat(filepath.Join(dir, tmpName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left behind: %v", err)
	}
}

// Two sidecars cannot share a spool directory.
func TestJournalLocked(t *testing.T) {
	dir := t.TempDir()
	j, _ := openT(t, dir, 1<<20)
	if _, _, err := openJournal(dir, 1<<20, time.Now); err == nil {
		t.Fatal("a second open of a locked spool succeeded")
	}
	j.close()
	if j2, _, err := openJournal(dir, 1<<20, time.Now); err != nil {
		t.Fatalf("open after close: %v", err)
	} else {
		j2.close()
	}
}

// A record written by a version-1 sidecar is still read.
func TestDecodeVersion1(t *testing.T) {
	js := `{"v":1,"request_id":"r1","account_id":"a","key_id":"k","model":"m","input":1,"output":2,"cache_write":3,"cache_read":4,"cost":5,"estimated":false,"status":200,"endpoint":"primary","stream":false,"started_at":"2025-03-01T12:00:00Z","ended_at":"2025-03-01T12:00:01Z","spooled_at":"2025-03-01T12:00:01Z"}`
	line := fmt.Appendf(nil, "%08x %s", crc32.Checksum([]byte(js), castagnoli), js)
	st, err := decode(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.Usage != (usage.Usage{Input: 1, Output: 2, CacheWrite5m: 3, CacheRead: 4}) || st.Requested != "m" || st.Cost != 5 {
		t.Fatalf("%+v", st)
	}
}

// A record written by a version-2 sidecar (every release before version 3)
// is read as it was written, to the nanosecond.
func TestDecodeVersion2(t *testing.T) {
	line := `694163ef {"v":2,"request_id":"r2","account_id":"a","key_id":"k","model":"m","model_requested":"m-20260101","model_reported":"m-20260101-x","usage":{"audio_input":6,"audio_output":7,"cache_read":3,"cache_write_1h":5,"cache_write_5m":4,"code_interpreter_sessions":10,"file_searches":9,"image_generations":11,"input":1,"output":2,"reasoning":1,"web_searches":8},"rates":{"audio_input":40000,"audio_output":80000,"cache_read":300,"cache_write_1h":6000,"cache_write_5m":3750,"code_interpreter_sessions":30000000,"file_searches":2500000,"image_generations":40000000,"input":3000,"output":15000,"web_searches":10000000},"service_tier":"priority","long_context":200000,"fallback":true,"cost":123456,"estimated":true,"status":200,"endpoint":"reserve","stream":true,"started_at":"2026-03-01T12:00:00.123456789Z","ended_at":"2026-03-01T12:00:01.623456789Z","spooled_at":"2026-03-01T12:00:02.123456789Z"}`
	st, err := decode([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	want := account.Settlement{RequestID: "r2", AccountID: "a", KeyID: "k", Requested: "m-20260101", Priced: "m", Reported: "m-20260101-x",
		Usage: usage.Usage{Input: 1, Output: 2, CacheRead: 3, CacheWrite5m: 4, CacheWrite1h: 5, AudioInput: 6, AudioOutput: 7, Reasoning: 1,
			WebSearches: 8, FileSearches: 9, CodeInterpreter: 10, ImageGenerations: 11},
		Rates: usage.Usage{Input: 3000, Output: 15000, CacheRead: 300, CacheWrite5m: 3750, CacheWrite1h: 6000, AudioInput: 40000, AudioOutput: 80000,
			WebSearches: 10_000_000, FileSearches: 2_500_000, CodeInterpreter: 30_000_000, ImageGenerations: 40_000_000},
		ServiceTier: "priority", LongContext: 200_000, Fallback: true, Cost: 123456, Estimated: true, Status: 200, Endpoint: "reserve", Stream: true,
		StartedAt: t0, EndedAt: t0.Add(1500 * time.Millisecond)}
	if !reflect.DeepEqual(st, want) {
		t.Fatalf("got  %+v\nwant %+v", st, want)
	}
}

// A version this sidecar does not know is refused, not guessed at.
func TestDecodeUnknownVersion(t *testing.T) {
	js := `{"v":4,"account_id":"a","entry":{"request_id":"r4"}}`
	line := fmt.Appendf(nil, "%08x %s", crc32.Checksum([]byte(js), castagnoli), js)
	if _, err := decode(line); err == nil || !strings.Contains(err.Error(), "version 4") {
		t.Fatalf("err = %v; want unknown version", err)
	}
}
