package redistest

import (
	"os/exec"
	"syscall"
)

// setDeathSignal has the kernel kill the server if the test binary dies
// without running its cleanups (a panic or a test timeout).
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
