// Package outbox keeps, outside the process, what only the process knows of
// its requests until Redis knows it too. A request admitted from a lease
// (internal/leases) is known to Redis only once its hold record is sent, a
// round or two later, or once its settlement is applied; a sidecar killed
// without warning (SIGKILL, the OOM killer) in between would take the
// request with it: served by the vendor, in no ledger. Its entry here
// outlives the process, and the next sidecar on the same spool directory
// sends the records it finds, so that the sweeper settles those requests as
// it settles any dead sidecar's.
//
// The outbox is a file of fixed-size slots mapped into memory: keeping and
// dropping an entry are memory writes, no system call. The kernel's page
// cache holds them when the process dies; a machine that fails loses them,
// as it loses the process's memory.
package outbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"sync"
	"sync/atomic"
)

// SlotSize is the room of one entry, its 8-byte header included. An entry
// that does not fit is not kept (Keep reports it).
const SlotSize = 2048

// DefaultSlots is how many entries an outbox holds at once: the settler's
// queue bound, so that a store far behind fills the queue before the outbox.
const DefaultSlots = 8192

// The file is a header slot, then the entry slots. The header holds magic,
// then the slot size and the number of slots (little-endian uint32s), so
// that an outbox of another geometry is still read. Each entry slot holds
// its payload's length (0: free), its CRC-32C, then the payload.
var magic = [8]byte{'g', 'w', 'o', 'u', 't', 'b', 'o', 'x'}

const header = 8

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrUnsupported: this platform cannot map files into memory.
var ErrUnsupported = errors.New("outbox: not supported on this platform")

// Outbox is an open outbox file. Its methods are safe for concurrent use.
type Outbox struct {
	f    *os.File
	data []byte

	mu   sync.Mutex
	free []int32 // free slots; the last freed is reused first

	full atomic.Int64 // entries refused for want of a free slot or of room in one
}

// Entry is one entry a previous process left: its payload, kept again in
// Slot of the new file until the caller drops it.
type Entry struct {
	Slot int32
	Data []byte
}

// Open opens the outbox at path, creating it, with room for slots entries,
// and returns the entries a previous process left there (still kept, for
// the caller to send and then drop) and how many it found damaged (an
// entry cut short by a crash while it was written, whose request was never
// forwarded). The file is locked: two processes cannot share it.
func Open(path string, slots int) (*Outbox, []Entry, int, error) {
	if slots <= 0 {
		slots = DefaultSlots
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("outbox: %w", err)
	}
	o, entries, damaged, err := open(f, slots)
	if err != nil {
		f.Close()
		return nil, nil, 0, err
	}
	return o, entries, damaged, nil
}

func open(f *os.File, slots int) (*Outbox, []Entry, int, error) {
	if err := lockFile(f); err != nil {
		return nil, nil, 0, fmt.Errorf("outbox: %s is in use by another process: %w", f.Name(), err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, nil, 0, fmt.Errorf("outbox: %w", err)
	}
	size := int64(slots+1) * SlotSize
	var h [16]byte
	if st.Size() == size {
		if _, err := f.ReadAt(h[:], 0); err != nil {
			return nil, nil, 0, fmt.Errorf("outbox: %w", err)
		}
	}
	if [8]byte(h[:8]) != magic || binary.LittleEndian.Uint32(h[8:]) != SlotSize || binary.LittleEndian.Uint32(h[12:]) != uint32(slots) {
		// New, or of another geometry: its entries are read, then written
		// again into a file of this one. (A crash in between loses them:
		// only an upgrade that changes the geometry takes this path.)
		left, damaged, err := readLeft(f)
		if err != nil {
			return nil, nil, 0, err
		}
		slots = max(slots, len(left))
		size = int64(slots+1) * SlotSize
		if err := f.Truncate(0); err != nil {
			return nil, nil, 0, fmt.Errorf("outbox: %w", err)
		}
		if err := f.Truncate(size); err != nil {
			return nil, nil, 0, fmt.Errorf("outbox: %w", err)
		}
		data, err := mapFile(f, int(size))
		if err != nil {
			return nil, nil, 0, err
		}
		copy(data, magic[:])
		binary.LittleEndian.PutUint32(data[8:], SlotSize)
		binary.LittleEndian.PutUint32(data[12:], uint32(slots))
		o := &Outbox{f: f, data: data}
		o.freeAll(slots)
		entries := make([]Entry, 0, len(left))
		for _, p := range left {
			s, _ := o.Keep(p) // fits: the file was sized for them
			entries = append(entries, Entry{Slot: s, Data: p})
		}
		return o, entries, damaged, nil
	}
	// Of this geometry: its entries stay where they are.
	data, err := mapFile(f, int(size))
	if err != nil {
		return nil, nil, 0, err
	}
	o := &Outbox{f: f, data: data, free: make([]int32, 0, slots)}
	var entries []Entry
	damaged := 0
	for s := slots; s >= 1; s-- {
		b := data[s*SlotSize:][:SlotSize]
		p, ok, torn := entry(b)
		switch {
		case ok:
			entries = append(entries, Entry{Slot: int32(s), Data: p})
		case torn:
			damaged++
			binary.LittleEndian.PutUint32(b, 0)
			fallthrough
		default:
			o.free = append(o.free, int32(s))
		}
	}
	return o, entries, damaged, nil
}

// freeAll makes slots 1..n free, the lowest to be used first.
func (o *Outbox) freeAll(n int) {
	o.free = make([]int32, 0, n)
	for s := n; s >= 1; s-- {
		o.free = append(o.free, int32(s))
	}
}

// readLeft reads the entries kept in f, whatever its geometry, and counts
// the damaged ones. A file without the header (new, or not an outbox)
// holds none.
func readLeft(f *os.File) (left [][]byte, damaged int, err error) {
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("outbox: %w", err)
	}
	var h [16]byte
	if st.Size() < int64(len(h)) {
		return nil, 0, nil
	}
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return nil, 0, fmt.Errorf("outbox: %w", err)
	}
	if [8]byte(h[:8]) != magic {
		return nil, 0, nil
	}
	size := int64(binary.LittleEndian.Uint32(h[8:]))
	n := int64(binary.LittleEndian.Uint32(h[12:]))
	if size <= header || size > 1<<20 {
		return nil, 0, fmt.Errorf("outbox: bad slot size %d in the header", size)
	}
	slot := make([]byte, size)
	for s := int64(1); s <= n && (s+1)*size <= st.Size(); s++ {
		if _, err := f.ReadAt(slot, s*size); err != nil {
			return nil, 0, fmt.Errorf("outbox: %w", err)
		}
		if p, ok, torn := entry(slot); ok {
			left = append(left, p)
		} else if torn {
			damaged++
		}
	}
	return left, damaged, nil
}

// entry reads one slot: its payload when it holds one whole (ok), or torn
// when it holds a damaged one.
func entry(slot []byte) (p []byte, ok, torn bool) {
	n := binary.LittleEndian.Uint32(slot)
	if n == 0 {
		return nil, false, false
	}
	if int64(n) > int64(len(slot)-header) {
		return nil, false, true
	}
	p = slot[header : header+n]
	if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(slot[4:]) {
		return nil, false, true
	}
	return append([]byte(nil), p...), true, false
}

// Keep writes p to a free slot and returns it; ok is false when no slot is
// free or p does not fit in one. The length goes last: a slot whose
// length is set and whose checksum matches holds p whole.
func (o *Outbox) Keep(p []byte) (slot int32, ok bool) {
	if len(p) == 0 || len(p) > SlotSize-header {
		o.full.Add(1)
		return 0, false
	}
	o.mu.Lock()
	if len(o.free) == 0 {
		o.mu.Unlock()
		o.full.Add(1)
		return 0, false
	}
	slot = o.free[len(o.free)-1]
	o.free = o.free[:len(o.free)-1]
	o.mu.Unlock()
	b := o.data[int(slot)*SlotSize:][:SlotSize]
	copy(b[header:], p)
	binary.LittleEndian.PutUint32(b[4:], crc32.Checksum(p, castagnoli))
	binary.LittleEndian.PutUint32(b, uint32(len(p)))
	return slot, true
}

// Drop frees slot, which Keep (or Open) returned.
func (o *Outbox) Drop(slot int32) {
	binary.LittleEndian.PutUint32(o.data[int(slot)*SlotSize:], 0)
	o.mu.Lock()
	o.free = append(o.free, slot)
	o.mu.Unlock()
}

// Kept is how many entries the outbox holds.
func (o *Outbox) Kept() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return (len(o.data)/SlotSize - 1) - len(o.free)
}

// Refused is how many entries Keep refused (no free slot, or too large).
func (o *Outbox) Refused() int64 { return o.full.Load() }

// Close unmaps and closes the file. What it holds stays in it, for the
// next Open.
func (o *Outbox) Close() error {
	err := unmap(o.data)
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	return err
}
