//go:build unix

package outbox

import (
	"fmt"
	"os"
	"syscall"
)

// mapFile maps the first size bytes of f, shared: writes to the mapping are
// the file's, in the page cache, whatever becomes of the process.
func mapFile(f *os.File, size int) ([]byte, error) {
	b, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("outbox: map %s: %w", f.Name(), err)
	}
	return b, nil
}

func unmap(b []byte) error { return syscall.Munmap(b) }

// lockFile takes an exclusive lock on f without waiting. The kernel releases
// it when the process dies, however it dies.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
