package faults_test

import "syscall"

// childAttr makes the kernel kill a helper process if the test binary dies first.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
