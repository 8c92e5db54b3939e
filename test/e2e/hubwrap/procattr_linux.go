package main

import "syscall"

// dieWithParent makes a backend die with hubwrap (Linux's parent-death
// signal), so a killed test leaves no Hub behind.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
