package main

import (
	"os"
	"syscall"
)

// pageFaults is the minor plus major page faults of a finished process.
func pageFaults(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Minflt + ru.Majflt
	}
	return 0
}
