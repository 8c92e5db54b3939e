//go:build !linux

package main

import "syscall"

// dieWithParent: only Linux has a parent-death signal; elsewhere hubwrap's
// own shutdown stops the backends.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{} }
