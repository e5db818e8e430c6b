package redisproc

import "syscall"

// sysProcAttr puts the server in a process group of its own and asks the kernel to kill
// it if the thread that started it dies, so a crashed or timed-out test binary leaves no
// server behind. Go only ends a thread when a goroutine exits while locked to it, which
// neither this package nor go-redis does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
