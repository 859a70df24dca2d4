package testenv

import "syscall"

// sysProcAttr puts the child in its own process group, and has the kernel
// kill it if the test binary dies without cleaning up (a -timeout panic, a
// SIGKILL), so no apiserver outlives its tests.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
