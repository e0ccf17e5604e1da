package spool

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/gateway/internal/account"
)

// File names inside the spool directory.
const (
	fileName = "settlements.spool"
	tmpName  = fileName + ".tmp"
	lockName = "LOCK"
)

// ErrFull is returned by an append that would take the spool file past its
// size limit. The settlement is not kept: its hold is released, uncharged,
// when it expires.
var ErrFull = errors.New("spool: full")

// ErrClosed is returned by an append after Close.
var ErrClosed = errors.New("spool: closed")

// entry is one pending settlement and its line in the file.
type entry struct {
	seq  uint64
	st   account.Settlement
	line []byte
}

// journal is the spool file: an append-only sequence of lines, each written
// with one write and fsync'd before append returns, mirrored in memory by
// the pending entries. Entries leave only by rewrite, which replaces the file
// atomically (write a temporary file, fsync, rename, fsync the directory), so
// a crash at any point leaves either the old file or the new one; both hold
// every settlement not yet applied.
type journal struct {
	dir  string
	path string
	max  int64
	now  func() time.Time

	mu      sync.Mutex
	f       *os.File
	lock    *os.File
	size    int64
	pending []entry
	seq     uint64
	err     error // sticky: after a failed fsync the file's contents are unknown
	closed  bool

	// count and bytes mirror len(pending) and size for readers that must
	// not wait for an fsync: the request path and metric scrapes.
	count, bytes atomic.Int64
}

// loadReport says what openJournal found in an existing file.
type loadReport struct {
	records int    // good records
	torn    bool   // the last line was cut short (a crash mid-write) and was dropped
	corrupt int    // complete lines that failed their checksum, set aside
	kept    string // where the damaged file was copied, when corrupt > 0
}

// openJournal locks the directory, reads any records a previous run left and
// opens the file for appending.
func openJournal(dir string, max int64, now func() time.Time) (*journal, loadReport, error) {
	var rep loadReport
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, rep, fmt.Errorf("spool: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, rep, fmt.Errorf("spool: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		return nil, rep, fmt.Errorf("spool: %s is in use by another process: %w", dir, err)
	}
	j := &journal{dir: dir, path: filepath.Join(dir, fileName), max: max, now: now, lock: lock}
	if err := j.load(&rep); err != nil {
		lock.Close()
		return nil, rep, err
	}
	return j, rep, nil
}

// load reads the file, keeps its good records and leaves a file that holds
// exactly them, ready for appends.
func (j *journal) load(rep *loadReport) error {
	os.Remove(filepath.Join(j.dir, tmpName)) // a rewrite that never reached its rename
	data, err := os.ReadFile(j.path)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("spool: %w", err)
	}
	good := 0 // bytes up to the end of the last complete line
	for rest := data; len(rest) > 0; {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			// Only the last write can be cut short: each record is written
			// whole and synced before the next begins.
			rep.torn = true
			break
		}
		line := rest[:i+1]
		rest = rest[i+1:]
		good += len(line)
		st, err := decode(line[:i])
		if err != nil {
			rep.corrupt++
			continue
		}
		j.seq++
		j.pending = append(j.pending, entry{seq: j.seq, st: st, line: line})
	}
	rep.records = len(j.pending)

	if rep.corrupt > 0 {
		// Keep the damaged file for inspection, then write the good records
		// to a fresh one.
		rep.kept = j.path + ".corrupt-" + strconv.FormatInt(j.now().Unix(), 10)
		if err := os.WriteFile(rep.kept, data, 0o600); err != nil {
			return fmt.Errorf("spool: keeping damaged file: %w", err)
		}
		return j.rewriteLocked(j.pending)
	}
	f, err := os.OpenFile(j.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	if rep.torn {
		if err := f.Truncate(int64(good)); err != nil {
			f.Close()
			return fmt.Errorf("spool: dropping torn record: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("spool: %w", err)
		}
	}
	if !exists {
		// A new file: make its directory entry durable.
		if err := syncDir(j.dir); err != nil {
			f.Close()
			return err
		}
	}
	j.f, j.size = f, int64(good)
	j.publish()
	return nil
}

// publish updates count and bytes; j.mu is held.
func (j *journal) publish() {
	j.count.Store(int64(len(j.pending)))
	j.bytes.Store(j.size)
}

// append writes one record and syncs it to disk.
func (j *journal) append(st account.Settlement) (depth int, err error) {
	line, err := encode(st, j.now())
	if err != nil {
		return 0, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.closed:
		return 0, ErrClosed
	case j.err != nil:
		return 0, j.err
	case j.size+int64(len(line)) > j.max:
		return 0, fmt.Errorf("%w: %d bytes in %d records, limit %d bytes", ErrFull, j.size, len(j.pending), j.max)
	}
	if _, err := j.f.Write(line); err != nil {
		// Cut off whatever part of the line reached the file, so that the
		// next record starts on a line of its own.
		if terr := j.f.Truncate(j.size); terr != nil {
			j.err = fmt.Errorf("spool: write failed and could not be undone: %w", terr)
		}
		return 0, fmt.Errorf("spool: write: %w", err)
	}
	if err := j.f.Sync(); err != nil {
		// After a failed fsync the kernel may have dropped the dirty pages:
		// nothing more is trusted to this file.
		j.err = fmt.Errorf("spool: fsync failed earlier: %w", err)
		return 0, fmt.Errorf("spool: fsync: %w", err)
	}
	j.size += int64(len(line))
	j.seq++
	j.pending = append(j.pending, entry{seq: j.seq, st: st, line: line})
	j.publish()
	return len(j.pending), nil
}

// snapshot returns the pending entries, oldest first.
func (j *journal) snapshot() []entry {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]entry(nil), j.pending...)
}

// depth returns the number of pending entries and the file's size, without
// waiting for an append in progress.
func (j *journal) depth() (int, int64) {
	return int(j.count.Load()), j.bytes.Load()
}

// remove drops the entries whose seq is in done and rewrites the file
// without them. Entries appended since the caller's snapshot are kept.
func (j *journal) remove(done map[uint64]bool) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	keep := make([]entry, 0, len(j.pending))
	for _, e := range j.pending {
		if !done[e.seq] {
			keep = append(keep, e)
		}
	}
	if len(keep) == len(j.pending) {
		return nil
	}
	return j.rewriteLocked(keep)
}

// rewriteLocked replaces the file with one holding exactly keep, and makes
// keep the pending entries. Until the rename the old file stays in place, so
// a crash replays at worst some settlements already applied, which the store
// ignores.
func (j *journal) rewriteLocked(keep []entry) error {
	tmp := filepath.Join(j.dir, tmpName)
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("spool: rewrite: %w", err)
	}
	var buf bytes.Buffer
	for _, e := range keep {
		buf.Write(e.line)
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("spool: rewrite: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("spool: rewrite: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool: rewrite: %w", err)
	}
	if err := os.Rename(tmp, j.path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("spool: rewrite: %w", err)
	}
	nf, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		j.err = fmt.Errorf("spool: reopen after rewrite: %w", err)
		return j.err
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f, j.size, j.pending = nf, int64(buf.Len()), keep
	j.publish()
	// Until the directory is synced a crash may bring back the old file;
	// either file is correct, so a failure here is only reported.
	return syncDir(j.dir)
}

// close closes the file and releases the directory lock. Pending entries
// stay in the file for the next run.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	var err error
	if j.f != nil {
		err = j.f.Close()
	}
	if lerr := j.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// syncDir makes renames and creations in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("spool: sync %s: %w", dir, err)
	}
	return nil
}
