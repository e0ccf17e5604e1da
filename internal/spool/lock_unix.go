//go:build unix

package spool

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on f without waiting. The kernel releases
// it when the process dies, however it dies.
func lockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}
